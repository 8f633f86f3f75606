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
import re
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

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


def walk(top: str | os.PathLike[str], onerror: Any = None
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


# A YAML file people write (cluster_config.yaml, a bulk sweep, an installer config, a recipe's
# metadata.yaml) is a few KB; a larger one is not one of them.
MAX_YAML_BYTES = 4 << 20


_LOADER: list[Any] = []
# libyaml's parser recurses in C and crashes (a segmentation fault, no exception) on
# collections nested some 100000 deep (`[[[...`, or `- - - ...` on one line), PyYAML's
# pure-Python composer recurses too, and libyaml 0.2.6 (in PyYAML 6.0.4's wheels) stops flow
# nesting at 1000 levels with a scanner error of its own. No file people write nests deeper
# than MAX_DEPTH; so that the reader gets llmb's one line (TooDeep) whichever loader is
# installed, text long enough to nest deeper is checked before it is parsed. First its flow
# nesting (`[`, `{`) is counted on its characters: a scanner holds back the token of an
# opening bracket until it knows whether a key follows, so libyaml 0.2.6 stops at its 1000th
# bracket before the first token is out. Then its tokens are counted, which finds block
# nesting (a scanner keeps a counter, it does not recurse; the count stops at the first level
# too deep).
MAX_DEPTH = 200


class TooDeep(LlmbError):
    """Collections nested deeper than MAX_DEPTH."""


def _safe_loader() -> Any:
    """PyYAML's safe loader: libyaml's (several times faster) when PyYAML has it."""
    import yaml

    return getattr(yaml, "CSafeLoader", yaml.SafeLoader)


# What the flow count stops at: a bracket, a quote or a comment mark.
_FLOW_MARK = re.compile(r"""[\[\]{}'"#]""")
_QUOTED = {"'": re.compile(r"'[^']*(?:''[^']*)*'"),
           '"': re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)}
_BLANK = " \t\r\n\ufeff"


def _flow_too_deep(text: str) -> bool:
    """Whether YAML text opens flow collections more than MAX_DEPTH deep, counted on its
    characters, without a parser. Brackets in a quoted scalar or a comment do not count;
    outside every flow collection a bracket opens one only after a blank or at the start (not
    in a plain scalar such as `x[1]`). It is a count, not a parse: a text that misleads it (a
    quote that is an apostrophe, hundreds of ` [` left open in plain scalars) is still judged
    by the tokens after it."""
    depth, pos = 0, 0
    while match := _FLOW_MARK.search(text, pos):
        mark, at = match.group(), match.start()
        before = text[at - 1] if at else "\n"
        pos = at + 1
        starts_token = before in _BLANK or (depth > 0 and before in "[{,:")
        if mark == "#" and before in _BLANK:
            pos = text.find("\n", pos) + 1
            if pos == 0:
                return False
        elif mark in "'\"" and starts_token:
            quoted = _QUOTED[mark].match(text, at)
            pos = quoted.end() if quoted else pos
        elif mark in "[{" and starts_token:
            depth += 1
            if depth > MAX_DEPTH:
                return True
        elif mark in "]}" and depth:
            depth -= 1
    return False


# Aliases nested in aliases expand without bound (the "billion laughs": ten levels of ten aliases
# each are 10^10 values from a few hundred bytes), wherever the values are walked, copied or
# printed. A file whose values, every alias expanded, number more than this is refused before
# a single Python object is made of it (a recipe's metadata.yaml, with its few anchors, has
# some thousands).
MAX_EXPANDED = 1_000_000


class TooLarge(LlmbError):
    """YAML whose aliases expand to more than MAX_EXPANDED values, or refer to themselves."""


def _scan(text: str) -> bool:
    """Whether YAML text holds an alias (*name); TooDeep when it nests collections deeper
    than MAX_DEPTH: its flow nesting counted on its characters, then its tokens (a scanner
    keeps a counter, it does not recurse; libyaml's parser does, and crashes some 100000
    levels down)."""
    import yaml

    if len(text) > MAX_DEPTH and _flow_too_deep(text):
        raise TooDeep(f"collections nested more than {MAX_DEPTH} deep")
    depth, aliased = 0, False
    opens = (yaml.FlowSequenceStartToken, yaml.FlowMappingStartToken,
             yaml.BlockSequenceStartToken, yaml.BlockMappingStartToken)
    closes = (yaml.FlowSequenceEndToken, yaml.FlowMappingEndToken, yaml.BlockEndToken)
    tokens = yaml.scan(text, Loader=_safe_loader())
    while True:
        try:
            token = next(tokens)
        except StopIteration:
            return aliased
        except yaml.MarkedYAMLError as exc:  # libyaml >= 0.2.6 stops at its own nesting limit
            if "maximum nesting depth" in (exc.problem or "") or "increasing" in str(exc):
                raise TooDeep(f"collections nested more than {MAX_DEPTH} deep") from None
            return aliased  # not YAML: the parser says where
        if isinstance(token, opens):
            depth += 1
            if depth > MAX_DEPTH:
                raise TooDeep(f"collections nested more than {MAX_DEPTH} deep")
        elif isinstance(token, closes):
            depth -= 1
        aliased = aliased or isinstance(token, yaml.AliasToken)


