"""llmb-run's record of what it submitted: JSON lines, appended under an exclusive lock.

Two kinds of record share the file: {"type": "submit", "job_id", "experiment_dir", ...} for
each submission, and {"type": "state", "job_id", "state", "nodes"} once a job reached a final
state (Slurm forgets finished jobs after MinJobAge when there is no accounting). Concurrent
llmb-run processes append whole lines under fcntl.flock, so no line is torn or lost.

The file holds what people typed (env overrides, node lists), so it is private: created 0600,
and narrowed to 0600 when an older llmb-run left it wider. Lines that are not JSON objects
(a crashed writer, a hand edit) and submit records without a job id are skipped and counted,
so that `status` can say so in one line instead of failing.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MODE = 0o600


@dataclass
class Scan:
    records: list[dict[str, Any]] = field(default_factory=list)
    bad_lines: list[int] = field(default_factory=list)  # 1-based: not a JSON object
    no_job_id: list[int] = field(default_factory=list)  # 1-based: submit without job_id

    def problem(self, path: Path) -> str | None:
        """One line about skipped lines, or None."""
        parts = []
        if self.bad_lines:
            parts.append(f"{len(self.bad_lines)} line(s) that are not JSON records "
                         f"(line {', '.join(map(str, self.bad_lines[:5]))})")
        if self.no_job_id:
            parts.append(f"{len(self.no_job_id)} submit record(s) without a job_id "
                         f"(line {', '.join(map(str, self.no_job_id[:5]))})")
        return f"{path}: skipped {' and '.join(parts)}" if parts else None


def _job_id(rec: Mapping[str, Any]) -> str | None:
    job = rec.get("job_id")
    if isinstance(job, bool) or not isinstance(job, (str, int)) or str(job).strip() == "":
        return None
    return str(job).strip()


class History:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def append(self, record: Mapping[str, Any]) -> None:
        line = (json.dumps(record, sort_keys=True) + "\n").encode()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, MODE)
        try:
            if stat.S_IMODE(os.fstat(fd).st_mode) & 0o077:
                with contextlib.suppress(OSError):  # not ours: leave the mode alone
                    os.fchmod(fd, MODE)
            fcntl.flock(fd, fcntl.LOCK_EX)
            os.write(fd, line)
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def scan(self) -> Scan:
        out = Scan()
        if not self.path.exists():
            return out
        with self.path.open("rb") as fh:
            fcntl.flock(fh.fileno(), fcntl.LOCK_SH)
            data = fh.read().decode(errors="replace")
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
        for number, line in enumerate(data.splitlines(), 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                rec = None
            if not isinstance(rec, dict):
                out.bad_lines.append(number)
                continue
            if rec.get("type") == "submit":
                job = _job_id(rec)
                if job is None:
                    out.no_job_id.append(number)
                    continue
                rec["job_id"] = job
            out.records.append(rec)
        return out

    def records(self) -> list[dict[str, Any]]:
        return self.scan().records

    def submissions(self) -> list[dict[str, Any]]:
        return [r for r in self.records() if r.get("type") == "submit"]

    def final_states(self) -> dict[str, dict[str, Any]]:
        """job id -> its last recorded final-state record."""
        return {job: r for r in self.records()
                if r.get("type") == "state" and (job := _job_id(r)) is not None
                and isinstance(r.get("state"), str)}
