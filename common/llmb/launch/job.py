"""Where one run lives and what it records: the paths of a run, its manifest, the command
each rank runs. Shared by the backends (llmb.launch.slurm, runai, local) and llmb.launch.experiment.

Layout (nemo-run's own naming), under $LLMB_WORKLOAD/experiments:
    <exp>/<exp>_<time_ns>/          run dir: llmb_manifest.json, <exp>_sbatch.sh, nemo-run state
    <exp>/<exp>_<time_ns>/<exp>/    job dir: log-<job name>_<jobid>_<restart>.out,
                                    sbatch_<job name>_<jobid>.out, nsys_profile/, and code/
                                    (the container's working directory, where NeMo writes
                                    nemo_experiments/ with the checkpoints)
"""

from __future__ import annotations

import functools
import platform
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from llmb import manifest as run_manifest
from llmb.launch.request import Request
from llmb.recipes import catalog
from llmb.shared import clock

NEMO_RUN_VERSION = "0.11.1"


@dataclass(frozen=True)
class JobPaths:
    """Where one run lives; all absolute host paths (valid in the container too)."""

    experiment: str  # <exp>: title and task name
    run_id: str  # <exp>_<time_ns>
    run_dir: Path  # experiments/<exp>/<exp>_<time_ns>
    job_dir: Path  # run_dir/<exp>

    @property
    def manifest(self) -> Path:
        return run_manifest.path_in(self.run_dir)

    @classmethod
    def new(cls, req: Request, stamp: int | None = None) -> JobPaths:
        exp = req.experiment_name
        run_id = f"{exp}_{stamp if stamp is not None else time.time_ns()}"
        run_dir = req.experiments_dir / exp / run_id
        return cls(exp, run_id, run_dir, run_dir / exp)


def repo_root() -> Path:
    return catalog.REPO_ROOT


def entrypoint_file(req: Request) -> Path:
    return req.recipe.directory / str(req.recipe.data["entrypoint"])


# --- the run manifest -------------------------------------------------------------------------

def llmb_version() -> str:
    text = (repo_root() / "pyproject.toml").read_text()
    found = re.search(r'^version\s*=\s*"([^"]+)"', text, re.MULTILINE)
    return found.group(1) if found else "unknown"


@functools.lru_cache(maxsize=1)  # the checkout's commit, asked of git once a process
def git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(repo_root()), "rev-parse", "HEAD"],
                             capture_output=True, text=True, timeout=5, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def nemo_run_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("nemo_run")
    except metadata.PackageNotFoundError:
        return NEMO_RUN_VERSION


def build_manifest(req: Request, paths: JobPaths, created: str | None = None,
                   commit: str | None = None,
                   bridge: run_manifest.Bridge | None = None) -> dict[str, object]:
    """The run manifest (schema 1): what the in-container half needs; never a secret.
    `bridge`: a Megatron-Bridge run's (llmb.launch.bridgejob), whose NeMo fields are empty."""
    cfg = req.config
    return {
        "schema": run_manifest.SCHEMA,
        "recipe": req.recipe.name,
        "workload": req.recipe.workload,
        "experiment": paths.experiment,
        "model_size": cfg.model_size,
        "dtype": cfg.dtype,
        "gpu_type": cfg.gpu_type,
        "num_gpus": cfg.num_gpus,
        "gpus_per_node": cfg.gpus_per_node,
        "nodes": cfg.nodes,
        "scaling": cfg.scaling,
        "published": cfg.published,
        "source": cfg.source,
        "seq_length": cfg.seq_length,
        "family": req.recipe.family,
        **_nemo_fields(req, bridge is not None),
        "parallelism": {"tp": cfg.tp, "pp": cfg.pp, "cp": cfg.cp, "vp": cfg.vp, "ep": cfg.ep,
                        "mbs": cfg.mbs, "gbs": cfg.gbs, "dp": cfg.dp, "ga": cfg.ga,
                        "num_layers": cfg.num_layers},
        "cluster_type": req.cluster_type,
        **({"placement": req.placement.record()} if req.placement else {}),
        "options": {
            "max_steps": req.max_steps,
            "smoke_test": req.smoke_test,
            "profile": req.profile,
            "profile_start_step": req.profile_start_step,
            "profile_stop_step": req.profile_stop_step,
            "gpu_metrics": req.gpu_metrics,
            "nccl_trace": req.nccl_trace,
            "checkpoint_save": req.checkpoint_save,
            "checkpoint_load_path": (str(req.checkpoint_load_path)
                                     if req.checkpoint_load_path else None),
            "time_limit": req.time_limit,
            "dry_run": req.dry_run,
        },
        "image": req.image,
        "job_dir": str(paths.job_dir),
        "versions": {
            "llmb": llmb_version(),
            "framework": str(req.recipe.data["framework"]["version"]),
            "nemo_run": nemo_run_version(),
            "python": platform.python_version(),
        },
        "git_commit": commit,
        "created": created or clock.iso(),
        **({"framework": "megatron-bridge", "bridge": dict(bridge)} if bridge else {}),
    }


def _nemo_fields(req: Request, bridge: bool) -> dict[str, object]:
    """The NeMo recipe, job settings and model shape of the row; empty for a Megatron-Bridge
    run, whose model recipe in Megatron-Bridge holds them."""
    if bridge:
        return {"nemo_recipe": "", "nemo": {}, "model": {}}
    size = req.recipe.size(req.config.model_size)
    return {"nemo_recipe": size["nemo_recipe"], "nemo": req.recipe.nemo_settings(req.config),
            "model": dict(size["model"])}


# --- the command each rank runs ---------------------------------------------------------------

def train_command(req: Request, paths: JobPaths) -> list[str]:
    """`python <repo>/<recipe>/<entrypoint> train --manifest <abs path>` as argv."""
    return ["python", str(entrypoint_file(req)), "train", "--manifest", str(paths.manifest)]
