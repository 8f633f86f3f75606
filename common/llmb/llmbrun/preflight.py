"""`llmb-run preflight`: does this cluster run llmb's jobs as configured? Named checks, each
pass | fail | warn | skip with a one-line detail; exit 0 when nothing fails.

Login node: Slurm commands, the partition (sinfo), the account (sacctmgr, when there is
accounting), GPU GRES against the GPUs a job requests, PMIx (`srun --mpi=list`), pyxis
(`--container-image` among srun's options), the imported image (present, a squashfs), sbatch's
`--segment` where it is needed, free disk under LLMB_INSTALL, the HF token where a workload
needs it. Then ONE short job on the configured account and partition (`--nodes N`, the
placement flags, the same GPU request a benchmark makes) that runs `srun --mpi=pmix` and, in
the container, common/preflight_probe.sh on every node: GPUs visible (`nvidia-smi -L`) against
the GPUs per node, the driver against what the image says it needs, RDMA devices and NCCL's
network plugins (warn when NCCL would fall back to TCP sockets), IMEX channels on GB200.
The report is also written to $LLMB_INSTALL/preflight/ (latest.json is the newest), where
`llmb-run archive` finds it.
"""

from __future__ import annotations

import getpass
import json
import os
import re
import shlex
import shutil
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated, TypedDict

from llmb.launch.placement import Placement, PlacementRecord
from llmb.llmbrun import slurmjob
from llmb.llmbrun.clusterconfig import ClusterConfig, SlurmSettings
from llmb.llmbrun.errors import PROG, RunError
from llmb.recipes import catalog
from llmb.shared import clock, files, records, slurmquery, values
from llmb.shared.records import Bound

JOB_NAME = "llmb-preflight"
JOB_TIME = "00:10:00"
DEFAULT_TIMEOUT_S = 900
PROBE = catalog.REPO_ROOT / "common" / "preflight_probe.sh"
FREE_FAIL_GB = 1
FREE_WARN_GB = 100
SQUASHFS_MAGIC = b"hsqs"
STATUSES = ("pass", "fail", "warn", "skip")
SBATCH_REFUSED = "sbatch refused the preflight job"
REPORT_FILE = "preflight.json"
LATEST_FILE = "latest.json"
MAX_OUTPUT_BYTES = 16 << 20  # the job's output: a few lines per node
MAX_REPORT_BYTES = 1 << 20  # a preflight report: a few KB


@dataclass
class Check:
    name: str
    status: str
    detail: str


Name = Annotated[str, Bound(text=256)]


class CheckRecord(TypedDict):
    name: Name
    status: Name  # pass | fail | warn | skip
    detail: str


class PreflightReport(TypedDict, total=False):
    """preflight.json (and latest.json, the newest): what `cmd_preflight` writes; archive
    reads it back (`latest`)."""

    created: Name
    nodes: int
    placement: PlacementRecord
    gpu_type: Name
    checks: Annotated[list[CheckRecord], Bound(items=1024)]


# --- login-node checks ------------------------------------------------------------------------

def check_commands() -> Check:
    missing = [c for c in ("sbatch", "srun", "squeue", "scontrol", "sinfo", "scancel")
               if shutil.which(c) is None]
    if missing:
        return Check("slurm_commands", "fail", f"not on PATH: {', '.join(missing)}")
    try:
        return Check("slurm_commands", "pass", slurmquery.version())
    except slurmquery.SlurmUnavailable as exc:
        return Check("slurm_commands", "fail", str(exc))


def check_partition(slurm: SlurmSettings, nodes: int
                    ) -> tuple[Check, slurmquery.PartitionFacts | None]:
    name = slurm.partition
    try:
        facts = slurmquery.partition_facts(name)
    except slurmquery.SlurmUnavailable as exc:
        return Check("partition", "fail", f"sinfo cannot list partition {name}: {exc}"), None
    if facts is None:
        try:
            known = ", ".join(p.name for p in slurmquery.partitions())
        except slurmquery.SlurmUnavailable:
            known = "?"
        return Check("partition", "fail", f"partition {name} does not exist (sinfo lists: "
                                          f"{known}); fix launcher.slurm.partition"), None
    if facts.available != "up":
        return Check("partition", "fail", f"partition {name} is {facts.available}"), facts
    if nodes > facts.nodes:
        return Check("partition", "fail", f"partition {name} has {facts.nodes} node(s); the "
                                          f"preflight job asks for {nodes}"), facts
    return Check("partition", "pass", f"{name}: up, {facts.nodes} node(s), {facts.idle} idle"
                 ), facts


