"""Megatron-LM / Megatron-Bridge logs: `elapsed time per iteration` lines and their `Step Time`
companions (llmb.analysis.megatron_steps reads one).

An iteration line takes the companion printed since the previous one's time; a companion after
a chunk's last iteration line is carried to the next chunk's first (the tail). In bulk, a chunk
of Megatron-Bridge's whole steps (a Step Time line, then its iteration line) is read in one pass
of _RECORD; else the iteration lines by _MEGATRON and the companions by _COMPANION, each paired
as the line-by-line read pairs them. Iterations count from 1. Standard library only: it runs
inside the log scan.
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING

from llmb.analysis import bulkform, megatron_steps
from llmb.analysis.bulkform import BETWEEN, DENSE, NUM, Rows
from llmb.analysis.family import Buffer, Family, clean
from llmb.analysis.stepline import StepLine

if TYPE_CHECKING:
    from llmb.analysis.logscan import LogScan

NEEDLE = megatron_steps.NEEDLE
# Where a `Step Time` companion's figure is looked for before its marker.
COMPANION_REACH = 200


def _companion(buf: Buffer, begin: int, end: int) -> tuple[float | None, str] | None:
    """The last Step Time companion in buf[begin:end], or None."""
    pos = buf.rfind(megatron_steps.COMPANION, begin, end)
    if pos < 0:
        return None
    return megatron_steps.companion(clean(buf[max(begin, pos - COMPANION_REACH):pos]))


def _read(scan: LogScan, buf: Buffer, start: int, stop: int, pos: int, after: int
          ) -> StepLine | None:
    """An iteration line with the companion printed since the previous one's time (or at the
    end of the previous chunk)."""
    found = _companion(buf, after, pos)
    carried, scan._carry = scan._carry, None
    if found is None and isinstance(carried, tuple):
        found = carried
    return megatron_steps.parse(clean(buf[start:stop]), found)


def _tail(scan: LogScan, buf: Buffer, after: int, end: int) -> None:
    """A companion after the chunk's last iteration line belongs to the next chunk's first."""
    if (found := _companion(buf, after, end)) is not None:
        scan._carry = found


_BETWEEN_FIELDS = (rb"(?: (?!elapsed time per iteration|throughput per GPU|learning rate:|"
                   rb"global batch size:|lm loss:|loss scale:|grad norm:|number of )"
                   rb"[^|\r\n]{1,120} \|)*?")
# Megatron-Bridge's fields between (train_utils.training_log): `skipped samples` after the
# consumed ones; `energy per GPU` and `power per GPU` after the time and throughput; losses after
# `lm loss` (a mixture of experts' `load_balancing_loss`, `z_loss`, multi-token prediction's
# `mtp_1 loss`); `num zeros`, `params norm` and `max attention logit` after the grad norm;
# Megatron-LM's `decoupled learning rate` after the learning rate. (`at`: where the needle is.)
_MEGATRON = bulkform.two_forms(
    rb"\] iteration +(\d{1,18})/ *(\d{1,18}) \| consumed samples: +\d{1,18} \|" + BETWEEN +
    rb" (?P<at>)" + NEEDLE + rb" \(ms\): (\d{1,15}\.\d) \|"
    rb"(?: throughput per GPU \(TFLOP/s/GPU\): (\d{1,15}\.\d) \|)?" + BETWEEN +
    rb" learning rate: [0-9.E+-]{1,20} \|" + BETWEEN + rb" global batch size: +(\d{1,18})"
    rb" \| lm loss: " + NUM + rb" \|" + BETWEEN + rb" loss scale: [0-9.]{1,20}"
    rb" \| grad norm: " + NUM + rb" \|" + BETWEEN +
    rb" number of skipped iterations: +0 \| number of nan iterations: +0 \|(?=[\r\n]|\Z)",
    _BETWEEN_FIELDS)
# Megatron-Bridge's step as it usually comes: a whole Step Time line (from a line end), then its
# iteration line with no prefix but its time stamp, on the next line or glued. Its groups: the
# whole record, the TFLOPS, the line end between the two, k, N, the time (ms), the GBS, lm loss
# and grad norm (read as float() reads them, as the line-by-line read does: cheaper than
# spelling them out here). A record holds one needle and one companion, and neither can run
# over its ends (it begins with a line end and ends with `|`).
_RECORD = bulkform.two_forms(
    rb"(\nStep Time : [0-9.]{1,20}s GPU utilization: ([0-9.]{1,30})"
    + re.escape(megatron_steps.COMPANION) + rb"(\n|\r\n|) ?\[[0-9 :.T+-]{1,40}\]"
    rb" iteration +(\d{1,18})/ *(\d{1,18}) \| consumed samples: +\d{1,18} \|" + BETWEEN + rb" "
    + NEEDLE + rb" \(ms\): (\d{1,15}\.\d) \|"
    rb"(?: throughput per GPU \(TFLOP/s/GPU\): \d{1,15}\.\d \|)?" + BETWEEN +
    rb" learning rate: [0-9.E+-]{1,20} \|" + BETWEEN + rb" global batch size: +(\d{1,18}) \|"
    rb" lm loss: ([0-9.E+-]{1,30}) \|" + BETWEEN + rb" loss scale: [0-9.]{1,20} \|"
    rb" grad norm: ([0-9.E+-]{1,30}) \|" + BETWEEN +
    rb" number of skipped iterations: +0 \| number of nan iterations: +0 \|)(?![^\r\n])",
    _BETWEEN_FIELDS)
_MEGATRON_KEYS = (b"iteration", b"global batch size", b"lm loss", b"grad norm",
                  b"throughput per gpu")
# what a field between may not hold either: a companion's marker (it would pair with the next
# step, line by line)
_MEGATRON_EXTRA_KEYS = (*_MEGATRON_KEYS, megatron_steps.COMPANION.lower())
_COMPANION = re.compile(rb"GPU utilization: (\d{1,15}(?:\.\d{1,15})?)" +
                        re.escape(megatron_steps.COMPANION))


def _bulk(buf: Buffer, end: int, carried: object, order: tuple[int, int]) -> Rows | None:
    """The chunk's step lines in bulk (carried: a companion from the previous chunk, (value,
    text)), or None."""
    if isinstance(carried, tuple) and carried[0] is None:
        return None  # a companion that is no number: refused line by line
    if end <= DENSE and (rows := records(buf, end, order)) is not None:
        return rows
    return iteration_lines(buf, end, carried, order)


def _companions(buf: Buffer, end: int) -> list[re.Match[bytes]] | None:
    """Every Step Time companion's match, or None when one is not in its plain form."""
    if end <= DENSE:
        found = list(_COMPANION.finditer(buf, 0, end))
        return found if len(found) == buf.count(megatron_steps.COMPANION, 0, end) else None
    found, marker = [], len(megatron_steps.COMPANION)
    pos = buf.find(megatron_steps.COMPANION, 0, end)
    while pos >= 0:
        m = _COMPANION.search(buf, max(0, pos - 60), pos + marker)
        if m is None or m.end() != pos + marker:
            return None
        found.append(m)
        pos = buf.find(megatron_steps.COMPANION, pos + marker, end)
    return found


