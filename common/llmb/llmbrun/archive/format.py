"""The archive's format, the one both `archive` (pack) and `verify-archive` (verify, unpack)
hold it to: everything under ROOT/ in a `.tar.gz`, the index INDEX first, FORMAT its version;
every file listed in the index with its size and sha256 (ArchiveIndex, the type verify-archive
holds an index to before it uses a field of it); text read line by line in pieces (a log line
can be any length)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, BinaryIO, TypedDict

from llmb.shared.records import Bound

FORMAT = 1
ROOT = "llmb-archive"
INDEX = "ARCHIVE.json"
PIECE = 1 << 20  # bytes of one line read at a time
MAX_FILES = 1_000_000  # files of one archive (unpack refuses more members)
Name = Annotated[str, Bound(text=4096)]  # a path in the archive, a time, a status
Note = Annotated[str, Bound(text=4096)] | None  # why something is missing, in words


class FileEntry(TypedDict):
    bytes: int
    sha256: Annotated[str, Bound(text=64)]


class _RunKeys(TypedDict):
    run: Name  # runs/<workload>/experiments/<exp>/<run>


class RunEntry(_RunKeys, total=False):
    manifest: bool
    logs: Annotated[list[Name], Bound(items=MAX_FILES)]
    job_script: Name | None


class ReportNote(TypedDict, total=False):
    status: Name  # written | unavailable
    detail: Note


class ScreenNote(TypedDict, total=False):
    stamp: Name
    suspects: Annotated[list[Name], Bound(items=65_536)] | None
    in_report: bool


class LeftOut(TypedDict, total=False):
    files: int
    bytes: int
    examples: list[Name]
    why: Name


class _StagedKeys(TypedDict):
    format: int


class Staged(_StagedKeys, total=False):
    """ARCHIVE.json but its file list: what `archive` knows once everything is staged."""

    created: Name
    made_by: Name
    install: Name
    suite: Name
    runs: Annotated[list[RunEntry], Bound(items=MAX_FILES)]
    analysis_error: Note
    report: ReportNote
    screen: ScreenNote | None
    left_out: dict[Name, LeftOut]


class _FilesKeys(TypedDict):
    files: Annotated[dict[Name, FileEntry], Bound(items=MAX_FILES)]


class ArchiveIndex(Staged, _FilesKeys):
    """ARCHIVE.json, as `archive` writes it: every file listed last."""


def pieces(fin: BinaryIO) -> Iterator[bytes]:
    """The file's lines, a line longer than PIECE in pieces of at most about PIECE bytes, each
    cut after a blank where it has one (a credential holds none, so none is cut in two)."""
    carry = b""
    while True:
        chunk = fin.readline(PIECE)
        data = carry + chunk
        carry = b""
        if not data:
            return
        if chunk and not chunk.endswith(b"\n") and len(data) >= PIECE:
            cut = max(data.rfind(b" "), data.rfind(b"\t"))
            if cut > 0:
                data, carry = data[:cut + 1], data[cut + 1:]
        yield data


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def list_files(root: Path) -> dict[str, FileEntry]:
    return {p.relative_to(root).as_posix(): {"bytes": p.stat().st_size, "sha256": sha256(p)}
            for p in sorted(root.rglob("*")) if p.is_file() and p.name != INDEX}
