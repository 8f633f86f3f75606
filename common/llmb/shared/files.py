"""Writing files so that a reader never sees half of one, and a private one is never exposed.

`atomic_write` writes next to the target into a file it creates itself (an unpredictable name,
exclusive creation, never through a link), with the final mode set before the first byte,
flushes it to disk and renames it over the target: a reader, a crash or a Ctrl-C sees the old
file or the new one, never a torn one, a file meant to be 0600 is never world-readable in
between, and nothing another user planted in a shared directory (a link at the temporary or the
final name) can redirect the write or have its mode changed. `path_problem` says in words why a
path people gave is not the directory or file they meant.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from llmb.shared.errors import LlmbError

PRIVATE = 0o600
PUBLIC = 0o644
EXECUTABLE = 0o755


def atomic_write(path: str | os.PathLike[str], data: str | bytes, mode: int = PUBLIC) -> None:
    """Replace `path` with `data` in one step; the parent directory must exist.

    The temporary file next to the target gets an unpredictable name and is created
    exclusively (O_CREAT|O_EXCL, never through a link: tempfile.mkstemp), so a file or link
    another user planted in a shared directory is never opened, written or re-moded; only the
    file this call created gets `mode`. The rename replaces the name itself: a symbolic link at
    the final name is replaced, the file it pointed to is left untouched. A failure (a full
    disk, a Ctrl-C) removes the temporary file and leaves the old content under the name."""
    target = Path(path)
    payload = data.encode() if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name[:64]}.", suffix=".tmp",
                               dir=target.parent)
    try:
        os.fchmod(fd, mode)  # our own new file: the umask never widens or narrows the mode
        view = memoryview(payload)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
        os.close(fd)
        fd = -1
        try:
            os.replace(tmp, target)
        except OSError as exc:  # name the target, not the temporary file (a directory there)
            raise OSError(exc.errno, exc.strerror, str(target)) from None
    except BaseException:
        if fd >= 0:
            os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_private(path: str | os.PathLike[str], data: str | bytes) -> None:
    """atomic_write with mode 0600: for files that hold a secret or a user's values."""
    atomic_write(path, data, PRIVATE)