def iteration_lines(buf: Buffer, end: int, carried: object, order: tuple[int, int] = (0, 1)
                    ) -> Rows | None:
    """The chunk's iteration lines and companions, each read by its own expression."""
    columns = bulkform.columns(_MEGATRON, order, _MEGATRON_KEYS, NEEDLE, buf, end)
    if columns is None:
        return None
    found, first, form = columns
    companions = _companions(buf, end)
    if companions is None:
        return None
    read, between = form.columns(m.groups() for m in found)
    ks, totals, _, ms, inline, gbs = read
    if min(map(int, ks)) < 1 or not bulkform.nothing_read_in(_MEGATRON_EXTRA_KEYS, between):
        return None
    positions = [m.start("at") for m in found]
    size = len(NEEDLE)
    texts = _companion_texts(companions, positions, [o.decode() if o else "" for o in inline],
                             carried[1] if isinstance(carried, tuple) else "")
    return bulkform.make_rows(first, found[-1].end(), positions[-1] + size,
                              [int(t) - 1 for t in totals], list(map(int, gbs)),
                              [int(k) - 1 for k in ks], [float(t) / 1000 for t in ms],
                              [float(t) if t else None for t in texts], texts)


def records(buf: Buffer, end: int, order: tuple[int, int] = (0, 1)) -> Rows | None:
    """A chunk of _RECORD steps only, in one pass of the expression: every needle and every
    companion is in one (so each step's companion is its own, as the line-by-line read pairs
    them, and no line holds anything else it would read); else None."""
    for form in (_RECORD[n] for n in order):
        found = form.pattern.findall(buf, 0, end)
        head = form.pattern.search(buf, 0, end) if found else None
        if head is None:
            continue
        read, between = form.columns(found)
        whole, tflops, _, ks, totals, ms, gbs, loss, norm = read
        if _only_records(buf, end, head.start(), whole):
            break
    else:
        return None
    if not bulkform.nothing_read_in(_MEGATRON_EXTRA_KEYS, between):
        return None
    index = list(map(int, ks))
    try:
        values: list[float | None] = list(map(float, tflops))
        finite = all(map(math.isfinite, map(float, loss + norm)))
    except ValueError:  # not a number: refused line by line
        return None
    if min(index) < 1 or not finite:
        return None
    first = head.end(3)  # where the first iteration line begins (glued: its Step Time line)
    first = first if head.group(3) else head.start() + 1
    pos = buf.rfind(NEEDLE, 0, end)
    return bulkform.make_rows(first, bulkform.stop(buf, pos, end), pos + len(NEEDLE),
                              [int(t) - 1 for t in set(totals)], list(map(int, set(gbs))),
                              list(map(_LESS_ONE, index)),
                              list(map(_MS.__rtruediv__, map(float, ms))),
                              values, list(map(bytes.decode, tflops)))


