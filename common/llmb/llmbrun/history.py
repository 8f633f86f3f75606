"""llmb-run's record of what it submitted: JSON lines, appended under an exclusive lock.

Two kinds of record share the file: {"type": "submit", "job_id", "experiment_dir", ...} for
each submission, and {"type": "state", "job_id", "state", "nodes"} once a job reached a final
state (Slurm forgets finished jobs after MinJobAge when there is no accounting). Concurrent
llmb-run processes append whole lines under fcntl.flock, so no line is torn or lost.

The file holds what people typed (env overrides, node lists), so it is private: created 0600,
and narrowed to 0600 when an older llmb-run left it wider (only a file this user owns; a link
at its name is never followed for writing). It is read as a stream, one line at a time, so a
history of any size costs the memory of the records a command keeps (`status` keeps the last
20), and only a regular file is read (a FIFO or a device at its name is refused, never waited
on). Lines that are not JSON objects (a crashed writer, a hand edit, a line longer than
MAX_LINE, nesting or numbers JSON cannot hold), submit records without a usable job id and
records that are not of their type (SubmitRecord, StateRecord: a field of the wrong type, a
text or a list beyond its bound) are skipped and counted, so that `status` can say so in one
line, naming the line and the field, instead of failing.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import stat
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, BinaryIO, Literal, TypedDict, cast

from llmb.launch.overrides import MAX_VALUE
from llmb.launch.placement import PlacementRecord
from llmb.shared import records
from llmb.shared.records import Bound

MODE = 0o600
MAX_LINE = 1 << 20  # bytes: a record is a few hundred; a longer line is not one
SHOWN = 5  # line numbers named in a warning
# A job id as llmb-run records it: Slurm's (digits, an array or het-job suffix) or another
# scheduler's word; never an option (a leading -), never blank or a control character.
JOB_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+:-]{0,127}")
Name = Annotated[str, Bound(text=256)]  # a workload, size, dtype, job id, time
MAX_ENV = 256  # variables of one run's launch settings


class SubmitRecord(TypedDict, total=False):
    """A submission, as llmb.llmbrun.submit writes it; status, rerun, suite and archive read it
    back. The fields after `placement` are there only for some runs."""

    type: Literal["submit"]
    time: Name  # llmb.shared.clock.iso()
    job_id: Name
    experiment: Name | None
    experiment_dir: Annotated[str, Bound(text=4096)] | None  # the run directory launch.sh named
    workload: Name
    size: Name
    dtype: Name
    scale: int  # GPUs
    scaling: Name  # weak | strong
    gpu_type: Name
    profile: bool
    repeat: int
    smoke: bool
    unvalidated: bool  # above the largest published scale
    # the launch settings in effect, no secret
    env: Annotated[dict[Name, Annotated[str, Bound(text=MAX_VALUE)]], Bound(items=MAX_ENV)]
    placement: PlacementRecord  # Placement.record()
    rerun_of: Name  # the job this one reran
    suite: Name  # the suite's id, for a suite's run
    suite_run: int  # its run number in the suite


class _StateKeys(TypedDict):
    type: Literal["state"]
    job_id: Name
    state: Name


class StateRecord(_StateKeys, total=False):
    """A job's final state, written once Slurm said it (Slurm forgets finished jobs)."""

    nodes: Annotated[str, Bound(text=1 << 16)] | None
    detail: str | None  # how it was known (e.g. purged: accounting forgot it)


KINDS: dict[str, object] = {"submit": SubmitRecord, "state": StateRecord}


@dataclass
class Scan:
    records: list[dict[str, object]] = field(default_factory=list)
    bad_lines: list[int] = field(default_factory=list)  # 1-based, the first SHOWN
    no_job_id: list[int] = field(default_factory=list)  # 1-based, the first SHOWN
    mistyped: list[str] = field(default_factory=list)  # `line N: <problem>`, the first SHOWN
    bad_count: int = 0
    no_job_id_count: int = 0
    mistyped_count: int = 0

    def bad(self, number: int) -> None:
        self.bad_count += 1
        if len(self.bad_lines) < SHOWN:
            self.bad_lines.append(number)

    def wrong_type(self, number: int, problem: str) -> None:
        self.mistyped_count += 1
        if len(self.mistyped) < SHOWN:
            self.mistyped.append(f"line {number}: {problem}")

    def without_job_id(self, number: int) -> None:
        self.no_job_id_count += 1
        if len(self.no_job_id) < SHOWN:
            self.no_job_id.append(number)

    def problem(self, path: Path) -> str | None:
        """One line about skipped lines, or None."""
        parts = []
        if self.bad_count:
            parts.append(f"{self.bad_count} line(s) that are not JSON records "
                         f"(line {', '.join(map(str, self.bad_lines))})")
        if self.no_job_id_count:
            parts.append(f"{self.no_job_id_count} submit record(s) without a usable job_id "
                         f"(line {', '.join(map(str, self.no_job_id))})")
        if self.mistyped_count:
            parts.append(f"{self.mistyped_count} record(s) not of their type "
                         f"({self.mistyped[0]})")
        return f"{path}: skipped {' and '.join(parts)}" if parts else None