def path_problem(path: str | os.PathLike[str], want: str = "directory") -> str | None:
    """Why `path` is not a usable `want` ("directory", "file" or "regular file": not a FIFO
    or a device either), in words, or None.

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
    if want in ("file", "regular file") and stat.S_ISDIR(st.st_mode):
        return "is a directory, not a file"
    if want == "regular file" and not stat.S_ISREG(st.st_mode):
        return "is not a regular file (a FIFO or a device)"
    return None


# Pseudo file systems a followed link must not lead a walk into (endless, or huge: /proc holds
# every process's view of the whole tree).
VIRTUAL_ROOTS = ("/proc", "/sys", "/dev")
INTO_VIRTUAL = "a link into /proc, /sys or /dev, not followed"
INTO_ANCESTOR = "a link to a directory that holds the tree walked (such as /), not followed"


def _virtual_devices() -> set[int]:
    found = set()
    for root in VIRTUAL_ROOTS:
        with contextlib.suppress(OSError):
            found.add(os.stat(root).st_dev)
    return found


def _ancestors(top: str) -> set[tuple[int, int]]:
    """(device, inode) of every directory above top, as given and as its real path, up to and
    including /."""
    found = set()
    for here in (os.path.abspath(top), os.path.realpath(top)):
        while True:
            parent = os.path.dirname(here)
            if parent == here:
                break
            here = parent
            with contextlib.suppress(OSError):
                st = os.stat(here)
                found.add((st.st_dev, st.st_ino))
    return found


class LinkGuard:
    """Where a followed directory link may not lead from a walk of top: onto /proc, /sys or
    /dev, or to a directory that holds top (a link to /, or to any directory above top,
    would walk the whole file system)."""

    def __init__(self, top: str | os.PathLike[str]) -> None:
        self.virtual = _virtual_devices()
        self.above = _ancestors(os.fspath(top))

    def refused(self, st: os.stat_result) -> str | None:
        """Why a directory with this stat is not entered, or None."""
        if st.st_dev in self.virtual:
            return INTO_VIRTUAL
        if (st.st_dev, st.st_ino) in self.above:
            return INTO_ANCESTOR
        return None


def walk(top: str | os.PathLike[str], onerror: Callable[[OSError], object] | None = None
         ) -> Iterator[tuple[str, list[str], list[str]]]:
    """os.walk, top-down, without recursion (os.walk of Python 3.11 recurses: a tree some 1000
    directories deep ended in a RecursionError), never following a link: a link to a directory
    is listed in dirnames, never entered (the analyzer, which follows links, walks with
    llmb.analysis.discover and LinkGuard). Callers may prune dirnames in place, as with
    os.walk."""
    stack = [os.fspath(top)]
    while stack:
        path = stack.pop()
        try:
            with os.scandir(path) as it:
                entries = list(it)
        except OSError as exc:
            if onerror:
                onerror(exc)
            continue
        dirs: list[str] = []
        others: list[str] = []
        for entry in entries:
            try:
                is_dir = entry.is_dir()
            except OSError:
                is_dir = False
            (dirs if is_dir else others).append(entry.name)
        yield path, dirs, others
        for name in reversed(dirs):
            child = os.path.join(path, name)
            if not os.path.islink(child):
                stack.append(child)


def link_under(path: str | os.PathLike[str], top: str | os.PathLike[str]) -> str | None:
    """The first symbolic link on the way from `top` down to `path` (path itself included),
    as a path, or None: what `archive`, which follows no link, must leave out. `path` lies
    under `top`; `top` itself is not looked at."""
    here = Path(top)
    for part in Path(path).relative_to(top).parts:
        here = here / part
        if os.path.islink(here):
            return str(here)
    return None


class FileRefused(LlmbError):
    """A file that cannot be read as asked: `reason` says why (`is not a regular file`,
    `is larger than N bytes`, `cannot be read (No such file or directory)`); `missing` when
    there is nothing at the path."""

    def __init__(self, reason: str, path: str | os.PathLike[str], missing: bool = False) -> None:
        super().__init__(f"{path} {reason}")
        self.reason = reason
        self.path = path
        self.missing = missing


def open_regular(path: str | os.PathLike[str]) -> int:
    """A file descriptor open for reading on a regular file; else FileRefused. Opened
    non-blocking (a FIFO without a writer cannot hang it) and checked on the descriptor, so
    what is read is what was checked; the caller closes it."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError as exc:
        raise FileRefused(f"cannot be read ({exc.strerror})", path,
                          missing=exc.errno == errno.ENOENT) from None
    try:
        mode = os.fstat(fd).st_mode
    except OSError as exc:
        os.close(fd)
        raise FileRefused(f"cannot be read ({exc.strerror})", path) from None
    if not stat.S_ISREG(mode):
        os.close(fd)
        if stat.S_ISDIR(mode):
            raise FileRefused(f"cannot be read ({os.strerror(errno.EISDIR)})", path)
        raise FileRefused("is not a regular file", path)
    return fd


def open_regular_file(path: str | os.PathLike[str]) -> BinaryIO:
    """open_regular as a binary file object (for streaming a log of any size)."""
    return os.fdopen(open_regular(path), "rb")


def read_head(path: str | os.PathLike[str], size: int) -> bytes:
    """The first `size` bytes of a regular file (an image's magic number); else FileRefused."""
    with open_regular_file(path) as fh:
        try:
            return fh.read(size)
        except OSError as exc:
            raise FileRefused(f"cannot be read ({exc.strerror})", path) from None


def read_text(path: str | os.PathLike[str], limit: int) -> str:
    """read_bounded, decoded as UTF-8; FileRefused (`is not UTF-8 text`) otherwise."""
    raw = read_bounded(path, limit)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise FileRefused("is not UTF-8 text", path) from None


def read_bounded(path: str | os.PathLike[str], limit: int) -> bytes:
    """The content of a regular file of at most `limit` bytes; else FileRefused.

    A FIFO, a device (/dev/zero) or a directory is refused without reading a byte (opened
    non-blocking, so a FIFO without a writer cannot hang), and no more than limit + 1 bytes are
    ever read, whatever the file claims its size is."""
    fd = open_regular(path)
    try:
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, limit + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise FileRefused(f"cannot be read ({exc.strerror})", path) from None
    finally:
        os.close(fd)
    if size > limit:
        raise FileRefused(f"is larger than {limit} bytes", path)
    return b"".join(chunks)


# A file holding one token (a Hugging Face token is about 40 characters).
MAX_TOKEN_BYTES = 4096


def read_token(path: str | os.PathLike[str]) -> str:
    """The token a token file holds, stripped: a regular UTF-8 file of at most MAX_TOKEN_BYTES
    (/dev/zero or a FIFO named as the token file is refused, never read); else FileRefused."""
    return read_text(path, MAX_TOKEN_BYTES).strip()
