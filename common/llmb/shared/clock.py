"""The two ways llmb writes a time into its records, both in UTC.

- `stamp()`: `YYYYmmdd-HHMMSS`, the name of a record made at that time: a screen's folder
  (`screens/<stamp>/`), a preflight's, a suite's id, an archive's file name. Names sort in
  time order, and hold nothing a shell or a file system treats specially.
- `iso()`: ISO 8601 with a Z (`2025-04-11T14:48:45Z`), the `created` or `time` field inside
  a record (history, screen.json, suite.json, preflight.json, an archive's index).
"""

from __future__ import annotations

import re
import time

STAMP_FORMAT = "%Y%m%d-%H%M%S"
ISO_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
STAMP_RE = re.compile(r"[0-9]{8}-[0-9]{6}")


def stamp(now: float | None = None) -> str:
    """`YYYYmmdd-HHMMSS` in UTC: the name of a record made now (or at `now`, epoch seconds)."""
    return time.strftime(STAMP_FORMAT, time.gmtime(now))


def iso(now: float | None = None) -> str:
    """`YYYY-mm-ddTHH:MM:SSZ`: the time field inside a record."""
    return time.strftime(ISO_FORMAT, time.gmtime(now))