def check_gres(cfg: ClusterConfig, facts: slurmquery.PartitionFacts | None) -> Check:
    need = cfg.gpus_per_node
    request = slurmjob.gpu_request(cfg)
    if facts is None:
        return Check("gres", "skip", "partition unknown")
    offered = slurmquery.Partition(facts.name, False, facts.gres).gpus
    if not offered:
        return Check("gres", "fail", f"partition {facts.name} offers no GPU GRES; jobs request "
                                     f"{request}, which Slurm refuses without it")
    if offered < need:
        return Check("gres", "fail", f"nodes offer {facts.gres}; a {cfg.gpu_type} benchmark "
                                     f"needs {need} GPUs per node")
    return Check("gres", "pass", f"jobs request {request}; nodes offer {facts.gres}")


def check_account(slurm: SlurmSettings) -> Check:
    account = slurm.account
    user = os.environ.get("USER") or getpass.getuser()
    try:
        names = slurmquery.accounts(user)
    except slurmquery.SlurmUnavailable as exc:
        return Check("account", "warn", f"cannot list {user}'s accounts ({exc}); the "
                                        "preflight job's submission tests the account")
    if account not in names:
        return Check("account", "fail", f"{user} has no association with account {account} "
                                        f"(sacctmgr lists: {', '.join(names)})")
    return Check("account", "pass", f"{user} may use account {account}")


def check_pmix_login() -> Check:
    try:
        types = slurmquery.mpi_types()
    except slurmquery.SlurmUnavailable as exc:
        return Check("pmix", "fail", str(exc))
    pmix = [t for t in types if t.startswith("pmix")]
    if not pmix:
        return Check("pmix", "fail", f"srun --mpi=list offers {', '.join(types) or 'nothing'};"
                                     " llmb's jobs use srun --mpi=pmix")
    return Check("pmix", "pass", f"srun offers {', '.join(pmix)}")


def check_pyxis() -> Check:
    try:
        registered = slurmquery.has_option("srun", "--container-image")
    except slurmquery.SlurmUnavailable as exc:
        return Check("pyxis", "fail", str(exc))
    if not registered:
        return Check("pyxis", "fail", "srun has no --container-image option: pyxis (the Slurm "
                                      "container plugin) is not installed")
    return Check("pyxis", "pass", "srun accepts --container-image")


def _file_problem(path: str, exc: OSError | files.FileRefused) -> str:
    """`PATH: No such file or directory`, `PATH is not a regular file`."""
    if isinstance(exc, OSError):
        return f"{path}: {exc.strerror}"
    if exc.reason.startswith("cannot be read ("):
        return f"{path}: {exc.reason.removeprefix('cannot be read (').removesuffix(')')}"
    return f"{path} {exc.reason}"


def check_image(cfg: ClusterConfig) -> Check:
    paths = cfg.images()
    if not paths:
        return Check("image", "skip", "no image configured (the installer's image.method: "
                                      "skip)")
    details = []
    for path in paths:
        p = Path(path)
        try:
            magic = files.read_head(p, 4)
            size = p.stat().st_size
        except (OSError, files.FileRefused) as exc:
            return Check("image", "fail", f"{_file_problem(path, exc)}; import it (rerun the "
                                          "installer, or <recipe>/setup.sh)")
        if magic != SQUASHFS_MAGIC:
            return Check("image", "fail", f"{path} is not a squashfs image (it starts with "
                                          f"{magic!r}); import it again")
        details.append(f"{p.name} ({size / 1e9:.1f} GB, squashfs)")
    return Check("image", "pass", ", ".join(details))


def check_segment(cfg: ClusterConfig, place: Placement) -> Check:
    gpu = cfg.gpu
    if place.segment is None and not gpu.segment_max_nodes:
        return Check("segment", "skip", f"not used on {cfg.gpu_type} without --segment")
    try:
        ok = slurmquery.has_option("sbatch", "--segment")
    except slurmquery.SlurmUnavailable as exc:
        return Check("segment", "fail", str(exc))
    why = (f"--segment={place.segment}" if place.segment is not None else
           f"{cfg.gpu_type} runs above {gpu.segment_max_nodes} nodes use --segment")
    if not ok:
        return Check("segment", "fail", f"{why}, and this sbatch has no --segment "
                                        "(Slurm 24.05 or newer has it)")
    return Check("segment", "pass", f"sbatch accepts --segment ({why})")


