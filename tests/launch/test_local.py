"""llmb.launch.local: the torchrun command of a local run, and a real local run stopped by one
signal."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from launchrequests import make_request
from llmb.launch import job, local
from paths import REPO


def test_local_command_uses_torchrun() -> None:
    req = make_request("nemotron", CLUSTER_TYPE="local", SMOKE_TEST="true", JOB_TOTAL_GPUS="2")
    paths = job.JobPaths.new(req, stamp=1)
    cmd = local.render(req, paths)
    assert "torchrun" in cmd and "--nproc-per-node 2" in cmd.replace("=", " ")
    assert f"{REPO}/nemotron/pretrain_nemotron4.py train --manifest {paths.manifest}" in cmd
    manifest = job.build_manifest(req, paths)
    assert manifest["options"]["smoke_test"] is True and manifest["published"] is False


@pytest.mark.skipif(shutil.which("torchrun", path=os.path.dirname(sys.executable)) is None,
                    reason="torch not installed")
@pytest.mark.parametrize("signame", ["SIGINT", "SIGTERM"])
def test_local_run_stops_on_the_first_signal(tmp_path: Path, signame: str) -> None:
    """A real local smoke run (torchrun, 2 ranks) started as a terminal would (own process
    group, Ctrl-C at its default) stops on ONE SIGINT to its group (what Ctrl-C sends), or one
    SIGTERM: it says so, exits 128 + signal, and leaves no rank running."""
    venv_bin = os.path.dirname(sys.executable)
    env = {**os.environ, "PATH": f"{venv_bin}{os.pathsep}{os.environ['PATH']}",
           "VIRTUAL_ENV": os.path.dirname(venv_bin), "LLMB_INSTALL": str(tmp_path),
           "CLUSTER_TYPE": "local", "SMOKE_TEST": "true", "JOB_TOTAL_GPUS": "2",
           "MAX_STEPS": "100000"}
    for var in ("STAGE_PATH", "LLMB_WORKLOAD", "DRY_RUN", "HF_TOKEN"):
        env.pop(var, None)

    def default_signals() -> None:  # a background job of a script would ignore SIGINT
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    proc = subprocess.Popen([str(REPO / "nemotron" / "launch.sh")], env=env, cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=default_signals)
    try:
        deadline = time.monotonic() + 240
        while not any("iteration 3/" in log.read_text(errors="replace")
                      for log in tmp_path.rglob("combined.log")):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the local run never started training"
            time.sleep(0.5)
        os.killpg(proc.pid, getattr(signal, signame))
        out, err = proc.communicate(timeout=30)  # nemo-run alone waited for the whole run
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 128 + getattr(signal, signame), (out, err)
    assert f"llmb: {signame}: stopping the local run of pretrain_nemotron4_15b" in err
    assert f"stopped by {signame}; its log so far: " in err
    (log,) = tmp_path.rglob("log-*_local_0.out")
    assert "iteration 3/" in log.read_text()
    left = subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True, text=True)
    assert left.stdout == "", f"processes left running: {left.stdout}"
