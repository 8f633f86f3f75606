"""Analyzing the logs of a tree on every core the analyzer may use.

Reading a log is the cost of an analysis (a tree holds many logs, each scanned at memory
speed), and logs are independent: a large tree's logs go to worker processes, one per core,
forked once, each running llmb.analysis.perlog.LogAnalyzer on the logs it is given, a chunk at a
time, and sending back the outcomes (plain data: the result as its JSON line and the few fields
the analysis groups it by, which cost a fraction of the whole result to send and receive). A
small tree (one log, or a few small ones) is analyzed in this process: forking would cost more
than it saves, as do logs that are nearly all empty (an empty log takes microseconds, sending it
and its outcome between processes more). Outcomes come back in any order; the analysis sorts
them (llmb.analysis.assemble).

The workers are this module's own, not multiprocessing's Pool: one pipe each way per worker,
one frame (its length, then its pickle) per chunk, and this process alone, with no thread,
moves them: it never blocks on a pipe (each is written and read as it is ready), so a chunk of
any size cannot deadlock against the outcomes of the one before, and a worker that dies ends
the analysis with a line that says so instead of a wait without end. At most IN_FLIGHT_CHUNKS
chunks per worker are handed over and not yet answered: outcomes never pile up faster than they
are put together, whatever the number of logs.

Workers ignore Ctrl-C: the analyzer's own process takes it, stops the workers and exits.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import os
import pickle
import selectors
import signal
from collections.abc import Iterable, Iterator
from typing import NoReturn

from llmb.analysis.perlog import LogAnalyzer, Outcome, Task
from llmb.shared.errors import LlmbError

POOL_MIN_LOGS = 64  # this many logs go to the pool, unless they are nearly empty,
POOL_MIN_AVERAGE_BYTES = 1024  # under this a log on average: handing it over costs more
POOL_MIN_BYTES = 32 << 20  # fewer logs do when they hold this much
MAX_WORKERS = 16
CHUNK_BYTES = 1 << 20  # logs handed to a worker at a time: about this much of them
MAX_CHUNK = 64
IN_FLIGHT_CHUNKS = 2  # per worker: one it works on, one waiting for it
_LENGTH = 8  # bytes of a frame's length
_READ = 1 << 20  # bytes read from a worker's pipe at a time


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
        if len(head) >= POOL_MIN_LOGS:  # many logs: what exists now (the catalog, the code)
            analyzer.prepare()  # is left out of every garbage collection to come
            gc.freeze()
        try:
            yield from map(analyzer, rest)
        finally:
            gc.unfreeze()
        return
    # Small logs go to a worker many at a time (handing one over costs as much as reading
    # it); large ones one by one, so that no worker is left with the last few.
    chunk = max(1, min(MAX_CHUNK, CHUNK_BYTES * len(head) // max(size, 1)))
    yield from _pooled(analyzer, rest, cores, chunk)


class WorkerDied(LlmbError):
    """A worker process ended without answering (killed: out of memory, a signal)."""


class _Failed:
    """An exception a worker met, sent back to be raised here (as multiprocessing does)."""

    def __init__(self, error: BaseException) -> None:
        try:
            pickle.dumps(error)
        except Exception:  # whatever it is, its text crosses
            error = RuntimeError(f"{type(error).__name__}: {error}")
        self.error = error


def _frame(value: object) -> bytes:
    data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    return len(data).to_bytes(_LENGTH, "little") + data


class _Worker:
    """A forked worker: its pid, the pipe its tasks go down (written as it takes them), the
    pipe its outcomes come up (read as they come), and how many chunks it has not answered."""

    def __init__(self, pid: int, tasks_fd: int, outcomes_fd: int) -> None:
        self.pid, self.tasks_fd, self.outcomes_fd = pid, tasks_fd, outcomes_fd
        self.out = bytearray()  # frames not yet written
        self.got = bytearray()  # bytes read, not yet a whole frame
        self.in_flight = 0
        os.set_blocking(tasks_fd, False)
        os.set_blocking(outcomes_fd, False)

    def replies(self) -> Iterator[list[Outcome] | _Failed]:
        """The whole frames read so far, unpickled (a chunk's outcomes, or its failure)."""
        got = self.got
        while len(got) >= _LENGTH:
            end = _LENGTH + int.from_bytes(got[:_LENGTH], "little")
            if len(got) < end:
                return
            reply = pickle.loads(got[_LENGTH:end])
            del got[:end]
            self.in_flight -= 1
            yield reply

    def died(self) -> WorkerDied:
        _, status = os.waitpid(self.pid, 0)
        self.pid = 0
        code = os.waitstatus_to_exitcode(status)
        how = f"was killed by signal {-code}" if code < 0 else f"exited with status {code}"
        return WorkerDied(f"a worker process {how} while analyzing logs (out of memory?); "
                          "run again, or with fewer cores (taskset -c 0 ...)")

    def close(self, kill: bool) -> None:
        for fd in (self.tasks_fd, self.outcomes_fd):
            with contextlib.suppress(OSError):
                os.close(fd)
        if self.pid:
            if kill:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.pid, signal.SIGTERM)
            os.waitpid(self.pid, 0)
            self.pid = 0


