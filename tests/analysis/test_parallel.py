"""llmb.analysis.parallel: a large tree's logs are read by a pool of worker processes, with the
same outcomes as in one process; a small tree stays in one; Ctrl-C stops the pool."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from llmb.analysis import parallel
from llmb.analysis.perlog import LogAnalyzer, Outcome, Task
from paths import COMMON, LOGS

GOOD = LOGS / "verdicts" / "pretrain_llama3.1_8b_fp8_gpus8_tp1_pp1_cp2_vpNone_mbs1_gbs128"


class WhereAnalyzed(LogAnalyzer):
    """The real analyzer, and which process ran it (a test's own view of the pool)."""

    def __call__(self, task: Task) -> Outcome:
        outcome = super().__call__(task)
        assert outcome.result is not None
        outcome.result["pid"] = os.getpid()
        return outcome


def tree(tmp_path: Path, runs: int) -> list[Task]:
    src = next(GOOD.rglob("log-*.out"))
    tasks = []
    for n in range(runs):
        log = tmp_path / f"run{n:03d}" / src.parent.name / src.name
        log.parent.mkdir(parents=True)
        shutil.copy(src, log)
        tasks.append(Task(str(tmp_path), str(log)))
    return tasks


def analyzed(tmp_path: Path, tasks: list[Task]) -> dict[str, dict[str, Any]]:
    analyzer = WhereAnalyzed(str(tmp_path), None, (11, 44))
    return {o.path: r for o in parallel.outcomes(analyzer, tasks) if (r := o.full())}


@pytest.mark.skipif(parallel.workers() < 2, reason="one core: nothing runs in parallel")
def test_a_large_tree_goes_to_the_pool_with_the_same_results(tmp_path: Path) -> None:
    tasks = tree(tmp_path, parallel.POOL_MIN_LOGS + 6)
    pooled = analyzed(tmp_path, tasks)
    pids = {r.pop("pid") for r in pooled.values()}
    assert os.getpid() not in pids and 1 <= len(pids) <= parallel.workers()
    alone = WhereAnalyzed(str(tmp_path), None, (11, 44))
    here = {t.path: alone(t).result for t in tasks}
    assert {r.pop("pid") for r in here.values() if r} == {os.getpid()}
    assert pooled == here
    assert {r["status"] for r in pooled.values()} == {"Success"}


def test_a_small_tree_stays_in_this_process(tmp_path: Path) -> None:
    results = analyzed(tmp_path, tree(tmp_path, 5))
    assert {r["pid"] for r in results.values()} == {os.getpid()}


def children(pid: int) -> list[int]:
    found = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as f:
            found += [int(c) for c in f.read().split()]
    return found


@pytest.mark.skipif(parallel.workers() < 2, reason="one core: no pool")
def test_ctrl_c_stops_the_pool_in_one_line(tmp_path: Path) -> None:
    for n in range(parallel.POOL_MIN_LOGS + 2):
        log = tmp_path / "runs" / f"x{n}" / f"log-big_{n}_0.out"
        log.parent.mkdir(parents=True)
        with open(log, "wb") as f:  # sparse: reading it takes a while, storing it nothing
            f.truncate(64 << 30)
    env = {**os.environ, "PYTHONPATH": str(COMMON)}
    proc = subprocess.Popen([sys.executable, "-m", "llmb.analysis.cli", str(tmp_path / "runs")],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120  # a hang guard, not a speed bound
    workers: list[int] = []
    while time.monotonic() < deadline and not workers:  # until a worker reads a log
        for child in children(proc.pid):
            fds = os.listdir(f"/proc/{child}/fd")
            if any("log-big_" in os.path.realpath(f"/proc/{child}/fd/{fd}") for fd in fds):
                workers = children(proc.pid)
        time.sleep(0.01)
    assert workers, "no worker process read a log"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert (proc.returncode, err, out) == (130, "parse_train_timing.sh: interrupted\n", "")
    for worker in workers:  # gone (or a zombie the reaper has yet to collect)
        try:
            state = Path(f"/proc/{worker}/stat").read_text().split()[2]
        except FileNotFoundError:
            continue
        assert state == "Z"


class InAWorker(LogAnalyzer):
    """Dies (SIGKILL) or fails (no yaml) in a worker process; analyzes in this one."""

    def __init__(self, base: str, how: str) -> None:
        super().__init__(base, None, (11, 44))
        self.how, self.here = how, os.getpid()

    def __call__(self, task: Task) -> Outcome:
        if os.getpid() != self.here and self.how == "dies":
            os.kill(os.getpid(), signal.SIGKILL)
        if os.getpid() != self.here:
            raise ModuleNotFoundError("No module named 'yaml'", name="yaml")
        return super().__call__(task)


@pytest.mark.skipif(parallel.workers() < 2, reason="one core: no pool")
def test_a_worker_that_dies_or_fails_ends_the_analysis(tmp_path: Path) -> None:
    tasks = tree(tmp_path, parallel.POOL_MIN_LOGS + 6)
    with pytest.raises(parallel.WorkerDied, match="killed by signal 9 while analyzing"):
        list(parallel.outcomes(InAWorker(str(tmp_path), "dies"), tasks))
    with pytest.raises(ModuleNotFoundError) as failed:  # as the analyzer's process would
        list(parallel.outcomes(InAWorker(str(tmp_path), "fails"), tasks))
    assert failed.value.name == "yaml"
    assert not children(os.getpid())  # every worker waited for
