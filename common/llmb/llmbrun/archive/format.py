"""The archive's format, the one both `archive` (pack) and `verify-archive` (verify, unpack)
hold it to: everything under ROOT/ in a `.tar.gz`, the index INDEX first, FORMAT its version;
every file listed in the index with its size and sha256; text read line by line in pieces
(a log line can be any length)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

FORMAT = 1
ROOT = "llmb-archive"
INDEX = "ARCHIVE.json"
PIECE = 1 << 20  # bytes of one line read at a time


def pieces(fin: Any) -> Iterator[bytes]:
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


def list_files(root: Path) -> dict[str, dict[str, Any]]:
    return {p.relative_to(root).as_posix(): {"bytes": p.stat().st_size, "sha256": sha256(p)}
            for p in sorted(root.rglob("*")) if p.is_file() and p.name != INDEX}
