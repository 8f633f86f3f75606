"""End to end on the real test Slurm cluster: launch.sh -> nemo-run -> sbatch -> srun tasks ->
log in the experiments layout -> parse_train_timing.sh.

Every recipe runs its smoke workload (SMOKE_TEST=true: a tiny real PyTorch training loop in
place of NeMo) on 2 nodes x 8 tasks through the job script nemo-run generates, unchanged. What
cannot exist here is doubled, and only that: the container (the pyxis SPANK stub in
tests/slurm ignores the image and honours the mounts), the image file (an empty placeholder
at the path setup.sh would import to), and a two-socket NUMA host (tests/e2e/bin/numactl).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
E2E_BIN = REPO / "tests" / "e2e" / "bin"
ANALYZER = REPO / "common" / "parse_train_timing.sh"
JOB_TIMEOUT = 420  # seconds; 16 CPU ranks on 2 cores import torch before the first step
RECIPES = {  # folder -> (workload key, default size)
    "llama3.1": ("pretrain_llama3.1", "8b"),
    "nemotron": ("pretrain_nemotron4", "15b"),
    "nemotronh": ("pretrain_nemotronh", "56b"),
}


@pytest.fixture(scope="module")
def install(tmp_path_factory, slurm_cluster) -> dict[str, str]:
    """A fresh LLMB_INSTALL and the environment of a user with the workload venv active."""
    root = tmp_path_factory.mktemp("llmb-install")
    images = root / "images"
    images.mkdir()
    # setup.sh imports the container here; the test cluster runs no container, so an empty
    # placeholder at that path stands in for it.
    (images / "nvidia+nemo+25.04.01.sqsh").write_bytes(b"")
    venv_bin = Path(sys.executable).parent
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_"))}
    env.update(slurm_cluster)
    env.update({
        "LLMB_INSTALL": str(root),
        "VIRTUAL_ENV": str(venv_bin.parent),
        "PATH": f"{E2E_BIN}:{venv_bin}:{env.get('PATH', '/usr/bin:/bin')}",
        "SBATCH_ACCOUNT": "testacct",
        "SBATCH_PARTITION": "batch",
        "SMOKE_TEST": "true",
        "TIME_LIMIT": "00:15:00",
    })
    env.pop("STAGE_PATH", None)
    env.pop("HF_TOKEN", None)
    return env


def launch(recipe: str, env: dict[str, str], **extra: str) -> tuple[str, Path]:
    """Run <recipe>/launch.sh from another directory; return (job id, run directory)."""
    run_env = {**env, "JOB_TOTAL_GPUS": "16", **extra}
    proc = subprocess.run([str(REPO / recipe / "launch.sh")], env=run_env, cwd="/",
                          capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, f"launch failed:\n{proc.stdout}\n{proc.stderr}"
    job = re.search(r"as job (\d+)", proc.stdout)
    run_dir = re.search(r"experiment directory: (\S+)", proc.stdout)
    assert job and run_dir, proc.stdout
    return job.group(1), Path(run_dir.group(1))


def job_state(job_id: str, env: dict[str, str]) -> str:
    out = subprocess.run(["scontrol", "show", "job", job_id], env=env, capture_output=True,
                         text=True, timeout=30).stdout
    found = re.search(r"JobState=(\S+)", out)
    return found.group(1) if found else "UNKNOWN"


def wait_for(job_id: str, env: dict[str, str], timeout: float = JOB_TIMEOUT) -> str:
    """Poll scontrol (there is no accounting, so no sacct) until the job has ended."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = job_state(job_id, env)
        if state not in ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "UNKNOWN"):
            return state
        time.sleep(2)
    subprocess.run(["scancel", job_id], env=env, timeout=30)
    pytest.fail(f"job {job_id} did not finish in {timeout} s (state {job_state(job_id, env)})")


def analyze(directory: Path, env: dict[str, str]) -> tuple[int, dict]:
    proc = subprocess.run([str(ANALYZER), "--format=json", str(directory)], env=env,
                          capture_output=True, text=True, timeout=120)
    return proc.returncode, json.loads(proc.stdout)


def job_log(run_dir: Path, job_id: str) -> Path:
    exp = run_dir.parent.name
    logs = list((run_dir / exp).glob(f"log-*_{job_id}_0.out"))
    assert len(logs) == 1, f"expected one log for job {job_id} in {run_dir / exp}: {logs}"
    return logs[0]


def describe(run_dir: Path, job_id: str) -> str:
    """Everything the job wrote, for a failure message."""
    parts = []
    for out in sorted(run_dir.rglob(f"*{job_id}*.out")):
        parts.append(f"--- {out.name} ---\n{out.read_text(errors='replace')[-4000:]}")
    return "\n".join(parts)