def check_disk(cfg: ClusterConfig) -> Check:
    try:
        free = shutil.disk_usage(cfg.install).free / 1e9
    except OSError as exc:
        return Check("disk", "fail", f"{cfg.install}: {exc.strerror}")
    detail = f"{free:.0f} GB free under {cfg.install}"
    if free < FREE_FAIL_GB:
        return Check("disk", "fail", f"{detail}: logs and results cannot be written")
    if free < FREE_WARN_GB:
        return Check("disk", "warn", f"{detail}: enough for logs, not for checkpoints of the "
                                     "larger models (ENABLE_CHECKPOINT) or another image")
    return Check("disk", "pass", detail)


def check_hf_token(cfg: ClusterConfig) -> Check:
    needs = [w for w in cfg.workloads if w in {r.workload for r in catalog.all_recipes()}
             and catalog.find_recipe(w).data.get("requires_hf_token")]
    if not needs:
        return Check("hf_token", "skip", "no installed workload needs a Hugging Face token")
    if os.environ.get("HF_TOKEN", "").strip():
        return Check("hf_token", "pass", f"HF_TOKEN is set (for {', '.join(needs)})")
    path = cfg.hf_token_file
    if not path:
        return Check("hf_token", "fail", f"{', '.join(needs)} needs a Hugging Face token: "
                                         "set hf_token_file (installer) or HF_TOKEN")
    try:
        present = bool(files.read_token(path))
        mode = Path(path).stat().st_mode & 0o777
    except (OSError, files.FileRefused) as exc:
        return Check("hf_token", "fail", _file_problem(path, exc))
    if not present:
        return Check("hf_token", "fail", f"{path} is empty")
    if mode & 0o077:
        return Check("hf_token", "warn", f"{path} is readable by others (mode {mode:o}); "
                                         f"chmod 600 {path}")
    return Check("hf_token", "pass", f"{path} (mode {mode:o}) for {', '.join(needs)}")


# --- the job ----------------------------------------------------------------------------------

def job_spec(nodes: int, workdir: Path) -> slurmjob.JobSpec:
    """One task per node, the benchmark's GPU request (slurmjob), a short time limit."""
    return slurmjob.JobSpec(JOB_NAME, nodes, 1, JOB_TIME, workdir / "preflight-%j.out")


def job_script(image: str | None, args: list[str]) -> str:
    q = shlex.quote
    mount = f"{PROBE.parent}:{PROBE.parent}"
    container = f"--container-image={q(image)} --container-mounts={q(mount)} " if image else ""
    return (
        "#!/bin/bash\n"
        "# llmb preflight job, written by llmb-run preflight. Submitted as:\n"
        f"# sbatch {shlex.join(args)} <this file>\n"
        "set -u\n"
        'echo "LLMB_PREFLIGHT nodes ${SLURM_JOB_NODELIST:-}"\n'
        "if srun --mpi=pmix --ntasks-per-node=1 true; then echo 'LLMB_PREFLIGHT pmix ok'; "
        "else echo \"LLMB_PREFLIGHT pmix fail $?\"; fi\n"
        f"if srun --ntasks-per-node=1 {container}bash {q(str(PROBE))}; then "
        "echo 'LLMB_PREFLIGHT probe ok'; else echo \"LLMB_PREFLIGHT probe fail $?\"; fi\n"
    )


def parse_output(text: str) -> tuple[dict[str, dict[str, str]], dict[str, str]]:
    """(per node facts, job step markers) from the job's output."""
    nodes: dict[str, dict[str, str]] = {}
    marks: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("LLMB_PROBE "):
            parts = line.split(" ", 3)
            if len(parts) >= 3:
                nodes.setdefault(parts[1], {})[parts[2]] = parts[3].strip() if len(parts) > 3 \
                    else ""
        elif line.startswith("LLMB_PREFLIGHT "):
            _, key, *rest = line.split(" ", 2)
            marks[key] = rest[0].strip() if rest else ""
    return nodes, marks


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text)[:3])


def judge_gpus(nodes: dict[str, dict[str, str]], need: int, gpu_type: str) -> Check:
    if not nodes:
        return Check("gpus", "fail", "no node reported (the probe did not run)")
    bad = []
    for name, facts in sorted(nodes.items()):
        if "gpus_error" in facts:
            bad.append(f"{name}: {facts['gpus_error']}")
        elif facts.get("gpus", "0") != str(need):
            bad.append(f"{name} sees {facts.get('gpus', '0')} GPU(s)")
    if bad:
        return Check("gpus", "fail", "; ".join(bad) + f" (GPUS_PER_NODE for {gpu_type} is "
                                                      f"{need})")
    names = sorted({f.get("gpu_name", "?") for f in nodes.values()})
    return Check("gpus", "pass", f"{len(nodes)} node(s), {need} GPUs each ({', '.join(names)})")


