"""Node lists written as Slurm writes them: `gpu[0000-0199],login1`.

`scontrol show hostlist` folds a list of node names into ranges of each prefix; `compressed`
does the same, so that a long list (the 200 suspects of a screen, added to --exclude) fits an
#SBATCH line, which holds at most llmb.launch.placement.MAX_VALUE_LEN characters. What it writes
expands (llmb.launch.placement.expand_hostlist, Slurm's own rules) to exactly the names given:
names of one prefix and one digit count form a group (`n7` and `n007` never share one), and a
range keeps its numbers' zero padding.

A node list stays compressed until it is bounded: `parse` reads its grammar into ranges,
`count` multiplies and sums the ranges' sizes without writing one name, and `expand` refuses,
in one line naming the variable or option, the count and the bound, any list that names more
than its bound (MAX_NODES unless the caller knows a smaller one) before it writes a name. A
few hundred characters of ranges (`n[0-65535,0-65535,...]`) name billions of nodes.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence

from llmb.shared import values
from llmb.shared.errors import UsageError

MAX_NODES = 65536  # the most names one node list may expand to
_NUMBERED = re.compile(r"(.*?)([0-9]+)")
_HOST_PART = re.compile(r"[A-Za-z0-9._-]*")
_RANGE = re.compile(r"([0-9]{1,18})(?:-([0-9]{1,18}))?")
_UNBALANCED = re.compile(r"\[[^\]]*\[|\][^\[]*\]")

Range = tuple[int, int, int]  # first, last, zero-padded width (0: none)
Piece = str | tuple[Range, ...]  # text, or a bracket's ranges
Item = tuple[Piece, ...]  # one name pattern between top-level commas


class HostlistError(UsageError):
    """A node list that is not one, or names more nodes than allowed; str() is one line."""


def _error(label: str, value: str, why: str) -> HostlistError:
    return HostlistError(f"{label}={values.shown(value)} is not a Slurm node list ({why}); "
                         "allowed: node names and ranges, e.g. node01,node[03-05,07]")


def _split_top(text: str) -> list[str]:
    """Split a hostlist on the commas that are not inside brackets."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def _bracket(label: str, value: str, piece: str) -> tuple[Range, ...]:
    ranges = []
    for rng in piece[1:-1].split(","):
        m = _RANGE.fullmatch(rng)
        if not m:
            raise _error(label, value, f"bad range '{rng}' in {piece}")
        lo, hi = m.group(1), m.group(2) or m.group(1)
        if int(hi) < int(lo):
            raise _error(label, value, f"range {rng} runs backwards")
        ranges.append((int(lo), int(hi), len(lo) if lo.startswith("0") else 0))
    return tuple(ranges)


def _item(label: str, value: str, item: str) -> Item:
    pieces: list[Piece] = []
    for piece in re.split(r"(\[[^\[\]]*\])", item):
        if piece.startswith("["):
            pieces.append(_bracket(label, value, piece))
        elif not _HOST_PART.fullmatch(piece):
            raise _error(label, value, f"'{piece}' is not part of a node name")
        elif piece:
            pieces.append(piece)
    first = pieces[0] if pieces else ""
    if isinstance(first, str) and not first[:1].isalnum():
        raise _error(label, value, f"'{item}' is not a node name")
    return tuple(pieces)


def parse(label: str, value: str) -> list[Item]:
    """The name patterns of a Slurm hostlist expression (`gpu[01-03],login1`), validated and
    still compressed; HostlistError (naming `label`) for one that is not a node list."""
    if "/" in value:
        raise HostlistError(f"{label}={values.shown(value)} looks like a file; give node "
                            "names, e.g. node01,node[03-05]")
    if value.count("[") != value.count("]") or _UNBALANCED.search(value):
        raise _error(label, value, "unbalanced brackets")
    items = []
    for text in _split_top(value):
        if not text:
            raise _error(label, value, "an empty name between commas")
        items.append(_item(label, value, text))
    return items


def count(items: Sequence[Item]) -> int:
    """How many names the patterns write (repeats included), computed from the ranges alone."""
    return sum(math.prod(sum(hi - lo + 1 for lo, hi, _ in p) for p in item
                         if not isinstance(p, str)) for item in items)


def expand(label: str, value: str, bound: int = MAX_NODES) -> list[str]:
    """The node names of a hostlist expression, each once, in order; HostlistError when it is
    not one or names more than `bound` nodes (counted before any name is written)."""
    items = parse(label, value)
    named = count(items)
    if named > bound:
        raise HostlistError(f"{label}={values.shown(value)} names {named} nodes; at most "
                            f"{bound} are allowed: name fewer nodes")
    names: dict[str, None] = {}
    for item in items:
        written = [""]
        for p in item:
            tails = [p] if isinstance(p, str) else [str(n).zfill(width) for lo, hi, width in p
                                                     for n in range(lo, hi + 1)]
            written = [w + t for w in written for t in tails]
        names.update(dict.fromkeys(written))
    return list(names)


def _ranges(numbers: list[int], width: int) -> str:
    """`0000-0003,0007`: consecutive numbers as ranges, each padded to width."""
    parts, start = [], 0
    for i in range(1, len(numbers) + 1):
        if i == len(numbers) or numbers[i] != numbers[i - 1] + 1:
            lo, hi = numbers[start], numbers[i - 1]
            text = str(lo).zfill(width)
            parts.append(text if lo == hi else f"{text}-{str(hi).zfill(width)}")
            start = i
    return ",".join(parts)


def compressed(names: Iterable[str]) -> str:
    """The names as a Slurm hostlist expression, in the order each prefix first appears."""
    groups: dict[tuple[str, int], list[int]] = {}
    order: list[tuple[str, int] | str] = []
    for name in dict.fromkeys(names):
        m = _NUMBERED.fullmatch(name)
        if m is None:
            order.append(name)
            continue
        key = (m.group(1), len(m.group(2)))
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append(int(m.group(2)))
    out = []
    for item in order:
        if isinstance(item, str):
            out.append(item)
            continue
        prefix, width = item
        numbers = sorted(groups[item])
        if len(numbers) == 1:
            out.append(f"{prefix}{str(numbers[0]).zfill(width)}")
        else:
            out.append(f"{prefix}[{_ranges(numbers, width)}]")
    return ",".join(out)
