"""Analyzing the logs of a tree on every core the analyzer may use.

Reading a log is the cost of an analysis (a tree holds many logs, each scanned at memory
speed), and logs are independent: a large tree's logs go to a pool of worker processes, one per
core, forked once, each running llmb.analysis.perlog.LogAnalyzer on the logs it is given and
sending back the outcome (plain data: the result as its JSON line and the few fields the
analysis groups it by, which cost a fraction of the whole result to send and receive). A small
tree (one log, or a few small ones) is analyzed in this process: forking would cost more than
it saves, as do logs that are nearly all empty (an empty log takes microseconds, sending it
and its outcome between processes more). Outcomes come back in any order; the analysis sorts
them (llmb.analysis.assemble).

Workers ignore Ctrl-C: the analyzer's own process takes it, stops the pool and exits.
"""

from __future__ import annotations

import gc
import itertools
import os
import signal
import threading
from collections.abc import Iterable, Iterator
from typing import Any

from llmb.analysis.perlog import LogAnalyzer, Outcome, Task

POOL_MIN_LOGS = 64  # this many logs go to the pool, unless they are nearly empty,
POOL_MIN_AVERAGE_BYTES = 1024  # under this a log on average: handing it over costs more
POOL_MIN_BYTES = 32 << 20  # fewer logs do when they hold this much
MAX_WORKERS = 16
CHUNK_BYTES = 1 << 20  # logs handed to a worker at a time: about this much of them
MAX_CHUNK = 64
IN_FLIGHT_CHUNKS = 4  # per worker

_analyzer: LogAnalyzer | None = None  # a worker's, inherited through fork


def workers() -> int:
    """The cores this process may run on."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, min(cores, MAX_WORKERS))


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def outcomes(analyzer: LogAnalyzer, tasks: Iterable[Task]) -> Iterator[Outcome]:
    """Each task's outcome, in any order."""
    tasks = iter(tasks)
    head = list(itertools.islice(tasks, POOL_MIN_LOGS))
    cores = workers()
    size = sum(_size(t.path) for t in head)
    pooled = cores > 1 and len(head) > 1 and (
        size >= POOL_MIN_BYTES or (len(head) >= POOL_MIN_LOGS
                                   and size >= len(head) * POOL_MIN_AVERAGE_BYTES))
    rest = itertools.chain(head, tasks)
    if not pooled:
        yield from map(analyzer, rest)
        return
    # Small logs go to a worker many at a time (handing one over costs as much as reading
    # it); large ones one by one, so that no worker is left with the last few.
    chunk = max(1, min(MAX_CHUNK, CHUNK_BYTES * len(head) // max(size, 1)))
    yield from _pooled(analyzer, rest, cores, chunk)


def _pooled(analyzer: LogAnalyzer, tasks: Iterator[Task], cores: int, chunk: int
            ) -> Iterator[Outcome]:
    import multiprocessing

    global _analyzer
    analyzer.prepare()
    _analyzer = analyzer  # forked into every worker
    gc.freeze()  # what exists now is shared, never collected: a worker's GC leaves it unwritten
    pool = multiprocessing.get_context("fork").Pool(cores, initializer=_worker_start)
    # At most this many tasks handed over and not yet taken back (a whole number of chunks:
    # the pool sends a chunk once it is full): outcomes never pile up faster than they are
    # put together, whatever the number of logs.
    room, stop = threading.Semaphore(chunk * cores * IN_FLIGHT_CHUNKS), threading.Event()

    def handed(tasks: Iterator[Task]) -> Iterator[Task]:
        for task in tasks:
            while not room.acquire(timeout=0.1):
                if stop.is_set():  # the pool is stopping (Ctrl-C): hand over no more
                    return
            yield task

    try:
        taken = 0
        for outcome in pool.imap_unordered(_analyze, handed(tasks), chunksize=chunk):
            yield outcome
            taken += 1
            if taken == chunk:  # room for a chunk more (the feeding thread wakes per chunk)
                room.release(taken)
                taken = 0
        pool.close()
    finally:
        stop.set()
        pool.terminate()
        pool.join()
        gc.unfreeze()
        _analyzer = None


def _worker_start() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _analyze(task: Task) -> Any:
    assert _analyzer is not None
    return _analyzer(task).packed()  # the JSON line is made here, on every core
