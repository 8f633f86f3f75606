"""llmb.llmbrun.screen.transport reads NCCL's INFO lines in time linear in their length
(hypothesis): each line it reads, as NCCL prints it (tests/helpers/nccllogs.py), with a run of
200,000 characters of one class its expressions use (blanks, digits, `:`, `/`, letters, ...)
put anywhere in it, with or without a character after the run that none expects.

Not a speed test: the bound (SECONDS) is one that a linear reader meets many times over on any
machine, and that an expression which backtracks over the run (time quadratic in its length:
minutes) cannot."""

from __future__ import annotations

import tempfile
from pathlib import Path

import nccllogs
from deadline import deadline
from hostilelines import hostile_lines
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from llmb.llmbrun.screen import transport

SECONDS = 10
SLOW = "time more than linear in the line's length (an expression backtracking over it)"
LENGTH = 200_000
HOST = "gpu-a"
LINES = [nccllogs.line(HOST, 1234, 0, message, stamp) for stamp in (None, "2026-01-02 03:04:05")
         for message in ("Using network IB", "Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0",
                         "Channel 01/0 : 0[0] -> 8[0] [send] via NET/IBext_v8/0/GDRDMA",
                         "NET/Plugin: Loaded net plugin AWS Libfabric (v8)",
                         nccllogs.PLUGIN_MISSING)]
UNITS = [" ", "\t", "1", ":", "/", "a", "A", "[", "]", ".", "_", "-", "1:", " via NET/", "NET/",
         "Channel 1/1 : ", " [0] NCCL INFO ", "h:1:1 "]
TAILS = ["", "x", "/", ":", "\x00", " "]


def hostile_line() -> st.SearchStrategy[str]:
    """A real line with a run of one class of characters put anywhere in it."""
    return hostile_lines(LINES, UNITS, TAILS, LENGTH)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hostile_line())
# what was found quadratic: blanks after `NCCL INFO`, a message of many `via NET/`
@example(nccllogs.line(HOST, 1, 0, " " * LENGTH + "x"))
@example(nccllogs.line(HOST, 1, 0, "Channel 00/0 : " + " via NET/" * (LENGTH // 9)))
@example(nccllogs.line(HOST, 1, 0, "Channel 00/0 : " * (LENGTH // 15)))
def test_an_info_line_of_any_content_is_read_in_linear_time(line: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        logs = Path(tmp) / transport.LOGS_DIR
        logs.mkdir()
        (logs / "rank-00000.log").write_text(line + "\n" + LINES[1] + "\n")
        with deadline(SECONDS, SLOW):
            seen = transport.read(Path(tmp), {HOST: "node1"})
    assert "IB" in seen["node1"]["channels"]  # the good line after it is read still


def test_a_message_keeps_what_it_said_without_its_trailing_blanks(tmp_path: Path) -> None:
    logs = tmp_path / transport.LOGS_DIR
    logs.mkdir()
    (logs / "rank-00000.log").write_text("\n".join([
        nccllogs.line(HOST, 1, 0, "Using network AWS Libfabric \t "),
        nccllogs.line(HOST, 1, 0, "Channel 02/0 : 0[0] -> 8[0] [send] via NET/Socket/1   "),
        nccllogs.line(HOST, 1, 0, "NET/Plugin :  Loaded net plugin OFI (v7)  ")]) + "\n")
    assert transport.read(tmp_path, {HOST: "node1"}) == {"node1": {
        "networks": {"AWS Libfabric"}, "channels": {"Socket"},
        "plugin": "Loaded net plugin OFI (v7)"}}