def judge_driver(nodes: dict[str, dict[str, str]]) -> Check:
    drivers = {n: f.get("driver", "") for n, f in nodes.items() if f.get("driver")}
    if not drivers:
        return Check("driver", "skip", "no driver version (nvidia-smi did not report one)")
    facts = next(iter(nodes.values()))
    needed, require = facts.get("cuda_driver_version", ""), facts.get("require_cuda", "")
    shown = ", ".join(sorted(set(drivers.values())))
    if not needed and not require:
        return Check("driver", "skip", f"driver {shown}; the image does not say which driver "
                                       "it needs (no CUDA_DRIVER_VERSION/NVIDIA_REQUIRE_CUDA)")
    cuda = facts.get("cuda_version") or "?"
    branches = [(int(lo), int(hi)) for lo, hi in
                re.findall(r"driver>=(\d+),driver<(\d+)", require)]
    too_old = []
    for node, drv in sorted(drivers.items()):
        v = _version(drv)
        if needed and v >= _version(needed):
            continue
        if branches and v and any(lo <= v[0] < hi for lo, hi in branches):
            continue  # a forward-compatibility branch the image lists
        too_old.append(f"{node} has {drv}")
    if too_old:
        return Check("driver", "fail", f"{'; '.join(too_old)}: older than {needed or '?'}, "
                                       f"which the image's CUDA {cuda} needs, and not a "
                                       "forward-compatible branch it lists")
    return Check("driver", "pass", f"driver {shown} runs the image's CUDA {cuda}")


def judge_network(nodes: dict[str, dict[str, str]]) -> Check:
    sockets, via = [], set()
    for name, facts in sorted(nodes.items()):
        env = facts.get("nccl_env", "")
        if re.search(r"NCCL_NET=Socket\b", env, re.IGNORECASE) or "NCCL_IB_DISABLE=1" in env:
            sockets.append(f"{name}: {env.strip()} forces sockets")
        elif facts.get("rdma"):
            via.add(f"RDMA {facts['rdma']}")
        elif facts.get("nccl_net_plugin"):
            via.add(f"plugin {facts['nccl_net_plugin']}")
        else:
            sockets.append(name)
    if sockets:
        return Check("network", "warn", f"no InfiniBand/RDMA device and no NCCL network plugin "
                                        f"on {', '.join(sockets)}: NCCL will use TCP sockets "
                                        "between nodes, and multi-node runs fall well short of "
                                        "the reference")
    return Check("network", "pass", f"NCCL can use {'; '.join(sorted(via))}")


def judge_imex(nodes: dict[str, dict[str, str]], gpu_type: str) -> Check:
    if gpu_type != "gb200":
        return Check("imex", "skip", f"IMEX channels matter on GB200, not {gpu_type}")
    missing = [n for n, f in sorted(nodes.items()) if f.get("imex_channels", "0") == "0"]
    if missing:
        return Check("imex", "fail", f"no IMEX channel (/dev/nvidia-caps-imex-channels) on "
                                     f"{', '.join(missing)}: multi-node NVLink needs one")
    return Check("imex", "pass", "IMEX channels present on every node")


def job_checks(cfg: ClusterConfig, nodes: int, place: Placement, timeout_s: float,
               workdir: Path) -> list[Check]:
    image = next(iter(cfg.images()), None)
    spec = job_spec(nodes, workdir)
    options = slurmjob.sbatch_options(cfg, spec, place)
    script = workdir / "preflight.sbatch"
    files.atomic_write(script, job_script(image, options), files.EXECUTABLE)
    try:
        job = slurmjob.submit(script, options)
    except slurmjob.SubmitRefused as exc:
        return [Check("job", "fail", f"{SBATCH_REFUSED}: {exc}")]
    ended = slurmjob.wait(job, timeout_s, "preflight job")
    info, output_path = ended.info, spec.output_of(job)
    if ended.timed_out:
        return [Check("job", "fail", f"job {job} still {info.state}"
                      + (f" ({info.reason})" if info.reason else "")
                      + f" after {timeout_s:.0f} s; cancelled")]
    try:
        text = files.read_bounded(output_path, MAX_OUTPUT_BYTES).decode(errors="replace")
    except files.FileRefused:
        text = ""
    facts, marks = parse_output(text)
    where = f" on {info.nodes}" if info.nodes else ""
    done = info.state in ("COMPLETED", slurmquery.PURGED) and "probe" in marks
    slurm = cfg.require_slurm("preflight")
    checks = [Check("job", "pass" if done else "fail",
                    f"job {job} {info.state}{where} (account {slurm.account}, partition "
                    f"{slurm.partition}); output {output_path}")]
    pmix = marks.get("pmix")
    checks.append(Check("pmix_job", "pass" if pmix == "ok" else "fail",
                        "srun --mpi=pmix ran a step" if pmix == "ok" else
                        f"srun --mpi=pmix failed in the job ({pmix or 'no result'})"))
    probe = marks.get("probe")
    if image:
        checks.append(Check("container", "pass" if probe == "ok" else "fail",
                            f"srun --container-image ran the probe on {len(facts)} node(s)"
                            if probe == "ok" else
                            f"the container step failed ({probe or 'no result'}); see "
                            f"{output_path}"))
    else:
        checks.append(Check("container", "skip", "no image configured; probed the host"))
    checks += [judge_gpus(facts, cfg.gpus_per_node, cfg.gpu_type), judge_driver(facts),
               judge_network(facts), judge_imex(facts, cfg.gpu_type)]
    return checks


