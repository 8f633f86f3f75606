"""A log family: one program's training log, as the analyzer reads it.

A Family says everything the scan (llmb.analysis.timing, llmb.analysis.logscan) and the bulk
read (llmb.analysis.bulk) need of the program that printed a log: the needle that recognises
its step lines (the first step line found picks the log's family), how one step line is read,
how a chunk of them is read in bulk, where its iterations start and what it calls its fields.
Each family is one module (llmb.analysis.family_nemo, llmb.analysis.family_megatron,
llmb.analysis.family_steptime), listed in llmb.analysis.families. Standard library only: it
runs inside the log scan.

Every expression a family (or the scan) runs over a log's text takes time linear in the line it
reads, so that a corrupted line costs its length, never minutes: each number and name bounded
(`\\d{1,18}`), no two repetitions over the same characters side by side or one inside the other
unless a literal they cannot hold stands between them (fields between: a run of them starts at
each ` | ` and never meets another run: llmb.analysis.bulkform.BETWEEN), a value read to its end
by one repetition and then judged in Python (llmb.analysis.stepline.number), and no line longer
than llmb.analysis.bulkform.MAX_LINE read at all. tests/analysis/test_linear_time_properties.py
holds every reader to it with lines of 100,000 characters.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from llmb.analysis.bulkform import Rows
    from llmb.analysis.logscan import LogScan
    from llmb.analysis.stepline import StepLine

Buffer = bytes | bytearray
# One step line: (scan, buffer, line start, line stop, needle position, end of the previous
# step's needle) -> what it says, or None when it names no usable iteration.
LineReader = Callable[["LogScan", Buffer, int, int, int, int], "StepLine | None"]
# What a reader keeps after a chunk's last step line for the next chunk's first:
# (scan, buffer, end of the last step's needle, chunk end).
TailReader = Callable[["LogScan", Buffer, int, int], None]
# A chunk's step lines in bulk: (buffer, chunk end, what the tail kept, which form first:
# llmb.analysis.bulk.order) -> their columns, or None when one needs reading line by line.
BulkReader = Callable[[Buffer, int, object, "tuple[int, int]"], "Rows | None"]

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")


@dataclass(frozen=True, repr=False)
class Family:
    """One program's log (name: as LogScan.family says it)."""

    name: str
    needle: bytes  # every step line holds it; the first one found picks the family
    read: LineReader
    bulk: BulkReader
    plain: re.Pattern[bytes]  # its bulk expression without fields between (bulk.order)
    first_iteration: int  # what the log calls step index 0
    field_names: Mapping[str, str]  # what the log calls a field: tflops, gbs
    tail: TailReader | None = None
    # picked only where no other family's needle is in the chunk and its own is there twice
    # (its step line is another family's companion: llmb.analysis.family_steptime)
    alone: bool = False

    def __repr__(self) -> str:
        return f"Family({self.name!r})"


def clean(raw: bytes | bytearray) -> str:
    """A line as text: decoded with errors replaced, without ANSI colour codes."""
    text = raw.decode("utf-8", errors="replace")
    return _ANSI.sub("", text) if "\x1b" in text else text