def job_id_of(rec: Mapping[str, object]) -> str | None:
    """The record's job id as text, or None when it has none that can be one."""
    job = rec.get("job_id")
    if isinstance(job, bool) or not isinstance(job, (str, int)):
        return None
    try:
        text = str(job).strip()
    except ValueError:  # an integer of more digits than Python converts
        return None
    return text if JOB_ID.fullmatch(text) else None


def mistyped(rec: dict[str, object]) -> str | None:
    """Why a submit or state record is not of its type, in one line; None when it is (a
    record of another type is no business of this reader)."""
    name = rec.get("type")
    kind = KINDS.get(name) if isinstance(name, str) else None
    return None if kind is None else records.problem(kind, rec)


def _lines(fh: BinaryIO) -> Iterator[bytes | None]:
    """The file's lines; None for a line longer than MAX_LINE (skipped whole, never held)."""
    while True:
        line = fh.readline(MAX_LINE + 1)
        if not line:
            return
        if len(line) > MAX_LINE and not line.endswith(b"\n"):
            while (rest := fh.readline(1 << 16)) and not rest.endswith(b"\n"):
                pass
            yield None
            continue
        yield line


def _parse(line: bytes) -> dict[str, object] | None:
    try:
        rec = json.loads(line.decode("utf-8", "replace"))
    except (ValueError, RecursionError):  # not JSON, too deep, an integer too long
        return None
    return rec if isinstance(rec, dict) else None


class History:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def append(self, record: Mapping[str, object]) -> None:
        line = (json.dumps(record, sort_keys=True) + "\n").encode()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW
                     | os.O_NONBLOCK, MODE)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise OSError(errno.EINVAL, "not a regular file", str(self.path))
            if stat.S_IMODE(st.st_mode) & 0o077 and st.st_uid == os.geteuid():
                with contextlib.suppress(OSError):
                    os.fchmod(fd, MODE)
            fcntl.flock(fd, fcntl.LOCK_EX)
            os.write(fd, line)
        finally:
            os.close(fd)  # closing releases the lock

    def _numbered_lines(self) -> Iterator[tuple[int, bytes | None]]:
        """(line number, line) under a shared lock; None for an over-long line. OSError when
        the file cannot be read (not a regular file: EINVAL); nothing when there is none."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
        except FileNotFoundError:
            return
        with os.fdopen(fd, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise OSError(errno.EINVAL, "not a regular file", str(self.path))
            fcntl.flock(fd, fcntl.LOCK_SH)
            yield from enumerate(_lines(fh), 1)

    def stream(self, scan: Scan, keep: Callable[[dict[str, object]], bool] | None = None
               ) -> Iterator[dict[str, object]]:
        """Every record, in order, read one line at a time under a shared lock; skipped lines
        are counted in `scan`. OSError when the file cannot be read (not a regular file:
        EINVAL); nothing when there is none."""
        for number, line in self._numbered_lines():
            if line is not None and not line.strip():
                continue
            rec = _parse(line) if line is not None else None
            if rec is None:
                scan.bad(number)
                continue
            if rec.get("type") in ("submit", "state") and (job := job_id_of(rec)) is not None:
                rec["job_id"] = job
            elif rec.get("type") == "submit":
                scan.without_job_id(number)
                continue
            if keep is not None and not keep(rec):
                continue
            problem = mistyped(rec)
            if problem is not None:
                scan.wrong_type(number, problem)
                continue
            yield rec

    def scan(self) -> Scan:
        """Every record in memory (small histories, tests); `stream` for the rest."""
        out = Scan()
        out.records.extend(self.stream(out))
        return out

    def records(self) -> list[dict[str, object]]:
        return self.scan().records

    def submissions(self) -> list[SubmitRecord]:
        return [cast(SubmitRecord, r) for r in self.records() if r.get("type") == "submit"]

    def final_states(self, jobs: set[str] | None = None) -> dict[str, StateRecord]:
        """job id -> its last recorded final-state record (of these jobs only, when given).
        Lines that cannot be such a record are skipped unparsed: `status` reads a large
        history in about the time of one pass."""
        if jobs is not None and not jobs:
            return {}
        mention = re.compile(b"|".join(re.escape(j.encode()) for j in sorted(jobs))) \
            if jobs is not None and len(jobs) <= 64 else None
        out: dict[str, StateRecord] = {}
        for _, line in self._numbered_lines():
            if line is None or b'"state"' not in line or \
                    (mention is not None and not mention.search(line)):
                continue
            r = _parse(line)
            job = job_id_of(r) if r is not None and r.get("type") == "state" else None
            if r is not None and job is not None and mistyped({**r, "job_id": job}) is None \
                    and (jobs is None or job in jobs):
                out[job] = cast(StateRecord, r)
        return out
