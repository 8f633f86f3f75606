"""llmb.analysis.bulk: a chunk read in bulk gives exactly the scan the line-by-line read gives,
whatever the log holds (hypothesis: plain lines, lines that are not quite, prefixes, restarts,
repeated steps, odd values, noise, chunk sizes), and plain logs are read in bulk."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from llmb.analysis import bulk, timing
from logformats import MegatronStep, megatron_startup, nemo_step


@contextmanager
def line_by_line(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    with monkeypatch.context() as m:
        m.setattr(bulk, "read", lambda *_: None)
        yield


def scans(text: bytes, chunk: int, monkeypatch: pytest.MonkeyPatch
          ) -> tuple[timing.LogScan, timing.LogScan]:
    with tempfile.NamedTemporaryFile("wb", suffix=".out", delete=False) as f:
        f.write(text)
    try:
        fast = timing.scan_log(f.name, chunk_bytes=chunk)
        with line_by_line(monkeypatch):
            slow = timing.scan_log(f.name, chunk_bytes=chunk)
    finally:
        os.unlink(f.name)
    return fast, slow


PREFIXES = ["", "0: ", " 12: ", "[rank3]: ", "retraining/0 [default0]:", "\x1b[1m",
            "[2025-11-20T14:55:23+08:00] retraining/0 ", "[NeMo I 2025-04-11 14:48:45 x:1] ",
            "iteration 3/4 ", "global_step: 7 ", "lm loss: nan ", "elapsed time per iteration "]
NOISE = ["[Rank 0] (after 3 iterations) memory (GB) | mem-allocated-gigabytes: 51.072",
         "srun: error: node7: task 3: Exited with exit code 1",
         "Global Checkpoint Save : Rank: 0 : Iteration: 50 : Start time: 1.000s : Save "
         "duration: 4.389s", "Step Time : 4.19s GPU utilization: 12.5MODEL_TFLOP/s/GPU",
         "Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/8", "", "\r"]
VALUES = ["9.31", "1.134e+03", "nan", "0", "1_000", "9,31", "1e400", "-2", "12"]


@st.composite
def nemo_log(draw: st.DrawFn) -> bytes:
    lines = []
    for _ in range(draw(st.integers(1, 40))):
        g = draw(st.integers(0, 60))
        line = nemo_step(g % draw(st.sampled_from([60, 20])), draw(st.sampled_from([49, 59])),
                         draw(st.sampled_from([9.31, 9.4, 2e-7, 12.0])),
                         draw(st.sampled_from([610.2, 1134.4, None])),
                         draw(st.sampled_from([128, 128, 64])), global_step=g,
                         loss=draw(st.sampled_from([11.96] * 8 + ["1e400", "1e-400"])))
        if draw(st.integers(0, 9)) == 0:
            line = line.replace("9.31", draw(st.sampled_from(VALUES)))
        if draw(st.integers(0, 9)) == 0:
            line += draw(st.sampled_from([" | val_loss: 11.2", "\x1b[0m", " | grad_norm: nan"]))
        lines += draw(st.lists(st.sampled_from(NOISE), max_size=2))
        lines.append(draw(st.sampled_from(PREFIXES)) + line)
    return ("\n".join(lines) + "\n").encode()


@st.composite
def megatron_log(draw: st.DrawFn) -> bytes:
    lines = []
    for _ in range(draw(st.integers(1, 40))):
        step = MegatronStep(draw(st.integers(0, 60)), draw(st.sampled_from([50, 60])),
                            draw(st.sampled_from([4189.6, 0.0, 20289.1])),
                            draw(st.sampled_from([1610.2, None])),
                            draw(st.sampled_from([128, 128, 64])),
                            grad_norm=draw(st.sampled_from(["9.961", "9.961", "nan"])),
                            nan=draw(st.sampled_from([0, 0, 0, 1])),
                            skipped=draw(st.sampled_from([0, 0, 0, 2])))
        parts = step.lines(glued=draw(st.booleans()))
        if draw(st.integers(0, 9)) == 0:
            parts[-1] = parts[-1].replace("4189.6", draw(st.sampled_from(VALUES)))
        prefix = draw(st.sampled_from(PREFIXES))
        lines += draw(st.lists(st.sampled_from(NOISE), max_size=2)) + [prefix + p for p in parts]
    return ("\n".join(lines) + "\n").encode()


@st.composite
def bridge_log(draw: st.DrawFn) -> bytes:
    """Megatron-Bridge's usual log (a start-up, each step with its Step Time line, glued or
    not, no prefix), read as whole records in bulk, and now and then what stops that: odd
    values, a step without its companion, a stray companion, a prefix, a restart."""
    lines = megatron_startup(8, 8) if draw(st.integers(0, 5)) else []
    for k in range(1, draw(st.integers(1, 50)) + 1):
        odd = draw(st.sampled_from([""] * 150 + ["restart", "nan", "1E+400", "nan iterations",
                                                 "skipped", "time", "tflops", "prefix",
                                                 "alone", "loss"]))
        step = MegatronStep(max(1, k - 3) if odd == "restart" else k, 50,
                            draw(st.sampled_from([4189.6, 4201.3, 950.0])), 1610.2,
                            grad_norm=odd if odd in ("nan", "1E+400") else "9.961",
                            nan=int(odd == "nan iterations"), skipped=int(odd == "skipped"))
        parts = step.lines(glued=draw(st.booleans()))
        if odd == "time":
            parts[-1] = parts[-1].replace("4189.6", draw(st.sampled_from(VALUES)))
        elif odd == "tflops":
            parts[-1] = parts[-1].replace("1610.2", draw(st.sampled_from(["1.2.3", "12", "."])))
        elif odd == "prefix":
            parts = [draw(st.sampled_from(PREFIXES)) + p for p in parts]
        elif odd == "alone":  # a step without its companion, or a companion without a step
            parts = parts[-1:] if len(parts) > 1 else [NOISE[3], *parts]
        elif odd == "loss":
            parts[-1] = parts[-1].replace("lm loss: ", "lm loss: -")
        lines += parts
    return ("\n".join(lines) + draw(st.sampled_from(["\n", "", "\r\n"]))).encode()


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.one_of(nemo_log(), megatron_log(), bridge_log()),
       st.sampled_from([64, 300, 4096, 1 << 22]))
def test_bulk_and_line_by_line_give_the_same_scan(monkeypatch: pytest.MonkeyPatch, text: bytes,
                                                  chunk: int) -> None:
    fast, slow = scans(text, chunk, monkeypatch)
    assert fast == slow
    assert list(fast.steps) == list(slow.steps)  # in the same order too


@pytest.mark.parametrize("lines", [
    [nemo_step(i, 49, 9.31 + i / 100, 814.6) for i in range(50)],
    [x for k in range(1, 51) for x in MegatronStep(k, 50, 4189.6 + k, 1610.2).lines(k >= 10)],
    [f" 3: {x}" for k in range(1, 51) for x in MegatronStep(k, 50, 4189.6, None).lines(False)],
])
def test_a_plain_log_is_read_in_bulk(monkeypatch: pytest.MonkeyPatch, lines: list[str]) -> None:
    buf = ("\n".join(lines) + "\n").encode()
    family = "megatron" if b"elapsed time" in buf else "nemo"
    rows = bulk.read(buf, len(buf), family)
    assert rows is not None and rows.index == list(range(50)) and rows.final == 49
    if b"Step Time" in buf:  # Megatron-Bridge's whole steps: read in one pass
        whole = bulk._records(b"\n" + buf, len(buf) + 1)
        assert whole is not None and whole == bulk._megatron(b"\n" + buf, len(buf) + 1, None)
    fast, slow = scans(buf, 1 << 22, monkeypatch)
    assert fast == slow and fast.complete() and len(fast.steps) == 50


def bridge_steps(count: int) -> list[str]:
    return [x for k in range(1, count + 1)
            for x in MegatronStep(k, 50, 4189.6, 1610.2).lines(False)]


@pytest.mark.parametrize(("where", "line", "bulk_read"), [
    (0, NOISE[0], True), (10, NOISE[0], True), (-1, NOISE[0], True),  # a gap: counted
    (0, NOISE[3], False), (10, NOISE[3], False), (-1, NOISE[3], False),  # a stray companion
    (0, "x elapsed time per iteration (ms): 1.0", False),  # a needle before the first record
    (-1, "x elapsed time per iteration (ms): 1.0", False),  # and after the last
])
def test_records_are_read_in_bulk_only_when_no_needle_is_outside_them(
        monkeypatch: pytest.MonkeyPatch, where: int, line: str, bulk_read: bool) -> None:
    lines = bridge_steps(20)
    lines.insert(len(lines) if where == -1 else where, line)
    buf = ("\n" + "\n".join(lines) + "\n").encode()
    assert (bulk._records(buf, len(buf)) is not None) is bulk_read
    fast, slow = scans(buf, 1 << 22, monkeypatch)
    assert fast == slow
