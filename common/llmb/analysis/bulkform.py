"""What every family's bulk read shares (llmb.analysis.bulk): an expression's two forms, a
line's bounds, the columns of the plain lines a chunk holds, and the checks that send a chunk
line by line instead. Standard library only: it runs inside the log scan.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

NUM = rb"-?\d{1,18}(?:\.\d{1,18})?(?:[eE][-+]?\d{1,2})?"  # plain and finite (< 1e118)
# Fields the reader takes nothing from, between the ones it reads, where the programs print
# them (elsewhere a line is read line by line): captured, so that their names can be checked.
# NeMo's field is ` | name: value`, Megatron's ` name: value |`; one is never a field the
# expression reads (so that an optional one, TFLOPS, is read where it is, not taken as a field
# between). Each expression is written once with BETWEEN (a comment) where they may be, and
# comes in two forms: without them (most logs have none: a tenth faster) and with them, tried in
# the order the chunk's first step line calls for (llmb.analysis.bulk.order). A field between is
# at most 120 characters and begins at its separator, so a line's fields split one way only, and
# no two BETWEEN may meet (not across an optional field either: put the one after it inside its
# group), or a line of many fields splits between them in as many ways (time quadratic in its
# length; llmb.analysis.family says the rule for every expression).
BETWEEN = rb"(?#between)"


class Form(NamedTuple):
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


def two_forms(expression: bytes, between: bytes) -> tuple[Form, Form]:
    """The expression without fields between, and with them (each a named group)."""
    head, *rest = expression.split(BETWEEN)
    filled = re.compile(head + b"".join(b"(?P<between%d>%s)%s" % (n, between, part)
                                        for n, part in enumerate(rest)))
    return (Form(re.compile(expression), ()),
            Form(filled, tuple(sorted(n - 1 for name, n in filled.groupindex.items()
                                       if name.startswith("between")))))


_ANSI = re.compile(rb"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")  # as the line-by-line read


@dataclass
class Rows:
    """A chunk's step lines, read: where the first begins and the last ends, the end of the
    last one's needle, and per line its index, final index, time (s) and TFLOPS."""

    first: int
    last: int
    after: int
    final: int
    gbs: int | None  # None: the lines print none (llmb.analysis.family_steptime)
    index: list[int]
    time: list[float]
    tflops: list[float | None]
    tflops_text: list[str]


REACH = 4096  # a line's end is looked for this far first (a file may have no \\r at all)
# A line longer than this is no log line (a step line is a few hundred bytes; 4 KB with many
# fields between): it is not read, wherever it falls in the file's chunks (llmb.analysis.timing).
MAX_LINE = 1 << 20
# Up to this size a chunk is searched by one pass of the expression; a larger one, mostly
# other lines, by bytes.find from needle to needle (the expression engine is slower at that).
# (No more than MAX_LINE: a chunk this small holds no line longer than that.)
DENSE = MAX_LINE


def stop(buf: bytes | bytearray, pos: int, end: int) -> int:
    """Where the line holding buf[pos] ends (at \\n or \\r), within buf[:end]: the first
    \\n, then a \\r only before it (most logs have none: not looked for to the end)."""
    for lo, hi in ((pos, min(end, pos + REACH)), (min(end, pos + REACH), end)):
        n = buf.find(b"\n", lo, hi)
        r = buf.find(b"\r", lo, n if n >= 0 else hi)
        if n >= 0 or r >= 0:
            return r if r >= 0 else n
    return end


def start(buf: bytes | bytearray, pos: int) -> int:
    """Where the line holding buf[pos] begins (a \\r looked for only after the last \\n)."""
    for lo, hi in ((max(0, pos - REACH), pos), (0, max(0, pos - REACH))):
        n = buf.rfind(b"\n", lo, hi)
        r = buf.rfind(b"\r", max(lo, n), hi)
        if n >= 0 or r >= 0:
            return max(n, r) + 1
    return 0


def line(buf: bytes | bytearray, pos: int, end: int) -> tuple[int, int]:
    """The bounds of the line (split at \\n and \\r) holding buf[pos], within buf[:end]."""
    return start(buf, pos), stop(buf, pos, end)


def columns(forms: tuple[Form, Form], order: tuple[int, int], keys: tuple[bytes, ...],
            needle: bytes, buf: bytes | bytearray, end: int
            ) -> tuple[list[re.Match[bytes]], int, Form] | None:
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
        ends = [max(0, start(buf, found[0].start()) - 1)] + [m.end() for m in found[:-1]]
        starts = [max(buf.rfind(b"\n", lo, m.start()), buf.rfind(b"\r", lo, m.start())) + 1
                  for lo, m in zip(ends, found, strict=True)]
    else:
        found, starts = [], []
        pos = buf.find(needle, 0, end)
        while pos >= 0:
            begin, finish = start(buf, pos), stop(buf, pos, end)
            if finish - begin > MAX_LINE:  # not read: line by line, it is left out
                return None
            m = form.pattern.search(buf, begin, finish)
            if m is None or m.end() != finish or not m.start() <= pos:
                return None
            found.append(m)
            starts.append(begin)
            pos = buf.find(needle, finish, end)
        if not found:
            return None
    prefixes = b"\n".join(buf[a:m.start()] for a, m in zip(starts, found, strict=True))
    if names_in(keys, prefixes):
        return None
    return found, starts[0], form


def names_in(keys: tuple[bytes, ...], text: bytes) -> bool:
    """Whether text, its ANSI colours taken out, holds one of the names (lower case) in any
    case."""
    text = (_ANSI.sub(b"", text) if b"\x1b" in text else text).lower()
    return any(key in text for key in keys)


def nothing_read_in(keys: tuple[bytes, ...], between: list[tuple[bytes, ...]]) -> bool:
    """Whether the fields between (their columns: b'', or None where their optional field is
    not there, where a line has none) hold no name the line-by-line read takes a value from."""
    if not any(map(any, between)):  # (as a rule: none)
        return True
    return not names_in(keys, b"\n".join(b"\n".join(filter(None, c)) for c in between))


def make_rows(first: int, last: int, after: int, finals: list[int], gbs: list[int],
              index: list[int], time: list[float], tflops: list[float | None], texts: list[str]
              ) -> Rows | None:
    """The Rows, or None unless the lines share one final index and one global batch size."""
    final_set, gbs_set = set(finals), set(gbs)
    if len(final_set) != 1 or len(gbs_set) != 1 or min(gbs_set) < 1:
        return None
    return Rows(first, last, after, final_set.pop(), gbs_set.pop(), index, time, tflops, texts)
