"""Unpacking an archive nobody vouches for (llmb-run verify-archive): what is written, and when.

Before a byte is written, every member is checked (`safe_members`): only regular files and
directories under `llmb-archive/`, no absolute or `..` path, no link or device, no control
character, a name in its one canonical spelling (no `//`, `./`, trailing `/` on a file, no
component longer than a file system allows, not more than 64 levels deep), not given twice and
not both a file and a directory. Then the members are held against the archive's own index
(ARCHIVE.json, the first file llmb-run archive writes): a member that claims more bytes than the
index lists for it (a decompression bomb, or a file swapped for a much larger one), a large
member the index does not list, or a total beyond the index's refuses the whole archive. When
the index comes first, as llmb-run writes it, each later member is checked as its header is
read, so a bomb is refused before its data is even decompressed. An archive whose first file is
not a readable index is not unpacked at all.

`extract` writes the checked members itself (never tarfile's extractall), file by file, under a
fresh private directory: 0700 directories, 0600 files, each created exclusively. Given the
index's sizes, it writes only the files the index lists, each only when its size is the one the
index declares: a file of another size, or one the index does not list, is reported as such
(`withheld`) without a byte of it written (a 300 MB member was written out before its size and
sha256 were compared).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import tarfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from llmb.llmbrun.archive.format import INDEX, ROOT
from llmb.shared import values
from llmb.shared.errors import LlmbError

MAX_UNPACKED = 200 * 10**9  # bytes: refuse archives that claim to unpack to more
MAX_MEMBERS = 1_000_000
MAX_INDEX_BYTES = 64 << 20
NAME_MAX = 255  # bytes of one path component (Linux file systems)
PATH_MAX = 4096
# Directory levels of a member's name: llmb-run archive writes some eight
# (llmb-archive/runs/<workload>/experiments/<experiment>/<run>/<dir>/<file>); far deeper is
# crafted, and would make the unpacked tree too deep to create or remove without recursion.
MAX_DEPTH = 64
# What a member may differ from its index entry by and still be unpacked (its change is then
# reported, by size and sha256): a changed file is about as large as the one it replaced.
SLACK_BYTES = 1 << 20
UNLISTED_MAX = 16 << 20  # a member the index does not list: unpacked (and reported) up to this


class UnsafeArchive(LlmbError):
    """The archive cannot be opened safely; str() is one line."""


def unsafe(member: tarfile.TarInfo) -> str | None:
    """Why this member must not be extracted, or None."""
    name = member.name
    path = PurePosixPath(name)
    if name.startswith("/") or "\\" in name or ".." in path.parts:
        return "an absolute path or a path with '..'"
    if not path.parts or path.parts[0] != ROOT:
        return f"a path outside {ROOT}/"
    if values.control_characters(name):
        return "a name with control characters"
    if member.issym() or member.islnk():
        return f"a link (to {values.shown(member.linkname)}); an archive holds no links"
    if not (member.isfile() or member.isdir()):
        return "not a regular file or directory (a device or a fifo)"
    canonical = path.as_posix()
    if name.rstrip("/") != canonical or (member.isfile() and name.endswith("/")) or \
            "." in name.split("/"):
        return f"not the plain spelling of its path ({values.shown(canonical)})"
    encoded = name.encode("utf-8", "surrogateescape")
    if len(encoded) > PATH_MAX or any(len(p) > NAME_MAX for p in encoded.split(b"/")):
        return "a name longer than a file system allows"
    if len(path.parts) > MAX_DEPTH:
        return f"a path more than {MAX_DEPTH} directories deep"
    return None


@dataclass
class _Listing:
    """The index's file sizes (relative names), once read."""

    sizes: dict[str, int] | None = None  # None: no index read (yet)


def read_index(tar: tarfile.TarFile, member: tarfile.TarInfo) -> dict[str, int] | None:
    """The file sizes ARCHIVE.json lists (name -> bytes), or None when it cannot be read."""
    if member.size > MAX_INDEX_BYTES:
        return None
    source = tar.extractfile(member)
    if source is None:
        return None
    try:
        with source:
            index = json.loads(source.read(MAX_INDEX_BYTES + 1))
    except (ValueError, RecursionError, OSError, tarfile.TarError, EOFError):
        return None
    listed = index.get("files") if isinstance(index, dict) else None
    if not isinstance(listed, dict):
        return None
    sizes = {}
    for name, info in listed.items():
        size = info.get("bytes") if isinstance(info, dict) else None
        sizes[str(name)] = size if isinstance(size, int) and not isinstance(size, bool) \
            and size >= 0 else 0
    return sizes


def _against_index(member: tarfile.TarInfo, listing: _Listing) -> None:
    """UnsafeArchive when a file member claims more than the index allows it."""
    if not member.isfile() or listing.sizes is None:
        return
    rel = member.name.split("/", 1)[1] if "/" in member.name else ""
    if rel == INDEX:
        return
    listed = listing.sizes.get(rel)
    bound = UNLISTED_MAX if listed is None else 2 * listed + SLACK_BYTES
    if member.size > bound:
        what = "lists no such file" if listed is None else f"lists {listed} bytes"
        raise UnsafeArchive(f"{values.shown(member.name)} claims {member.size} bytes where "
                      f"{INDEX} {what}: not the archive llmb-run made (a decompression "
                      "bomb?); nothing was extracted")


