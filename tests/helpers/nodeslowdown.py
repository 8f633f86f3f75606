"""A slow node, made from outside the product: the test cluster's "nodes" are slurmd processes
on one host, so a node is slowed by pausing the processes of the job tasks it runs.

`NodeSlowdown(conf, node, job_name)` finds, every cycle, the processes whose environment says
they are tasks of that job on that node (SLURM_CONF of the test cluster, SLURMD_NODENAME,
SLURM_JOB_NAME, which srun sets in every task) and sends them SIGSTOP for `stopped` of every
`period` seconds, SIGCONT for the rest: the node's tasks get that much less of the CPU, as a
throttled GPU or a node with a bad memory path gets through less work. Used as a context
manager; on leaving, every process it paused is continued.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from pathlib import Path
from types import TracebackType


def task_pids(conf: str, node: str, job_name: str) -> list[int]:
    """The processes of `job_name`'s tasks on `node` of the cluster configured by `conf`."""
    want = {f"SLURM_CONF={conf}".encode(), f"SLURMD_NODENAME={node}".encode(),
            f"SLURM_JOB_NAME={job_name}".encode()}
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            env = set((entry / "environ").read_bytes().split(b"\0"))
        except OSError:
            continue
        if want <= env:
            found.append(int(entry.name))
    return found


class NodeSlowdown:
    def __init__(self, conf: str, node: str, job_name: str, period: float = 0.2,
                 stopped: float = 0.17) -> None:
        self.args = (conf, node, job_name)
        self.period, self.stopped = period, stopped
        self.paused: set[int] = set()
        self.seen: set[int] = set()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.loop, daemon=True)

    def send(self, pids: list[int], sig: int) -> None:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)

    def loop(self) -> None:
        while not self.done.is_set():
            pids = task_pids(*self.args)
            self.seen.update(pids)
            self.paused.update(pids)
            self.send(pids, signal.SIGSTOP)
            self.done.wait(self.stopped)
            self.send(pids, signal.SIGCONT)
            self.done.wait(self.period - self.stopped)

    def __enter__(self) -> NodeSlowdown:
        self.thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.done.set()
        self.thread.join(timeout=10)
        self.send(sorted(self.paused), signal.SIGCONT)
