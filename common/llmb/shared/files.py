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
from pathlib import Path
from typing import Any

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
        os.replace(tmp, target)
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


class FileRefused(LlmbError):
    """A file that cannot be read as asked: `reason` says why (`is not a regular file`,
    `is larger than N bytes`, `cannot be read (No such file or directory)`); `missing` when
    there is nothing at the path."""

    def __init__(self, reason: str, path: str | os.PathLike[str], missing: bool = False) -> None:
        super().__init__(f"{path} {reason}")
        self.reason = reason
        self.path = path
        self.missing = missing


def read_bounded(path: str | os.PathLike[str], limit: int) -> bytes:
    """The content of a regular file of at most `limit` bytes; else FileRefused.

    A FIFO, a device (/dev/zero) or a directory is refused without reading a byte (opened
    non-blocking, so a FIFO without a writer cannot hang), and no more than limit + 1 bytes are
    ever read, whatever the file claims its size is."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError as exc:
        raise FileRefused(f"cannot be read ({exc.strerror})", path,
                          missing=exc.errno == errno.ENOENT) from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise FileRefused(f"cannot be read ({os.strerror(errno.EISDIR)})", path)
        if not stat.S_ISREG(mode):
            raise FileRefused("is not a regular file", path)
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


# A YAML file people write (cluster_config.yaml, a bulk sweep, an installer config, a recipe's
# metadata.yaml) is a few KB; a larger one is not one of them.
MAX_YAML_BYTES = 4 << 20


def load_yaml(text: str) -> Any:
    """yaml.safe_load, through libyaml when PyYAML has it (several times faster). PyYAML is
    imported here, on first use: the analyzer answers `--help` without it."""
    import yaml

    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def read_yaml(path: str | os.PathLike[str], label: str,
              error: type[LlmbError] = LlmbError) -> Any:
    """A YAML file people can name, parsed; else `error` with one line naming `label` (the
    file, or the option that named it): unreadable, not a regular file, too large, not UTF-8,
    not YAML."""
    import yaml

    try:
        raw = read_bounded(path, MAX_YAML_BYTES)
    except FileRefused as exc:
        if exc.reason.startswith("is larger"):
            raise error(f"{label} {exc.reason}; it cannot be a file llmb reads") from None
        why = exc.reason.removeprefix("cannot be read (").removesuffix(")")
        raise error(f"cannot read {label}: {why.removeprefix('is ')}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{label} is not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset "
                    f"{exc.start}); save it as UTF-8") from None
    try:
        return load_yaml(text)
    except yaml.YAMLError as exc:
        raise error(f"{label} is not valid YAML: {str(exc).splitlines()[0]}") from None