def _members(tar: tarfile.TarFile) -> Iterator[tarfile.TarInfo]:
    total = 0
    for count, member in enumerate(tar, 1):
        total += max(0, member.size)
        if count > MAX_MEMBERS or total > MAX_UNPACKED:
            raise UnsafeArchive(f"it claims more than {MAX_MEMBERS} members or "
                          f"{MAX_UNPACKED / 1e9:.0f} GB; not an llmb archive")
        yield member


def safe_members(tar: tarfile.TarFile) -> tuple[list[tarfile.TarInfo], dict[str, int] | None]:
    """(every member, once each, checked; the file sizes the index lists, None when the first
    file is not a readable index). UnsafeArchive naming the first few members that are not
    safe, or one that claims more than the index allows (checked as its header is read when
    the index came first)."""
    members: list[tarfile.TarInfo] = []
    seen: dict[str, bool] = {}  # name -> is a directory
    problems: list[str] = []
    listing = _Listing()
    first_file = True
    for member in _members(tar):
        name = member.name.rstrip("/")
        why = unsafe(member) or _clash(name, member.isdir(), seen)
        if why:
            problems.append(f"{values.shown(member.name)}: {why}")
        seen.setdefault(name, member.isdir())
        members.append(member)
        if why or not member.isfile():
            continue
        if first_file:
            first_file = False
            if name == f"{ROOT}/{INDEX}":
                listing.sizes = read_index(tar, member)
        _against_index(member, listing)
    if problems:
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        raise UnsafeArchive("unsafe member(s), nothing was extracted: " + "; ".join(problems[:3])
                      + more)
    if listing.sizes is not None:
        claimed = sum(m.size for m in members if m.isfile())
        allowed = sum(listing.sizes.values()) + SLACK_BYTES * 64 + MAX_INDEX_BYTES
        if claimed > allowed:
            raise UnsafeArchive(f"its files claim {claimed} bytes where {INDEX} lists "
                          f"{sum(listing.sizes.values())}; nothing was extracted")
    return members, listing.sizes


def _clash(name: str, is_dir: bool, seen: dict[str, bool]) -> str | None:
    """A name given twice, or a file where a directory of another member's path is."""
    if name in seen:
        if seen[name] and is_dir:
            return None  # a directory listed again changes nothing
        return "it is in the archive twice (the second copy would replace the first)"
    parent = name.rsplit("/", 1)[0] if "/" in name else ""
    while parent:
        if seen.get(parent) is False:
            return f"its directory {values.shown(parent)} is a file in the archive"
        parent = parent.rsplit("/", 1)[0] if "/" in parent else ""
    return None


def withheld(member: tarfile.TarInfo, listed: Mapping[str, int] | None) -> str | None:
    """Why a checked file member is not written, given the index's sizes, or None."""
    rel = member.name.split("/", 1)[1] if "/" in member.name else ""
    if listed is None or rel == INDEX:
        return None
    if rel not in listed:
        return f"it is in the archive but not in {INDEX}"
    if member.size != listed[rel]:
        return (f"its size ({member.size} bytes) is not the {listed[rel]} bytes {INDEX} "
                "lists")
    return None


def extract(tar: tarfile.TarFile, members: list[tarfile.TarInfo], dest: Path,
            listed: Mapping[str, int] | None = None) -> dict[str, str]:
    """Write the checked members under dest (0700 directories, 0600 files); with the index's
    sizes, only those it lists at their size: the others, by their name under the archive's
    root, with why they were not written."""
    held = {m.name.split("/", 1)[1]: why for m in members if m.isfile()
            and (why := withheld(m, listed)) is not None}
    members = [m for m in members if not (m.isfile() and "/" in m.name
                                          and m.name.split("/", 1)[1] in held)]
    need = sum(m.size for m in members if m.isfile())
    free = shutil.disk_usage(dest).free
    if need > free:
        raise UnsafeArchive(f"it unpacks to {need / 1e9:.1f} GB but {dest.parent} has "
                      f"{free / 1e9:.1f} GB free; set TMPDIR to a larger filesystem")
    base = dest.resolve()
    for m in members:
        target = (base / m.name).resolve()
        if base not in target.parents:  # unsafe() already refused this; never write outside
            raise UnsafeArchive(f"{values.shown(m.name)}: a path outside the archive")
        if m.isdir():
            _private_dirs(base, target)
            continue
        if any(p.is_file() for p in target.parents if base in p.parents):
            raise UnsafeArchive(f"{values.shown(m.name)}: its directory is a file in the archive")
        _private_dirs(base, target.parent)
        source = tar.extractfile(m)
        if source is None:
            raise UnsafeArchive(f"{values.shown(m.name)}: cannot be read")
        with source, open(target, "xb") as out:
            target.chmod(0o600)
            shutil.copyfileobj(source, out, 1 << 20)
    return held


def _private_dirs(base: Path, directory: Path) -> None:
    """directory and each missing one between base and it, 0700 (mkdir(parents=True) gives
    the parents it makes the umask's mode, often 0755)."""
    for d in [*reversed(directory.relative_to(base).parents), directory.relative_to(base)]:
        with contextlib.suppress(FileExistsError):
            (base / d).mkdir(mode=0o700)
