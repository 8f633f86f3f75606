"""The log families the analyzer reads (llmb.analysis.family), and how a log's is recognised.

FAMILIES lists them. A new family is one module that defines its Family (its needle, line
reader, bulk reader and plain form, first iteration and field names: llmb.analysis.family_nemo
is the smallest example) and one line here; the scan (llmb.analysis.timing,
llmb.analysis.logscan) and the bulk read (llmb.analysis.bulk) ask the family and name none.
A family whose step line is another family's companion (Megatron-Bridge's Step Time line,
llmb.analysis.family_steptime) reads only alone: it is looked for after the others, in a chunk
that holds none of theirs.
Standard library only: it runs inside the log scan.
"""

from __future__ import annotations

from llmb.analysis.family import Buffer, Family
from llmb.analysis.family_megatron import MEGATRON
from llmb.analysis.family_nemo import NEMO
from llmb.analysis.family_steptime import STEP_TIME

FAMILIES: tuple[Family, ...] = (
    NEMO,
    MEGATRON,
    STEP_TIME,
)
BY_NAME = {family.name: family for family in FAMILIES}
# The needles are looked for this far first (then through the chunk).
NEAR, REACH = 1 << 12, 1 << 16


def recognised(buf: Buffer, end: int) -> Family | None:
    """The family whose needle comes first in buf[:end], or None when none is there; a family
    that reads only alone (Family.alone) where no other's needle is there and its own twice."""
    found, first = None, end
    # a log whose steps start early: no full pass (nor one through the chunk for the needle
    # of the family it is not)
    for limit in (min(end, NEAR), min(end, REACH), end):
        for each in FAMILIES:  # each looked for only before the first found so far
            if not each.alone and (pos := buf.find(each.needle, 0, min(first, limit))) >= 0:
                found, first = each, pos
        if found is not None:
            return found
    return next((each for each in FAMILIES if each.alone
                 and (pos := buf.find(each.needle, 0, end)) >= 0
                 and buf.find(each.needle, pos + len(each.needle), end) >= 0), None)
