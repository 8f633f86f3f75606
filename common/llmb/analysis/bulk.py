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
logit`. They are taken whatever their names (`_BETWEEN`), and the chunk goes line by line when
one holds a name the line-by-line read would take a value from, as when a prefix does.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

from llmb.analysis import megatron_steps

_NUM = rb"-?\d{1,18}(?:\.\d{1,18})?(?:[eE][-+]?\d{1,2})?"  # plain and finite (< 1e118)
# Fields the reader takes nothing from, between the ones it reads, where the programs print
# them (elsewhere a line is read line by line): captured, so that their names can be checked.
# NeMo's field is ` | name: value`, Megatron's ` name: value |`; one is never a field the
# expression reads (so that an optional one, TFLOPS, is read where it is, not taken as a field
# between). Each expression is written once with _BETWEEN (a comment) where they may be, and
# comes in two forms: without them (most logs have none: a tenth faster) and with them, tried in
# the order the chunk's first step line calls for (_order).
_BETWEEN = rb"(?#between)"
_NEMO_BETWEEN = (rb"(?: \| (?!lr:|global_batch_size:|global_step:|reduced_train_loss:|"
                 rb"train_step_timing in s:|TFLOPS_per_GPU:|consumed_samples:)[^|\r\n]{1,120})*?")
_MEGATRON_BETWEEN = (rb"(?: (?!elapsed time per iteration|throughput per GPU|learning rate:|"
                     rb"global batch size:|lm loss:|loss scale:|grad norm:|number of )"
                     rb"[^|\r\n]{1,120} \|)*?")


class _Form(NamedTuple):
    """An expression, and which of its groups are fields between (none: the plain form)."""

    pattern: re.Pattern[bytes]
    between: tuple[int, ...]

    def columns(self, rows: Iterable[tuple[Any, ...]]
                ) -> tuple[list[tuple[Any, ...]], list[tuple[bytes, ...]]]:
        """The groups of the rows (findall's, or each match's groups()) as columns: those
        the reader reads, and the fields between."""
        found = list(zip(*rows, strict=True))
        return ([c for n, c in enumerate(found) if n not in self.between],
                [found[n] for n in self.between])


def _forms(expression: bytes, between: bytes) -> tuple[_Form, _Form]:
    """The expression without fields between, and with them (each a named group)."""
    head, *rest = expression.split(_BETWEEN)
    filled = re.compile(head + b"".join(b"(?P<between%d>%s)%s" % (n, between, part)
                                        for n, part in enumerate(rest)))
    return (_Form(re.compile(expression), ()),
            _Form(filled, tuple(sorted(n - 1 for name, n in filled.groupindex.items()
                                       if name.startswith("between")))))


# Each starts with literal text (the regular expression engine skips to it at memory speed);
# what comes before it on its line is the line's prefix. NeMo's fields between: anywhere after
# `lr` (Lightning prints the metrics in the order they were first logged).
_NEMO = _forms(
    rb"Training epoch \d{1,9}, iteration (\d{1,18})/(\d{1,18}) \| lr: [0-9.eE+-]{1,30}"
    + _BETWEEN + rb" \| global_batch_size: (\d{1,18})" + _BETWEEN +
    rb" \| global_step: (\d{1,18})" + _BETWEEN + rb" \| reduced_train_loss: " + _NUM + _BETWEEN
    + rb" \| train_step_timing in s: (" + _NUM + rb")" + _BETWEEN +
    rb"(?: \| TFLOPS_per_GPU: (" + _NUM + rb"))?" + _BETWEEN +
    rb" \| consumed_samples: \d{1,18}" + _BETWEEN + rb"(?:\x1b\[[0-9;]{0,9}m){0,4}(?=[\r\n]|\Z)",
    _NEMO_BETWEEN)
# The names a prefix or a field between may not hold (in any case: the line-by-line read takes
# NeMo's in any case, and whatever case is refused is only read line by line); looked for as
# plain text, a tenth of the cost of one expression over them.
_NEMO_KEYS = (b"iteration", b"train_step_timing", b"tflops_per_gpu", b"global_batch_size",
              b"global_step", b"reduced_train_loss", b"grad_norm", b"grad norm")
_ANSI = re.compile(rb"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")  # as the line-by-line read
# Megatron-Bridge's fields between (train_utils.training_log): `skipped samples` after the
# consumed ones; `energy per GPU` and `power per GPU` after the time and throughput; losses after
# `lm loss` (a mixture of experts' `load_balancing_loss`, `z_loss`, multi-token prediction's
# `mtp_1 loss`); `num zeros`, `params norm` and `max attention logit` after the grad norm;
# Megatron-LM's `decoupled learning rate` after the learning rate. (`at`: where the needle is.)
_MEGATRON = _forms(
    rb"\] iteration +(\d{1,18})/ *(\d{1,18}) \| consumed samples: +\d{1,18} \|" + _BETWEEN +
    rb" (?P<at>)" + megatron_steps.NEEDLE + rb" \(ms\): (\d{1,15}\.\d) \|"
    rb"(?: throughput per GPU \(TFLOP/s/GPU\): (\d{1,15}\.\d) \|)?" + _BETWEEN +
    rb" learning rate: [0-9.E+-]{1,20} \|" + _BETWEEN + rb" global batch size: +(\d{1,18})"
    rb" \| lm loss: " + _NUM + rb" \|" + _BETWEEN + rb" loss scale: [0-9.]{1,20}"
    rb" \| grad norm: " + _NUM + rb" \|" + _BETWEEN +
    rb" number of skipped iterations: +0 \| number of nan iterations: +0 \|(?=[\r\n]|\Z)",
    _MEGATRON_BETWEEN)
# Megatron-Bridge's step as it usually comes: a whole Step Time line (from a line end), then its
# iteration line with no prefix but its time stamp, on the next line or glued. Its groups: the
# whole record, the TFLOPS, the line end between the two, k, N, the time (ms), the GBS, lm loss
# and grad norm (read as float() reads them, as the line-by-line read does: cheaper than
# spelling them out here). A record holds one needle and one companion, and neither can run
# over its ends (it begins with a line end and ends with `|`).
_RECORD = _forms(
    rb"(\nStep Time : [0-9.]{1,20}s GPU utilization: ([0-9.]{1,30})"
    + re.escape(megatron_steps.COMPANION) + rb"(\n|\r\n|) ?\[[0-9 :.T+-]{1,40}\]"
    rb" iteration +(\d{1,18})/ *(\d{1,18}) \| consumed samples: +\d{1,18} \|" + _BETWEEN + rb" "
    + megatron_steps.NEEDLE + rb" \(ms\): (\d{1,15}\.\d) \|"
    rb"(?: throughput per GPU \(TFLOP/s/GPU\): \d{1,15}\.\d \|)?" + _BETWEEN +
    rb" learning rate: [0-9.E+-]{1,20} \|" + _BETWEEN + rb" global batch size: +(\d{1,18}) \|"
    rb" lm loss: ([0-9.E+-]{1,30}) \|" + _BETWEEN + rb" loss scale: [0-9.]{1,20} \|"
    rb" grad norm: ([0-9.E+-]{1,30}) \|" + _BETWEEN +
    rb" number of skipped iterations: +0 \| number of nan iterations: +0 \|)(?![^\r\n])",
    _MEGATRON_BETWEEN)
_MEGATRON_KEYS = (b"iteration", b"global batch size", b"lm loss", b"grad norm",
                  b"throughput per gpu")
# what a field between may not hold either: a companion's marker (it would pair with the next
# step, line by line)
_MEGATRON_EXTRA_KEYS = (*_MEGATRON_KEYS, megatron_steps.COMPANION.lower())
_COMPANION = re.compile(rb"GPU utilization: (\d{1,15}(?:\.\d{1,15})?)" +
                        re.escape(megatron_steps.COMPANION))


@dataclass
class Rows:
    """A chunk's step lines, read: where the first begins and the last ends, the end of the
    last one's needle, and per line its index, final index, time (s) and TFLOPS."""

    first: int
    last: int
    after: int
    final: int
    gbs: int
    index: list[int]
    time: list[float]
    tflops: list[float | None]
    tflops_text: list[str]


def read(buf: bytes | bytearray, end: int, family: str, carried: object = None
         ) -> Rows | None:
    """The chunk's step lines in bulk, or None when one of them needs reading line by line
    (carried: a Megatron companion from the previous chunk, (value, text))."""
    if isinstance(carried, tuple) and carried[0] is None:
        return None  # a companion that is no number: refused line by line
    order = _order(buf, end, family)
    if family == "nemo":
        return _nemo(buf, end, order)
    if end <= DENSE and (rows := _records(buf, end, order)) is not None:
        return rows
    return _megatron(buf, end, carried, order)


def _order(buf: bytes | bytearray, end: int, family: str) -> tuple[int, int]:
    """Which form to try first (0: without fields between, 1: with them): the one the chunk's
    first step line takes. (Each try of a form reads the whole chunk; a log's lines are as a
    rule all of one form.)"""
    needle, plain = ((b"train_step_timing", _NEMO[0]) if family == "nemo"
                     else (megatron_steps.NEEDLE, _MEGATRON[0]))
    pos = buf.find(needle, 0, end)
    if pos >= 0 and plain.pattern.search(buf, *line(buf, pos, end)) is None:
        return 1, 0
    return 0, 1


REACH = 4096  # a line's end is looked for this far first (a file may have no \\r at all)
# Up to this size a chunk is searched by one pass of the expression; a larger one, mostly
# other lines, by bytes.find from needle to needle (the expression engine is slower at that).
DENSE = 1 << 20


def _stop(buf: bytes | bytearray, pos: int, end: int) -> int:
    """Where the line holding buf[pos] ends (at \\n or \\r), within buf[:end]: the first
    \\n, then a \\r only before it (most logs have none: not looked for to the end)."""
    for lo, hi in ((pos, min(end, pos + REACH)), (min(end, pos + REACH), end)):
        n = buf.find(b"\n", lo, hi)
        r = buf.find(b"\r", lo, n if n >= 0 else hi)
        if n >= 0 or r >= 0:
            return r if r >= 0 else n
    return end


def _start(buf: bytes | bytearray, pos: int) -> int:
    """Where the line holding buf[pos] begins (a \\r looked for only after the last \\n)."""
    for lo, hi in ((max(0, pos - REACH), pos), (0, max(0, pos - REACH))):
        n = buf.rfind(b"\n", lo, hi)
        r = buf.rfind(b"\r", max(lo, n), hi)
        if n >= 0 or r >= 0:
            return max(n, r) + 1
    return 0


def line(buf: bytes | bytearray, pos: int, end: int) -> tuple[int, int]:
    """The bounds of the line (split at \\n and \\r) holding buf[pos], within buf[:end]."""
    return _start(buf, pos), _stop(buf, pos, end)


def _columns(forms: tuple[_Form, _Form], order: tuple[int, int], keys: tuple[bytes, ...],
             needle: bytes, buf: bytes | bytearray, end: int
             ) -> tuple[list[re.Match[bytes]], int, _Form] | None:
    """The plain line holding each needle (its match: the line's end is the match's end) and
    where the first one's line begins; None unless every needle is in one, and no prefix holds
    what the line-by-line read would take a value from. Between needles only bytes.find runs.
    (forms: without fields between and with them, tried in that order or the other; the one
    that read them.)"""
    form = forms[-1]  # (a large chunk, line by line: the form with fields between, which
    # takes a line without them too, whatever the order)
    if end <= DENSE:  # a small chunk: one pass of the expression, its needles counted
        needles = buf.count(needle, 0, end)
        for form in (forms[n] for n in order):
            found = list(form.pattern.finditer(buf, 0, end))
            if found and len(found) == needles:
                break
        else:
            return None
        # each line begins after the last line end before it, which lies after the previous
        # plain line's end (a plain line ends at a line end)
        ends = [max(0, _start(buf, found[0].start()) - 1)] + [m.end() for m in found[:-1]]
        starts = [max(buf.rfind(b"\n", lo, m.start()), buf.rfind(b"\r", lo, m.start())) + 1
                  for lo, m in zip(ends, found, strict=True)]
    else:
        found, starts = [], []
        pos = buf.find(needle, 0, end)
        while pos >= 0:
            start, stop = _start(buf, pos), _stop(buf, pos, end)
            m = form.pattern.search(buf, start, stop)
            if m is None or m.end() != stop or not m.start() <= pos:
                return None
            found.append(m)
            starts.append(start)
            pos = buf.find(needle, stop, end)
        if not found:
            return None
    prefixes = b"\n".join(buf[a:m.start()] for a, m in zip(starts, found, strict=True))
    if _names_in(keys, prefixes):
        return None
    return found, starts[0], form


def _companions(buf: bytes | bytearray, end: int) -> list[re.Match[bytes]] | None:
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


def _nemo(buf: bytes | bytearray, end: int, order: tuple[int, int]) -> Rows | None:
    columns = _columns(_NEMO, order, _NEMO_KEYS, b"train_step_timing", buf, end)
    if columns is None:
        return None
    found, first, form = columns
    read, between = form.columns(m.groups() for m in found)
    _, finals, gbs, steps, times, tflops = read
    if not _nothing_read_in(_NEMO_KEYS, between):
        return None
    texts = [t.decode() if t is not None else "" for t in tflops]
    return _rows(first, found[-1].end(), 0, list(map(int, finals)),
                 list(map(int, gbs)), list(map(int, steps)), [float(t) for t in times],
                 [float(t) if t else None for t in texts], texts)


def _megatron(buf: bytes | bytearray, end: int, carried: object, order: tuple[int, int] = (0, 1)
              ) -> Rows | None:
    columns = _columns(_MEGATRON, order, _MEGATRON_KEYS, megatron_steps.NEEDLE, buf, end)
    if columns is None:
        return None
    found, first, form = columns
    companions = _companions(buf, end)
    if companions is None:
        return None
    read, between = form.columns(m.groups() for m in found)
    ks, totals, _, ms, inline, gbs = read
    if min(map(int, ks)) < 1 or not _nothing_read_in(_MEGATRON_EXTRA_KEYS, between):
        return None
    positions = [m.start("at") for m in found]
    size = len(megatron_steps.NEEDLE)
    texts = _companion_texts(companions, positions, [o.decode() if o else "" for o in inline],
                             carried[1] if isinstance(carried, tuple) else "")
    return _rows(first, found[-1].end(), positions[-1] + size, [int(t) - 1 for t in totals],
                 list(map(int, gbs)), [int(k) - 1 for k in ks], [float(t) / 1000 for t in ms],
                 [float(t) if t else None for t in texts], texts)


def _records(buf: bytes | bytearray, end: int, order: tuple[int, int] = (0, 1)) -> Rows | None:
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
    if not _nothing_read_in(_MEGATRON_EXTRA_KEYS, between):
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
    pos = buf.rfind(megatron_steps.NEEDLE, 0, end)
    return _rows(first, _stop(buf, pos, end), pos + len(megatron_steps.NEEDLE),
                 [int(t) - 1 for t in set(totals)], list(map(int, set(gbs))),
                 list(map(_LESS_ONE, index)), list(map(_MS.__rtruediv__, map(float, ms))),
                 values, list(map(bytes.decode, tflops)))


def _only_records(buf: bytes | bytearray, end: int, begin: int, whole: tuple[bytes, ...]
                  ) -> bool:
    """Whether every needle and every companion of buf[:end] is in one of the records (whole:
    their texts, the first beginning at `begin`). Records that follow each other without a gap
    leave only what comes before and after them to look through; else both are counted."""
    last = buf.rfind(whole[-1], 0, end)  # the last record: its text cannot recur after it
    stop = last + len(whole[-1])
    if stop - begin == sum(map(len, whole)):
        return all(buf.find(marker, lo, hi) < 0
                   for marker in (megatron_steps.NEEDLE, megatron_steps.COMPANION)
                   for lo, hi in ((0, begin), (stop, end)))
    return (buf.count(megatron_steps.NEEDLE, 0, end) == len(whole)
            == buf.count(megatron_steps.COMPANION, 0, end))


def _names_in(keys: tuple[bytes, ...], text: bytes) -> bool:
    """Whether text, its ANSI colours taken out, holds one of the names (lower case) in any
    case."""
    text = (_ANSI.sub(b"", text) if b"\x1b" in text else text).lower()
    return any(key in text for key in keys)


def _nothing_read_in(keys: tuple[bytes, ...], between: list[tuple[bytes, ...]]) -> bool:
    """Whether the fields between (their columns: b'' where a line has none) hold no name the
    line-by-line read takes a value from."""
    if not any(map(any, between)):  # (as a rule: none)
        return True
    return not _names_in(keys, b"\n".join(map(b"\n".join, between)))


_LESS_ONE = (-1).__add__  # k - 1, in C
_MS = 1000.0  # a time in ms: t / _MS is t / 1000, in C


def _companion_texts(companions: list[re.Match[bytes]], positions: list[int], own: list[str],
                     carried: str) -> list[str]:
    """Each needle's TFLOPS as printed: the last companion whose marker lies between the
    previous needle and it (the first needle: else the one carried from the previous chunk),
    else its own line's throughput, else ''."""
    size, marker = len(megatron_steps.NEEDLE), len(megatron_steps.COMPANION)
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


def _rows(first: int, last: int, after: int, finals: list[int], gbs: list[int],
          index: list[int], time: list[float], tflops: list[float | None], texts: list[str]
          ) -> Rows | None:
    final_set, gbs_set = set(finals), set(gbs)
    if len(final_set) != 1 or len(gbs_set) != 1 or min(gbs_set) < 1:
        return None
    return Rows(first, last, after, final_set.pop(), gbs_set.pop(), index, time, tflops, texts)
