"""Special files planted where a regular file is expected: a FIFO (an open for reading would
wait for ever), a link to /dev/zero (endless bytes) or a directory."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

KINDS = ["fifo", "dev-zero", "directory"]


def plant(path: Path, kind: str) -> None:
    """Put a special file of this kind at path, replacing what is there."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        path.symlink_to("/dev/zero")
    else:
        path.mkdir()
