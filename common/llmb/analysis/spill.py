"""Items kept in sorted order without holding them all: memory bounded however many there are.

`Spill` holds up to `limit` items in memory; beyond that it sorts them and writes them to a
temporary file (pickle, private to the user), and its iteration merges the files and what is
still in memory (heapq.merge; items that all came in order, as a walk of one folder gives
them, need neither the sort nor the merge). A tree of a few hundred logs never touches the disk;
one of 200,000 costs a few runs of a few MB each. Items are plain data (dicts, tuples, strings).
"""

from __future__ import annotations

import heapq
import itertools
import os
import pickle
import shutil
import tempfile
from collections.abc import Iterator
from typing import Any, BinaryIO

LIMIT = 4000  # items held in memory before a sorted run goes to disk
BLOCK = 500  # items pickled together (one call per block, not per item)


class Spill:
    """Sorted by key (ties: in the order added); iterate it as often as needed."""

    def __init__(self, limit: int = LIMIT) -> None:
        self.limit = limit
        self._items: list[tuple[Any, int, Any]] = []
        self._runs: list[str] = []
        self._dir: str | None = None
        self._count = 0
        self._last: Any = None  # the last key added, while every key came in order
        self._ordered = True

    def __len__(self) -> int:
        return self._count

    def add(self, key: Any, item: Any) -> None:
        if self._ordered and self._count and key < self._last:
            self._ordered = False
        self._last = key
        self._items.append((key, self._count, item))
        self._count += 1
        if len(self._items) >= self.limit:
            self._flush()

    def _flush(self) -> None:
        if self._dir is None:
            self._dir = tempfile.mkdtemp(prefix="llmb-analysis-")  # mode 0700
        if not self._ordered:  # (items that came in order are their own sorted run)
            self._items.sort()  # by key, then order added: (key, n) is unique, items never compared
        path = os.path.join(self._dir, f"run{len(self._runs)}.pickle")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with open(fd, "wb") as f:
            for at in range(0, len(self._items), BLOCK):
                pickle.dump(self._items[at:at + BLOCK], f, protocol=pickle.HIGHEST_PROTOCOL)
        self._runs.append(path)
        self._items = []

    def __iter__(self) -> Iterator[Any]:
        if not self._ordered:
            self._items.sort()
        if not self._runs:
            return (item for _, _, item in self._items)
        return self._merged()

    def _merged(self) -> Iterator[Any]:
        files = [open(path, "rb") for path in self._runs]  # noqa: SIM115 (closed below)
        try:
            streams = [_entries(f) for f in files] + [iter(self._items)]
            # items that all came in order: the runs one after the other, not compared again
            merged = itertools.chain(*streams) if self._ordered else heapq.merge(*streams)
            for _, _, item in merged:
                yield item
        finally:
            for f in files:
                f.close()

    def close(self) -> None:
        """Remove the files (the analyzer does so when it ends, interrupted or not)."""
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir, self._runs = None, []

    def __del__(self) -> None:
        self.close()


def _entries(f: BinaryIO) -> Iterator[tuple[Any, int, Any]]:
    while True:
        try:
            yield from pickle.load(f)
        except EOFError:
            return