@pytest.mark.parametrize("recipe", list(RECIPES))
def test_smoke_job_lands_in_the_layout_and_analyzes_as_success(recipe, install, tmp_path):
    workload, size = RECIPES[recipe]
    numa_log = tmp_path / "numactl.log"
    job_id, run_dir = launch(recipe, install, NUMACTL_LOG=str(numa_log))
    state = wait_for(job_id, install)
    assert state == "COMPLETED", describe(run_dir, job_id)

    # SPEC §4 layout: experiments/<exp>/<exp>_<timestamp>/<exp>/log-<job name>_<jobid>_0.out
    experiments = Path(install["LLMB_INSTALL"]) / "workloads" / workload / "experiments"
    exp = run_dir.parent.name
    assert run_dir.parent.parent == experiments
    assert run_dir.name.startswith(f"{exp}_")
    log = job_log(run_dir, job_id)
    assert list((run_dir / exp).glob(f"sbatch_*_{job_id}.out"))
    manifest = json.loads((run_dir / "llmb_manifest.json").read_text())
    assert (manifest["num_gpus"], manifest["nodes"], manifest["model_size"]) == (16, 2, size)
    assert "iteration 49/49" in log.read_text()

    # every one of the 16 tasks ran under its NUMA binding: local ranks 0-3 node 0, 4-7 node 1
    bindings = sorted(tuple(map(int, line.split())) for line in numa_log.read_text().splitlines())
    assert [b[0] for b in bindings] == list(range(16))
    assert all(node == local // 4 for _, local, node in bindings)

    code, report = analyze(experiments, install)
    assert code == 0, report
    (result,) = [r for r in report["results"] if r["experiment"] == exp]
    assert result["status"] == "Success"
    assert result["max_iteration"] == 49
    assert result["time_mean"] > 0 and result["tflops_per_gpu_mean"] > 0
    for key in ("recipe", "model_size", "dtype", "gpu_type", "num_gpus"):
        assert result[key] == manifest[key], key
    assert result["global_batch_size"] == manifest["parallelism"]["gbs"]


def test_cancelled_job_is_reported_failed_at_its_last_iteration(install):
    job_id, run_dir = launch("nemotron", install, MAX_STEPS="2000")
    log = None
    deadline = time.monotonic() + JOB_TIMEOUT
    seen = -1
    while time.monotonic() < deadline and seen < 5:
        time.sleep(2)
        try:
            log = job_log(run_dir, job_id)
        except AssertionError:
            continue
        steps = re.findall(r"iteration (\d+)/", log.read_text(errors="replace"))
        seen = int(steps[-1]) if steps else -1
    assert seen >= 5, describe(run_dir, job_id)
    subprocess.run(["scancel", job_id], env=install, check=True, timeout=30)
    assert wait_for(job_id, install) == "CANCELLED"

    last = int(re.findall(r"iteration (\d+)/", log.read_text(errors="replace"))[-1])
    assert last < 1999
    code, report = analyze(run_dir, install)
    assert code == 1  # the only run in that directory did not succeed
    (result,) = report["results"]
    assert result["status"] == "Failed"
    assert result["max_iteration"] == last


def test_checkpoint_saved_then_loaded(install):
    job_id, run_dir = launch("nemotron", install, ENABLE_CHECKPOINT="true", MAX_STEPS="12")
    assert wait_for(job_id, install) == "COMPLETED", describe(run_dir, job_id)
    exp = run_dir.parent.name
    checkpoints = run_dir / exp / "code" / "nemo_experiments" / "default" / "checkpoints"
    saved = sorted(checkpoints.glob("*/weights/*.distcp"))
    assert saved, describe(run_dir, job_id)
    log_text = job_log(run_dir, job_id).read_text()
    assert "Global Checkpoint Save : Rank: 0 : Iteration: 12" in log_text

    ckpt = saved[0].parent.parent
    job2, run2 = launch("nemotron", install, LOAD_CHECKPOINT_PATH=str(ckpt))
    assert wait_for(job2, install) == "COMPLETED", describe(run2, job2)
    text = job_log(run2, job2).read_text()
    assert "Global Checkpoint Load : Rank : 0 :" in text
    assert re.findall(r"iteration (\d+)/(\d+)", text) == [("0", "0")]  # 1 step after loading
    manifest = json.loads((run2 / "llmb_manifest.json").read_text())
    assert manifest["options"]["checkpoint_load_path"] == str(ckpt)
    assert manifest["options"]["max_steps"] == 1