# --- the command ------------------------------------------------------------------------------

def run_checks(cfg: ClusterConfig, nodes: int, place: Placement, timeout_s: float,
               workdir: Path) -> list[Check]:
    slurm = cfg.require_slurm("preflight")
    checks = [check_commands()]
    if checks[0].status == "fail":
        return [*checks, check_image(cfg), check_disk(cfg), check_hf_token(cfg)]
    part, facts = check_partition(slurm, nodes)
    checks += [check_account(slurm), part, check_gres(cfg, facts), check_pmix_login(),
               check_pyxis(), check_image(cfg), check_segment(cfg, place), check_disk(cfg),
               check_hf_token(cfg)]
    if part.status == "fail":
        checks.append(Check("job", "skip", "not submitted: the partition check failed"))
        return checks
    job = job_checks(cfg, nodes, place, timeout_s, workdir)
    account = next(c for c in checks if c.name == "account")
    if account.status == "warn" and job[0].status == "pass":
        account.status, account.detail = "pass", (f"sbatch accepted account "
                                                  f"{slurm.account} (no accounting "
                                                  "database lists associations)")
    elif account.status == "warn" and job[0].detail.startswith(SBATCH_REFUSED) and \
            "account" in job[0].detail.lower():
        account.status, account.detail = "fail", job[0].detail
    return checks + job


def cmd_preflight(cfg: ClusterConfig, nodes: int, fmt: str, place: Placement,
                  timeout_s: float = DEFAULT_TIMEOUT_S) -> int:
    cfg.require_slurm("preflight")
    slurmjob.check_placement(place, nodes)
    workdir = cfg.tree.preflight / clock.stamp()
    try:
        workdir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RunError(f"cannot create {workdir}: {exc.strerror}") from None
    checks = run_checks(cfg, nodes, place, timeout_s, workdir)
    report = {"created": clock.iso(), "nodes": nodes, "placement": place.record(),
              "gpu_type": cfg.gpu_type, "checks": [asdict(c) for c in checks]}
    text = json.dumps(report, indent=2) + "\n"
    files.write_private(workdir / REPORT_FILE, text)  # account, nodes: the user's values
    files.write_private(cfg.tree.preflight / LATEST_FILE, text)
    if fmt == "json":
        print(json.dumps({"checks": report["checks"], "nodes": nodes}, indent=2))
    else:
        width = max(len(c.name) for c in checks)
        for c in checks:
            print(f"{c.name:<{width}}  {c.status:<4}  {values.shown(c.detail)}")  # a job's words
    failed = [c.name for c in checks if c.status == "fail"]
    if failed:
        print(f"{PROG}: preflight: {len(failed)} check(s) failed: {', '.join(failed)}",
              file=sys.stderr)
        return 1
    return 0


def latest(cfg: ClusterConfig) -> PreflightReport | None:
    """The newest preflight report of this install, None when there is none; RunError (one
    line naming the file and the field) when it cannot be read or is not of its type."""
    path = cfg.tree.preflight / LATEST_FILE
    try:
        data = json.loads(files.read_bounded(path, MAX_REPORT_BYTES))
    except files.FileRefused as exc:
        if exc.missing:
            return None
        raise RunError(f"preflight report {exc}") from None
    except (ValueError, RecursionError):
        raise RunError(f"preflight report {values.shown(path)} is not JSON") from None
    try:
        return records.check(PreflightReport, data)
    except records.BadRecord as exc:
        raise RunError(f"preflight report {values.shown(path)}: {exc.problem}") from None
