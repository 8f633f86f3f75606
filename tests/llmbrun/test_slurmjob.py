"""llmb.llmbrun.slurmjob: the life of a job of llmb-run's own, the same for preflight and screen:
its options, a refused submission, the wait, the cancellation at the time-out and on Ctrl-C
(a real SIGINT, delivered from outside the process), and the exit status of a placement that
cannot hold the node count. Slurm's commands are the test doubles of tests/helpers/slurmshims
and tests/shims/sbatch; the real cluster runs these jobs in tests/e2e."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import runinstall
from llmb.launch import placement
from llmb.llmbrun import clusterconfig, slurmjob
from llmb.shared import front
from llmb.shared.errors import UsageError
from paths import SHIMS
from runconfig import installed
from slurmshims import Slurm


@pytest.fixture
def cfg(tmp_path: Path) -> clusterconfig.ClusterConfig:
    return installed(tmp_path / "install")


@pytest.fixture
def slurm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Slurm:
    shims = Slurm(tmp_path / "slurm")
    monkeypatch.setenv("PATH", f"{shims.dir}:{SHIMS}:{os.environ['PATH']}")
    monkeypatch.setenv("SHIM_LOG", str(tmp_path / "sbatch.log"))
    return shims


def test_options_are_the_installs_then_the_spec_then_the_placement(cfg, tmp_path):
    spec = slurmjob.JobSpec("llmb-x", 3, 8, "00:05:00", tmp_path / "x-%j.out", exclusive=True)
    assert slurmjob.sbatch_options(cfg, spec, placement.build(qos="high", segment=3)) == [
        "--account=acct", "--partition=batch", "--nodes=3", "--ntasks-per-node=8",
        "--gres=gpu:8", "--exclusive", "--mem=0", "--time=00:05:00", "--job-name=llmb-x",
        f"--output={tmp_path}/x-%j.out", "--qos=high", "--segment=3"]
    assert spec.output_of("42") == tmp_path / "x-42.out"


def test_without_a_gres_the_request_is_gpus_per_node(tmp_path):
    cfg = installed(tmp_path / "install", gres=None)
    assert slurmjob.gpu_request(cfg) == "--gpus-per-node=8"


def test_a_placement_that_cannot_hold_the_nodes_is_a_usage_error():
    with pytest.raises(UsageError) as err:
        slurmjob.check_placement(placement.build(nodelist="n[1-3]"), 2)
    assert err.value.status == 2
    assert str(err.value).startswith("--nodelist=n[1-3] names 3 nodes but the job runs on 2")


def test_a_refused_submission_says_what_sbatch_said(tmp_path, slurm, monkeypatch):
    script = tmp_path / "job.sbatch"
    script.write_text("#!/bin/bash\n")
    monkeypatch.setenv("SHIM_SBATCH_FAIL", "1")
    with pytest.raises(slurmjob.SubmitRefused) as err:
        slurmjob.submit(script, ["--account=acct"])
    assert str(err.value) == ("sbatch: error: Batch job submission failed: Invalid account or "
                              "account/partition combination specified")
    assert err.value.status == 1


def test_sbatch_input_variables_never_reach_sbatch(tmp_path, slurm, monkeypatch):
    script = tmp_path / "job.sbatch"
    script.write_text("#!/bin/bash\n")
    monkeypatch.setenv("SBATCH_EXCLUSIVE", "1")
    monkeypatch.setenv("SBATCH_ACCOUNT", "someone-else")
    assert slurmjob.submit(script, ["--account=acct"]) == "12345"
    env = slurmjob.sbatch_env(os.environ)
    assert "SBATCH_EXCLUSIVE" not in env and "SBATCH_ACCOUNT" not in env


def test_the_wait_ends_with_the_final_state(slurm):
    slurm.set(squeue={"12345": ["COMPLETED", "llmb-x", "node1", "None"]})
    ended = slurmjob.wait("12345", 30, "test job", poll_s=0.05)
    assert (ended.info.state, ended.timed_out) == ("COMPLETED", False)
    assert not [c for c in slurm.calls() if c.startswith("scancel")]


def test_the_time_out_cancels_the_job(slurm):
    slurm.set(squeue={"12345": ["PENDING", "llmb-x", "", "Resources"]})
    ended = slurmjob.wait("12345", 0.2, "test job", poll_s=0.05)
    assert (ended.info.state, ended.timed_out) == ("PENDING", True)
    assert "scancel 12345" in slurm.calls()


@pytest.fixture
def ctrl_c_raises():
    """SIGINT raises KeyboardInterrupt here, as in a command started from a terminal, even when
    the test run was started as a script's background job (which starts with SIGINT ignored,
    and Python then keeps it ignored)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_ctrl_c_cancels_the_job_and_goes_on_as_an_interrupt(slurm, capsys, ctrl_c_raises):
    slurm.set(squeue={"12345": ["RUNNING", "llmb-x", "node1", "None"]})
    timer = signal.setitimer(signal.ITIMER_REAL, 0.5)
    previous = signal.signal(signal.SIGALRM, lambda *_: os.kill(os.getpid(), signal.SIGINT))
    try:
        with pytest.raises(KeyboardInterrupt):
            slurmjob.wait("12345", 60, "test job", poll_s=0.05)
    finally:
        signal.setitimer(signal.ITIMER_REAL, *timer)
        signal.signal(signal.SIGALRM, previous)
    assert "scancel 12345" in slurm.calls()
    assert capsys.readouterr().err.endswith("llmb-run: test job 12345 cancelled\n")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_and_sighup_under_the_front_cancel_the_job_as_ctrl_c_does(slurm, capsys, sig):
    slurm.set(squeue={"12345": ["RUNNING", "llmb-x", "node1", "None"]})
    timer = signal.setitimer(signal.ITIMER_REAL, 0.5)
    previous = signal.signal(signal.SIGALRM, lambda *_: os.kill(os.getpid(), sig))
    saved = {s: signal.signal(s, signal.SIG_DFL) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        with pytest.raises(front.Stopped) as stopped, front.stoppable():
            slurmjob.wait("12345", 60, "test job", poll_s=0.05)
    finally:
        signal.setitimer(signal.ITIMER_REAL, *timer)
        signal.signal(signal.SIGALRM, previous)
        for s, handler in saved.items():
            signal.signal(s, handler)
    assert stopped.value.status == 128 + sig
    assert "scancel 12345" in slurm.calls()
    assert capsys.readouterr().err.endswith("llmb-run: test job 12345 cancelled\n")


def test_ctrl_c_prompted_by_the_announcement_cancels_the_job(slurm, monkeypatch,
                                                              ctrl_c_raises):
    slurm.set(squeue={"12345": ["PENDING", "llmb-x", "", "Resources"]})

    class Person(io.StringIO):  # reads the line, presses Ctrl-C
        def write(self, text: str) -> int:
            written = super().write(text)
            if "submitted" in text:
                os.kill(os.getpid(), signal.SIGINT)
            return written

    person = Person()
    monkeypatch.setattr(sys, "stderr", person)
    with pytest.raises(KeyboardInterrupt):
        slurmjob.wait("12345", 60, "test job", poll_s=0.05,
                      announce="llmb-run: test job 12345 submitted")
    assert "scancel 12345" in slurm.calls()
    assert person.getvalue().startswith("llmb-run: test job 12345 submitted\n")
    assert person.getvalue().endswith("llmb-run: test job 12345 cancelled\n")


# --- the commands that run a job: one behaviour ----------------------------------------------

SINFO = """#!/bin/bash
# sinfo test double: partition batch, up, 4 idle nodes with 8 GPUs each
case "$*" in
  *--version*) echo "slurm 22.05.8" ;;
  *) echo "batch|up|4|gpu:8|idle" ;;
esac
"""


def command(which: str) -> list[str]:
    return ["preflight", "--nodes", "2"] if which == "preflight" else [
        "screen", "--nodes", "2", "--smoke"]


STOPS = [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "stopped by SIGTERM"),
         (signal.SIGHUP, 129, "stopped by SIGHUP")]


