"""Megatron-Bridge's `Step Time` lines read as the steps of a log that holds nothing else.

Megatron-Bridge's training_log prints, once per logged iteration, from global rank 0 only:

    Step Time : 4.19s GPU utilization: 1610.2MODEL_TFLOP/s/GPU

(the interval's mean seconds per iteration with two decimals, the model TFLOPS per GPU with
one) and, from the last rank only, the `iteration k/N | ... | elapsed time per iteration (ms)`
record (llmb.analysis.megatron_steps). A log that holds every rank's output, or the last rank's,
is the Megatron family's: there the Step Time lines are its records' companions (their TFLOPS),
never steps of their own, so nothing is counted twice. A log that holds rank 0's output alone
(one file per rank, or the first pipeline stage) has no record: its Step Time lines are its
steps, read here.

A family of its own, not a form of the Megatron family: a family is told and cut by one needle
(llmb.analysis.family), and this log has none of the Megatron family's; and the same line means
a step here and a companion there, which only the family says. It reads only alone
(Family.alone): picked where no other family's needle is in the chunk and its own is there at
least twice (a merged log has a record between any two Step Time lines).

The lines carry no iteration number: one line is one iteration, in order, the first iteration
1 (step index 0), the n-th line iteration n (a log_interval above 1 is not told apart). The
final index is the start-up configuration's `train_iters: N` (N - 1, the index of iteration N;
Megatron-Bridge prints its configuration from rank 0), else unknown (the manifest's then). No
global batch size is printed. A requeued attempt appended to the same file is not told apart:
its lines count on past the final iteration, and the run is Invalid. Values are read whole or
refused (llmb.analysis.stepline.number). Standard library only: it runs inside the log scan.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from llmb.analysis import bulkform, megatron_steps
from llmb.analysis.bulkform import Rows
from llmb.analysis.family import Buffer, Family, clean
from llmb.analysis.stepline import StepLine, number

if TYPE_CHECKING:
    from llmb.analysis.logscan import LogScan

NEEDLE = b"Step Time : "
NAME = "bridge-step-time"
_UNIT = "s GPU utilization: "
_TRAIN_ITERS = b"train_iters: "
_COUNT = re.compile(rb"(\d{1,18})(?![\d.])")
# the line as Megatron-Bridge prints it, to its end (a prefix before it is not read)
_PLAIN = re.compile(re.escape(NEEDLE) + rb"(\d{1,15}\.\d{1,15})" + _UNIT.encode()
                    + rb"(\d{1,15}\.\d{1,15})" + re.escape(megatron_steps.COMPANION)
                    + rb"(?=[\r\n]|\Z)")


@dataclass(frozen=True)
class _Next:
    """What a chunk hands the next: the next line's step index, the final index if known."""

    index: int
    final: int | None


def _final(buf: Buffer, end: int) -> int | None:
    """The final index the start-up's `train_iters` says, within buf[:end], or None."""
    pos = buf.find(_TRAIN_ITERS, 0, end)
    while pos > 0 and (buf[pos - 1:pos].isalnum() or buf[pos - 1:pos] == b"_"):
        pos = buf.find(_TRAIN_ITERS, pos + 1, end)  # another key's end (max_train_iters)
    m = _COUNT.match(buf, pos + len(_TRAIN_ITERS), end) if pos >= 0 else None
    return int(m.group(1)) - 1 if m is not None and int(m.group(1)) >= 1 else None


def _read(scan: LogScan, buf: Buffer, start: int, stop: int, pos: int, after: int
          ) -> StepLine | None:
    """A Step Time line as the step after the lines before it, or None when it is not one."""
    time_text, unit, rest = clean(buf[pos + len(NEEDLE):stop]).partition(_UNIT)
    if not unit:
        return None
    final = scan.final_index
    if final is None:  # the start-up's, looked for once
        if not isinstance(scan._carry, _Next):
            scan._carry = _Next(0, _final(buf, start))
        final = scan._carry.final
    tflops_text, marker, _ = rest.partition(megatron_steps.TFLOPS_KEY)
    tflops, refused = None, None
    if marker:
        tflops = number(tflops_text)
        if tflops is None or not math.isfinite(tflops):
            tflops, refused = None, (megatron_steps.TFLOPS_KEY, tflops_text)
    else:
        tflops_text = ""
    return StepLine(scan.step_lines, final, f"{time_text}s", number(time_text), tflops,
                    tflops_text, None, None, refused)


def _tail(scan: LogScan, buf: Buffer, after: int, end: int) -> None:
    """The next chunk's first line follows this one's last; a start-up's final index is kept
    for a chunk without a family yet."""
    if scan.log_family is None:
        if scan._carry is None and (final := _final(buf, end)) is not None:
            scan._carry = _Next(0, final)
    elif scan.log_family.name == NAME:
        scan._carry = _Next(scan.step_lines, scan.final_index)


def _bulk(buf: Buffer, end: int, carried: object, order: tuple[int, int]) -> Rows | None:
    """The chunk's Step Time lines in one pass, when every one is in its plain form and the
    final index is known; else None."""
    found = _PLAIN.findall(buf, 0, end)
    if not found or len(found) != buf.count(NEEDLE, 0, end):
        return None
    head = buf.find(NEEDLE, 0, end)
    here = carried if isinstance(carried, _Next) else _Next(0, None)
    final = here.final if here.final is not None else _final(buf, head)
    if final is None:
        return None
    times, tflops = zip(*found, strict=True)
    pos = buf.rfind(NEEDLE, 0, end)
    return Rows(bulkform.start(buf, head), bulkform.stop(buf, pos, end), pos + len(NEEDLE),
                final, None, list(range(here.index, here.index + len(found))),
                list(map(float, times)), list(map(float, tflops)),
                list(map(bytes.decode, tflops)))


STEP_TIME = Family(NAME, NEEDLE, _read, _bulk, _PLAIN, first_iteration=1,
                   field_names={"tflops": megatron_steps.TFLOPS_KEY, "gbs": "global batch size"},
                   tail=_tail, alone=True)
