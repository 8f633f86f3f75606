"""A chunk's step lines read in bulk, when every one of them is in its family's plain form.

Reading a step line one at a time (llmb.analysis.stepline, llmb.analysis.megatron_steps: find
the line, decode it, collect its fields, check each value) costs tens of microseconds a line,
and a tree of thousands of 50-step logs is millions of lines. Most lines are printed exactly as
their program formats them: `Training epoch 0, iteration 11/49 | lr: 1.5e-05 | ... |
consumed_samples: 1536` and Megatron's ` [date] iteration 12/ 50 | ... | number of nan
iterations:   0 |`, with a prefix (srun's label, a rank, a time stamp, ANSI colours, a glued Step
Time) and finite plain numbers. One regular expression finds all such lines of a chunk at once
and hands their values over as columns.

The bulk read is used only where it gives what the line-by-line read would: every needle of the
chunk is in such a line (and, for Megatron, every Step Time companion is in its plain form), no
prefix holds a field name or `iteration`, and the values call for no rule beyond recording them
(no restart, no change of final index, no time beyond its limits, no nan, no refused value, one
global batch size, no nan or skipped iteration). Otherwise `read` answers None and the chunk is
read line by line. Standard library only: it runs inside the log scan.

Between the fields a plain line may hold others that the line-by-line read takes nothing from,
as real runs print them: NeMo's `tokens_per_sec_per_gpu` or a trailing `val_loss`;
Megatron-Bridge's `skipped samples`, `throughput per GPU`, `energy per GPU` and `power per
GPU`, a mixture-of-experts model's or multi-token prediction's losses after `lm loss`
(`load_balancing_loss`, `z_loss`, `mtp_1 loss`), `num zeros`, `params norm`, `max attention
logit`. They are taken whatever their names (llmb.analysis.bulkform.BETWEEN), and the chunk goes
line by line when one holds a name the line-by-line read would take a value from, as when a
prefix does.

Each family (llmb.analysis.families) holds its expressions and its bulk reader; what they share
is llmb.analysis.bulkform. This module asks the log's family and names none.
"""

from __future__ import annotations

from llmb.analysis import bulkform
from llmb.analysis.bulkform import Rows
from llmb.analysis.families import BY_NAME
from llmb.analysis.family import Buffer, Family


def read(buf: Buffer, end: int, family: Family | str, carried: object = None) -> Rows | None:
    """The chunk's step lines in bulk, or None when one of them needs reading line by line
    (family: the log's, or its name; carried: what its tail kept from the previous chunk)."""
    if isinstance(family, str):
        family = BY_NAME[family]
    return family.bulk(buf, end, carried, order(buf, end, family))


def order(buf: Buffer, end: int, family: Family) -> tuple[int, int]:
    """Which form to try first (0: without fields between, 1: with them): the one the chunk's
    first step line takes. (Each try of a form reads the whole chunk; a log's lines are as a
    rule all of one form.)"""
    pos = buf.find(family.needle, 0, end)
    if pos >= 0 and family.plain.search(buf, *bulkform.line(buf, pos, end)) is None:
        return 1, 0
    return 0, 1