def default_signals() -> None:
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


@pytest.mark.parametrize(("sig", "status", "said"), STOPS)
@pytest.mark.parametrize("which", ["preflight", "screen"])
def test_ctrl_c_cancels_the_job_of_preflight_and_of_screen(tmp_path, which, sig, status, said):
    """Both commands, as a user runs them: the job is submitted and running, the user presses
    Ctrl-C (SIGINT to the process), the job is cancelled, the exit status is 130; a SIGTERM
    (a kill) or a SIGHUP (the terminal closed) does the same, and the status says which."""
    root = runinstall.make_install(tmp_path / "install")
    shims = Slurm(tmp_path / "slurm")
    shims.set(squeue={"12345": ["RUNNING", "llmb-x", "node[1-2]", "None"]})
    for name in ("sinfo", "srun", "sacctmgr"):  # what preflight asks before its job
        (shims.dir / name).write_text(SINFO if name == "sinfo" else "#!/bin/bash\nexit 1\n")
        (shims.dir / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{shims.dir}:{SHIMS}:/usr/bin:/bin",
           "SHIM_LOG": str(tmp_path / "sbatch.log"), "LLMB_PYTHON": sys.executable}
    proc = subprocess.Popen(["bash", str(runinstall.LLMB_RUN), *command(which)], cwd=root,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=default_signals)
    try:
        deadline = time.monotonic() + 60
        while not any(c.startswith("squeue") for c in shims.calls()):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the job was never waited for"
            time.sleep(0.1)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == status, err
    assert f"{which} job 12345 cancelled" in err
    assert err.endswith(f"llmb-run: {said}\n")
    assert "Traceback" not in err
    assert "scancel 12345" in shims.calls()
