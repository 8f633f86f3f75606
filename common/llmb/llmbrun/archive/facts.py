"""The facts of the system an archive records (system.json): this host and Python, llmb's
version, each workload's venv, nemo-run and image, the Slurm cluster, and the GPUs that the
newest preflight job saw on the compute nodes (a login node usually has none to ask)."""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import platform
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from llmb.llmbrun.clusterconfig import ClusterConfig
from llmb.recipes import catalog
from llmb.shared import clock, slurmquery

if TYPE_CHECKING:
    from llmb.llmbrun.preflight import PreflightReport


class WorkloadFacts(TypedDict, total=False):
    """A workload's venv, nemo-run and image, as system.json holds them."""

    venv_kind: str
    nemo_run: str | None
    image_reference: str
    image_file: str
    image_bytes: int
    image_mtime: str


class SystemFacts(TypedDict):
    """system.json: this host and Python, llmb, the workloads, the Slurm cluster, the GPUs."""

    hostname: str
    platform: str
    python: str
    llmb: dict[str, str | None]
    gpu_type: str | None
    cluster_type: str
    slurm: dict[str, object] | None
    workloads: dict[str, WorkloadFacts]
    cluster: dict[str, object]
    gpus_on_this_node: list[str] | None
    gpus_in_jobs: dict[str, str | None] | None


def gpu_facts_from_preflight(found_report: PreflightReport | None
                             ) -> dict[str, str | None] | None:
    """What the newest preflight job saw on the compute nodes (GPUs, driver): a login node
    usually has no GPU to ask."""
    checks = (found_report or {}).get("checks") or []
    found: dict[str, str | None] = {c["name"]: c["detail"] for c in checks
                                    if c["name"].startswith(("gpus", "driver"))}
    return ({"preflight": found_report.get("created"), **found} if found and found_report
            else None)


def system_facts(cfg: ClusterConfig, preflight: PreflightReport | None = None
                 ) -> SystemFacts:
    from llmb.launch import job  # version helpers; nemo-run is not imported by them

    facts: SystemFacts = {
        "hostname": platform.node(), "platform": platform.platform(),
        "python": platform.python_version(),
        "llmb": {"version": job.llmb_version(), "git_commit": job.git_commit()},
        "gpu_type": cfg.gpu_type, "cluster_type": cfg.cluster_type,
        "slurm": dict(cfg.slurm.record()) if cfg.slurm else None,
        "workloads": {}, "cluster": {}, "gpus_on_this_node": None, "gpus_in_jobs": None,
    }
    for name, w in cfg.workloads.items():
        entry = WorkloadFacts(venv_kind=w.venv_kind)
        entry["nemo_run"] = nemo_run_version(str(w.python))
        with contextlib.suppress(catalog.CatalogError):
            entry["image_reference"] = catalog.find_recipe(name).image
        if w.image:
            image = Path(w.image)
            entry["image_file"] = image.name
            with contextlib.suppress(OSError):
                st = image.stat()
                entry["image_bytes"] = st.st_size
                entry["image_mtime"] = clock.iso(st.st_mtime)
        facts["workloads"][name] = entry
    if cfg.cluster_type == "slurm":
        facts["cluster"] = dict(slurmquery.cluster_facts())
    listed = _output(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                      "--format=csv,noheader"])
    facts["gpus_on_this_node"] = None if listed is None else \
        [ln for ln in listed.splitlines() if ln.strip()]
    facts["gpus_in_jobs"] = gpu_facts_from_preflight(preflight)
    return facts


@functools.cache
def nemo_run_version(python: str) -> str | None:
    """nemo-run's version in a venv (workloads often share one: asked once each; llmb-run's
    own Python is asked in-process)."""
    if python == sys.executable:
        try:
            return importlib.metadata.version("nemo_run")
        except importlib.metadata.PackageNotFoundError:
            return None
    return _output([python, "-c", "import importlib.metadata as m; "
                    "print(m.version('nemo_run'))"])


def _output(argv: list[str]) -> str | None:
    """A local command's output (nvidia-smi, a venv's python), None where it cannot answer."""
    if shutil.which(argv[0]) is None:
        return None
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, errors="replace",
                              timeout=slurmquery.TIMEOUT_S, check=False, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return None
    if proc.returncode != 0:
        return None
    return proc.stdout.strip()
