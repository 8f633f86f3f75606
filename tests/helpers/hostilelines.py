"""Lines an adversary writes for an expression: a real line with a long run of one class of
characters put anywhere in it, then a tail that may or may not let the expression match. An
expression that backtracks takes minutes on such a line; a linear one, milliseconds (the
analyzer's readers and the screen's transport pattern are both fed such lines)."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import strategies as st


def hostile_lines(lines: Sequence[str], units: Sequence[str], tails: Sequence[str],
                  length: int) -> st.SearchStrategy[str]:
    """A line of `lines` with `unit` repeated to about `length` characters at any place in it,
    followed by one of `tails`."""

    @st.composite
    def draw_line(draw: st.DrawFn) -> str:
        line = draw(st.sampled_from(lines))
        at = draw(st.integers(0, len(line)))
        unit = draw(st.sampled_from(units))
        return line[:at] + unit * (length // len(unit)) + draw(st.sampled_from(tails)) + \
            line[at:]

    return draw_line()
