"""Jobs on the real test Slurm cluster, for the end-to-end tier: launch a recipe's launch.sh,
wait for the job through scontrol (the test cluster keeps no accounting), find its log, analyze
its run directory, describe it when a test fails."""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import pytest
from paths import REPO

ANALYZER = REPO / "common" / "parse_train_timing.sh"
JOB_TIMEOUT = 420  # seconds; 16 CPU ranks on 2 cores import torch before the first step
RECIPES = {  # folder -> (workload key, default size)
    "llama3.1": ("pretrain_llama3.1", "8b"),
    "nemotron": ("pretrain_nemotron4", "15b"),
    "nemotronh": ("pretrain_nemotronh", "56b"),
}


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
