"""Slurm under faults, on the real test cluster: a slurmctld that stops answering for a while
(paused with SIGSTOP, from outside llmb) neither turns a running job UNKNOWN nor fails
`llmb-run status`: the query that timed out is asked again after a pause. A slurmctld that
stays paused gives UNKNOWN with a detail that says what failed, and `status` still exits 0."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
import runinstall
from llmb.llmbrun.history import History

pytestmark = pytest.mark.e2e

EXPERIMENT = "llmb-fault-probe"


def controller_pid(cluster: dict[str, str]) -> int:
    state = Path(cluster.get("LLMB_SLURM_STATE") or os.environ.get("LLMB_SLURM_STATE")
                 or "/tmp/llmb-slurm")
    return int((state / "run" / "slurmctld.pid").read_text().strip())


@pytest.fixture
def running_job(tmp_path, slurm_cluster):
    """An install whose history records one running job (a plain sleep job)."""
    env = {**os.environ, **slurm_cluster}
    out = subprocess.run(["sbatch", "--parsable", "--account=testacct", "--partition=batch",
                          f"--job-name={EXPERIMENT}", f"--output={tmp_path}/job-%j.out",
                          "--wrap", "sleep 300"], env=env, capture_output=True, text=True,
                         check=True, timeout=60).stdout.strip()
    job = out.split(";")[0]
    root = runinstall.make_install(tmp_path / "install", workloads=("pretrain_llama3.1",))
    History(root / "llmb_run_history.jsonl").append({
        "type": "submit", "job_id": job, "experiment": EXPERIMENT, "experiment_dir": None,
        "workload": "pretrain_llama3.1", "size": "8b", "dtype": "fp8", "scale": 8})
    deadline = time.monotonic() + 60
    while "RUNNING" not in subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], env=env,
                                          capture_output=True, text=True).stdout:
        assert time.monotonic() < deadline, "the probe job never started"
        time.sleep(1)
    yield root, job, slurm_cluster
    os.kill(controller_pid(slurm_cluster), signal.SIGCONT)
    subprocess.run(["scancel", job], env=env, capture_output=True, timeout=60)


def paused_status(root: Path, cluster: dict[str, str], pause_s: float):
    """`llmb-run status --format=json` while slurmctld is paused for pause_s seconds."""
    pid = controller_pid(cluster)
    os.kill(pid, signal.SIGSTOP)
    timer = threading.Timer(pause_s, os.kill, (pid, signal.SIGCONT))
    timer.start()
    try:
        started = time.monotonic()
        proc = runinstall.run(["status", "--format=json"], root, timeout=300, **cluster)
        return proc, time.monotonic() - started
    finally:
        timer.cancel()
        os.kill(pid, signal.SIGCONT)


def test_a_controller_paused_past_one_timeout_is_asked_again(running_job):
    root, job, cluster = running_job
    proc, took = paused_status(root, cluster, pause_s=14)  # longer than MessageTimeout (10 s)
    assert proc.returncode == 0, proc.stderr
    (row,) = json.loads(proc.stdout)["jobs"]
    assert (row["job_id"], row["state"]) == (job, "RUNNING"), row
    assert took > 10  # the first query really timed out and was asked again


def test_a_controller_that_stays_paused_is_unknown_with_the_reason(running_job):
    root, job, cluster = running_job
    proc, _ = paused_status(root, cluster, pause_s=120)
    assert proc.returncode == 0, proc.stderr
    (row,) = json.loads(proc.stdout)["jobs"]
    assert (row["job_id"], row["state"]) == (job, "UNKNOWN")
    assert "asked 3 times" in row["state_detail"], row["state_detail"]