def _only_records(buf: Buffer, end: int, begin: int, whole: tuple[bytes, ...]) -> bool:
    """Whether every needle and every companion of buf[:end] is in one of the records (whole:
    their texts, the first beginning at `begin`). Records that follow each other without a gap
    leave only what comes before and after them to look through; else both are counted."""
    last = buf.rfind(whole[-1], 0, end)  # the last record: its text cannot recur after it
    stop = last + len(whole[-1])
    if stop - begin == sum(map(len, whole)):
        return all(buf.find(marker, lo, hi) < 0
                   for marker in (NEEDLE, megatron_steps.COMPANION)
                   for lo, hi in ((0, begin), (stop, end)))
    return (buf.count(NEEDLE, 0, end) == len(whole)
            == buf.count(megatron_steps.COMPANION, 0, end))


_LESS_ONE = (-1).__add__  # k - 1, in C
_MS = 1000.0  # a time in ms: t / _MS is t / 1000, in C


def _companion_texts(companions: list[re.Match[bytes]], positions: list[int], own: list[str],
                     carried: str) -> list[str]:
    """Each needle's TFLOPS as printed: the last companion whose marker lies between the
    previous needle and it (the first needle: else the one carried from the previous chunk),
    else its own line's throughput, else ''."""
    size, marker = len(NEEDLE), len(megatron_steps.COMPANION)
    afters = [0] + [p + size for p in positions[:-1]]
    ends = [c.end() for c in companions]
    if len(ends) == len(positions) and all(  # one companion before each: the usual log
            a <= e - marker and e <= p for a, e, p in zip(afters, ends, positions, strict=True)):
        return [c.group(1).decode() for c in companions]
    texts, c = [], 0
    for n, (after, pos) in enumerate(zip(afters, positions, strict=True)):
        last = None
        while c < len(ends) and ends[c] <= pos:
            if ends[c] - marker >= after:
                last = companions[c]
            c += 1
        texts.append(last.group(1).decode() if last is not None
                     else carried if n == 0 and carried else own[n])
    return texts


MEGATRON = Family("megatron", NEEDLE, _read, _bulk, _MEGATRON[0].pattern, first_iteration=1,
                  field_names={"tflops": "MODEL_TFLOP/s/GPU", "gbs": "global batch size"},
                  tail=_tail)
