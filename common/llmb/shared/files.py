"""Writing files so that a reader never sees half of one, and a private one is never exposed.

`atomic_write` writes next to the target under a name unique to this process, with the final
mode set before the first byte, flushes it to disk and renames it over the target: a reader, a
crash or a Ctrl-C sees the old file or the new one, never a torn one, and a file meant to be
0600 is never world-readable in between. `path_problem` says in words why a path people gave
is not the directory or file they meant.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path

PRIVATE = 0o600
PUBLIC = 0o644
EXECUTABLE = 0o755


def atomic_write(path: str | os.PathLike[str], data: str | bytes, mode: int = PUBLIC) -> None:
    """Replace `path` with `data` in one step; the parent directory must exist."""
    target = Path(path)
    tmp = target.with_name(f".{target.name}.tmp.{os.getpid()}")
    payload = data.encode() if isinstance(data, str) else data
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.fchmod(fd, mode)  # the umask never widens or narrows what was asked for
        view = memoryview(payload)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    os.close(fd)
    try:
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def write_private(path: str | os.PathLike[str], data: str | bytes) -> None:
    """atomic_write with mode 0600: for files that hold a secret or a user's values."""
    atomic_write(path, data, PRIVATE)


def path_problem(path: str | os.PathLike[str], want: str = "directory") -> str | None:
    """Why `path` is not a usable `want` ("directory" or "file"), in words, or None.

    Tells apart what a bare exists() lumps together: missing, the wrong kind, a dangling
    symbolic link, a symbolic link loop, and a path that cannot be looked at."""
    p = Path(path)
    try:
        st = p.stat()
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "is a symbolic link loop"
        if os.path.islink(p):  # never raises (Path.is_symlink does, on a name too long)
            return "is a dangling symbolic link"
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return "does not exist"
        return f"cannot be read ({exc.strerror})"
    if want == "directory" and not stat.S_ISDIR(st.st_mode):
        return "is a file, not a directory"
    if want == "file" and stat.S_ISDIR(st.st_mode):
        return "is a directory, not a file"
    return None
