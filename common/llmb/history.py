"""llmb-run's record of what it submitted: JSON lines, appended under an exclusive lock.

Two kinds of record share the file: {"type": "submit", "job_id", "experiment_dir", ...} for
each submission, and {"type": "state", "job_id", "state"} once a job reached a final state
(Slurm forgets finished jobs after MinJobAge when there is no accounting). Concurrent
llmb-run processes append whole lines under fcntl.flock, so no line is torn or lost.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

FILE_NAME = "llmb_run_history.jsonl"


class History:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def append(self, record: Mapping[str, Any]) -> None:
        line = (json.dumps(record, sort_keys=True) + "\n").encode()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            os.write(fd, line)
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def records(self) -> Iterator[dict[str, Any]]:
        if not self.path.exists():
            return
        with self.path.open("rb") as fh:
            fcntl.flock(fh.fileno(), fcntl.LOCK_SH)
            data = fh.read().decode(errors="replace")
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
        for line in data.splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line from a crashed writer; skip it rather than fail status
            if isinstance(rec, dict):
                yield rec

    def submissions(self) -> list[dict[str, Any]]:
        return [r for r in self.records() if r.get("type") == "submit"]

    def final_states(self) -> dict[str, str]:
        return {str(r["job_id"]): r["state"] for r in self.records()
                if r.get("type") == "state" and "job_id" in r}
