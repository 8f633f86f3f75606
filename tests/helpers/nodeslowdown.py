"""A slow node, made from outside the product: the test cluster's "nodes" are slurmd processes
on one host, so a node is slowed by pausing the processes of the job tasks it runs.

`NodeSlowdown(conf, nodes, job_name)` finds the processes whose environment says they are tasks
of that job on one of those nodes (SLURM_CONF of the test cluster, SLURMD_NODENAME,
SLURM_JOB_NAME and SLURM_STEP_ID, which srun sets in every task) and sends them all SIGSTOP
for `stopped` of every `period` seconds, SIGCONT for the rest: the nodes' tasks get that much
less of the CPU, as a throttled GPU or a node with a bad memory path gets through less work
(stopped = period / 2: twice as slow). The cycle keeps to the clock (the search for the
processes, every RESCAN_S, runs in the time they run), so that the share paused is the one
asked for; several nodes are paused together, in step. Used as a context manager; on leaving,
every process it paused is continued.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

RESCAN_S = 1.0


def task_pids(conf: str, node: str, job_name: str) -> list[int]:
    """The processes of `job_name`'s tasks on `node` of the cluster configured by `conf`: a
    job step's tasks have SLURM_STEP_ID; the batch script and its srun, on the first node,
    do not."""
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
        if want <= env and any(e.startswith(b"SLURM_STEP_ID=") for e in env):
            found.append(int(entry.name))
    return found


class NodeSlowdown:
    def __init__(self, conf: str, nodes: str | Sequence[str], job_name: str,
                 period: float = 0.2, stopped: float = 0.17) -> None:
        self.conf, self.job_name = conf, job_name
        self.nodes = [nodes] if isinstance(nodes, str) else list(nodes)
        self.period, self.stopped = period, stopped
        self.paused: set[int] = set()
        self.seen: set[int] = set()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.loop, daemon=True)

    def find(self) -> list[int]:
        return [pid for node in self.nodes for pid in task_pids(self.conf, node, self.job_name)]

    def send(self, pids: list[int], sig: int) -> None:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)

    def rescan(self) -> list[int]:
        pids = self.find()
        self.seen.update(pids)
        self.paused.update(pids)
        return pids

    def loop(self) -> None:
        pids = self.rescan()
        scanned = cycle = time.monotonic()
        while not self.done.is_set():
            self.send(pids, signal.SIGSTOP)
            self.done.wait(max(0.0, cycle + self.stopped - time.monotonic()))
            self.send(pids, signal.SIGCONT)
            if time.monotonic() - scanned > RESCAN_S:  # in the time they run
                pids, scanned = self.rescan(), time.monotonic()
            cycle += self.period
            self.done.wait(max(0.0, cycle - time.monotonic()))

    def __enter__(self) -> NodeSlowdown:
        self.thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.done.set()
        self.thread.join(timeout=10)
        self.send(sorted(self.paused), signal.SIGCONT)