def _expanded(root: Any) -> int:
    """How many values a composed YAML document holds with every alias expanded (an alias
    is the very node of its anchor, so shared nodes count once per use); TooLarge past
    MAX_EXPANDED or for an alias inside its own anchor. Without recursion."""
    sizes: dict[int, int] = {}
    stack: list[tuple[Any, bool]] = [(root, False)]
    busy: set[int] = set()
    while stack:
        node, done = stack.pop()
        children = _children(node)
        if done:
            busy.discard(id(node))
            sizes[id(node)] = min(MAX_EXPANDED + 1, 1 + sum(sizes[id(c)] for c in children))
            continue
        if id(node) in sizes:
            continue
        if id(node) in busy:
            raise TooLarge("holds an alias inside its own anchor (a value that contains itself)")
        busy.add(id(node))
        stack.append((node, True))
        stack.extend((c, False) for c in children if id(c) not in sizes)
    if sizes[id(root)] > MAX_EXPANDED:
        raise TooLarge(f"expands, its aliases followed, to more than {MAX_EXPANDED} values (an "
                       "alias of aliases: the 'billion laughs'); write the values out")
    return sizes[id(root)]


def _children(node: Any) -> list[Any]:
    import yaml

    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


# Plain scalars read as numbers and booleans: decimal numbers and true/false only (YAML 1.2's
# core schema, less its octal and hex). YAML 1.1, PyYAML's default, also reads 0x10 as 16, 010 as
# 8, 1_000 as 1000, 1:30:00 as 5400, yes/no/on/off as booleans and 2025-01-01 as a date: an
# account named 0x10 became 16, a time limit 1:30:00 became 5400 (minutes, to Slurm). Those stay
# the text written.
_RESOLVERS = (
    ("tag:yaml.org,2002:bool", r"true|True|TRUE|false|False|FALSE", "tTfF"),
    ("tag:yaml.org,2002:int", r"[-+]?(?:0|[1-9][0-9]*)", "-+0123456789"),
    ("tag:yaml.org,2002:float", r"[-+]?(?:[0-9]+\.[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?"
     r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)", "-+0123456789."),
    ("tag:yaml.org,2002:null", r"~|null|Null|NULL|", ["~", "n", "N", ""]),
    ("tag:yaml.org,2002:merge", r"<<", "<"),
)


def _plain_scalars(loader: Any) -> None:
    """Give a loader class only _RESOLVERS for plain scalars."""
    loader.yaml_implicit_resolvers = {}
    for tag, pattern, first in _RESOLVERS:
        loader.add_implicit_resolver(tag, re.compile(f"^(?:{pattern})$"), list(first))


def _loader() -> Any:
    """yaml's safe loader (libyaml's parser when PyYAML has it) that refuses a key given twice
    in one mapping: YAML keeps the last value silently, so `env:` written twice would drop the
    first."""
    if not _LOADER:
        class UniqueKeys(_safe_loader()):  # type: ignore[misc]
            def construct_mapping(self, node: Any, deep: bool = False) -> Any:
                seen: dict[Any, int] = {}
                for key_node, _ in node.value:
                    if key_node.tag == "tag:yaml.org,2002:merge":
                        continue
                    key = self.construct_object(key_node, deep=True)
                    line = key_node.start_mark.line + 1
                    try:
                        first = seen.get(key)
                    except TypeError:  # an unhashable key: the base class says so
                        break
                    if first is not None:
                        where = f"line {line}" if first == line else f"lines {first} and {line}"
                        raise DuplicateKey(f"the key {shown_key(key)} is given twice ({where}); "
                                           "keep one")
                    seen[key] = line
                return super().construct_mapping(node, deep)

        _plain_scalars(UniqueKeys)
        _LOADER.append(UniqueKeys)
    return _LOADER[0]


def shown_key(key: Any) -> str:
    text = repr(key) if not isinstance(key, str) else key
    return text if len(text) <= 60 else text[:57] + "..."


class DuplicateKey(LlmbError):
    """A mapping that gives one key twice."""


def load_yaml(text: str) -> Any:
    """yaml.safe_load, through libyaml when PyYAML has it (several times faster), refusing a
    key given twice (DuplicateKey), collections nested deeper than MAX_DEPTH (TooDeep) and
    aliases that expand to more than MAX_EXPANDED values (TooLarge), before a Python object
    is made; numbers and booleans as _RESOLVERS reads them. PyYAML is imported here, on first
    use: the analyzer answers `--help` without it."""
    aliased = _scan(text) if len(text) > MAX_DEPTH or "*" in text else False
    loader = _loader()(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        if aliased:
            _expanded(node)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def read_yaml(path: str | os.PathLike[str], label: str,
              error: type[LlmbError] = LlmbError) -> Any:
    """A YAML file people can name, parsed; else `error` with one line naming `label` (the
    file, or the option that named it): unreadable, not a regular file, too large, not UTF-8,
    not YAML, a key given twice, nested deeper or holding a number longer than Python reads."""
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
    except (DuplicateKey, TooLarge) as exc:
        raise error(f"{label}: {exc}") from None
    except (RecursionError, TooDeep):
        raise error(f"{label} nests deeper than a file llmb reads can") from None
    except ValueError as exc:  # an integer of more digits than Python converts
        raise error(f"{label} holds a value llmb cannot read ({str(exc).split(';')[0]})"
                    ) from None
