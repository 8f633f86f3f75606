"""Node lists written as Slurm writes them: `gpu[0000-0199],login1`.

`scontrol show hostlist` folds a list of node names into ranges of each prefix; `compressed`
does the same, so that a long list (the 200 suspects of a screen, added to --exclude) fits an
#SBATCH line, which holds at most llmb.launch.placement.MAX_VALUE_LEN characters. What it writes
expands (llmb.launch.placement.expand_hostlist, Slurm's own rules) to exactly the names given:
names of one prefix and one digit count form a group (`n7` and `n007` never share one), and a
range keeps its numbers' zero padding. Standard library only.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_NUMBERED = re.compile(r"(.*?)([0-9]+)")


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