def _start(analyzer: LogAnalyzer, others: list[_Worker]) -> _Worker:
    """Fork one worker; it holds none of the other workers' pipes (their ends close there)."""
    tasks_read, tasks_write = os.pipe()
    outcomes_read, outcomes_write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the worker: never returns into the caller's stack
        try:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            for fd in (tasks_write, outcomes_read,
                       *(fd for w in others for fd in (w.tasks_fd, w.outcomes_fd))):
                os.close(fd)
            _serve(analyzer, tasks_read, outcomes_write)
        finally:
            os._exit(1)
    os.close(tasks_read)
    os.close(outcomes_write)
    return _Worker(pid, tasks_write, outcomes_read)


def _serve(analyzer: LogAnalyzer, tasks_fd: int, outcomes_fd: int) -> NoReturn:
    """A worker's life: read a chunk of tasks, answer with their outcomes (packed: the JSON
    lines are made here, on every core), until the tasks' pipe closes."""
    with open(tasks_fd, "rb") as tasks, open(outcomes_fd, "wb") as answers:
        while len(head := tasks.read(_LENGTH)) == _LENGTH:
            chunk = pickle.loads(tasks.read(int.from_bytes(head, "little")))
            try:
                reply: list[Outcome] | _Failed = [analyzer(task).packed() for task in chunk]
            except BaseException as exc:  # raised in the analyzer's process
                reply = _Failed(exc)
            answers.write(_frame(reply))
            answers.flush()
    os._exit(0)


def _pooled(analyzer: LogAnalyzer, tasks: Iterator[Task], cores: int, chunk: int
            ) -> Iterator[Outcome]:
    analyzer.prepare()
    gc.freeze()  # what exists now is shared, never collected: a worker's GC leaves it unwritten
    pool: list[_Worker] = []
    done = False
    try:
        for _ in range(cores):
            pool.append(_start(analyzer, pool))
        selector = selectors.DefaultSelector()
        for worker in pool:
            selector.register(worker.outcomes_fd, selectors.EVENT_READ, worker)
        while True:
            for worker in pool:  # hand over chunks while a worker has room for them
                while worker.in_flight < IN_FLIGHT_CHUNKS and \
                        (given := list(itertools.islice(tasks, chunk))):
                    worker.out += _frame(given)
                    worker.in_flight += 1
            if not any(w.in_flight for w in pool):
                break
            yield from _exchange(selector, pool)
        done = True
    finally:
        for worker in pool:
            worker.close(kill=not done)
        gc.unfreeze()


def _exchange(selector: selectors.BaseSelector, pool: list[_Worker]) -> Iterator[Outcome]:
    """Write what waits for the workers as far as their pipes take it; read what they sent;
    the outcomes of the chunks answered."""
    writing = [w for w in pool if w.out]
    for worker in writing:
        selector.register(worker.tasks_fd, selectors.EVENT_WRITE, worker)
    try:
        ready = selector.select()
    finally:
        for worker in writing:
            selector.unregister(worker.tasks_fd)
    for key, _ in ready:
        worker = key.data
        if key.fd == worker.tasks_fd:
            written = os.write(worker.tasks_fd, worker.out[:_READ])
            del worker.out[:written]
            continue
        data = os.read(worker.outcomes_fd, _READ)
        if not data:
            raise worker.died()
        worker.got += data
        for reply in worker.replies():
            if isinstance(reply, _Failed):
                raise reply.error
            yield from reply
