"""llmb.analysis.bulk: a chunk read in bulk gives exactly the scan the line-by-line read gives,
whatever the log holds (hypothesis: plain lines, lines that are not quite, prefixes, fields
between, restarts, repeated steps, odd values, noise, chunk sizes), and plain logs are read in
bulk, with the fields real runs add between the ones read too."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from llmb.analysis import bulk, family_megatron, timing
from logformats import OPTIONAL, MegatronStep, megatron_startup, nemo_step


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
# NeMo's fields between (put before the field named), and Megatron's (before `loss scale`):
# FREE ones the reader takes nothing from; TAKEN ones hold a name it takes a value from, in any
# case (a time, TFLOPS, a grad norm that the line-by-line read would take first), or a
# companion's marker
NEMO_PLACES = [" | global_batch_size", " | global_step", " | reduced_train_loss",
               " | train_step_timing", " | TFLOPS_per_GPU", " | consumed_samples"]
NEMO_FREE = [" | tokens_per_sec_per_gpu: 1234.5", " | load_balancing_loss: 1.002"]
NEMO_TAKEN = [" | my_global_step: 3", " | grad_norm: nan", " | x: iteration 3/4",
              " | \x1b[1mX_GLOBAL_BATCH_SIZE\x1b[0m: 64", " | x train_step_timing in s: 1.5",
              " | x tflops_per_gpu: 7", " | x TFLOPS_PER_GPU: 7"]
MEGATRON_FREE = [" mtp_1 loss: 1.1E+01 |", " num zeros: 3 |"]
MEGATRON_TAKEN = [" lm loss: nan |", " x grad norm: nan |", " x: 5.0MODEL_TFLOP/s/GPU |",
                  " iteration 9/9 |", " x throughput per GPU (TFLOP/s/GPU): 7.0 |",
                  " x global batch size: 64 |"]
NEMO_BETWEEN, MEGATRON_BETWEEN = NEMO_FREE + NEMO_TAKEN, MEGATRON_FREE + MEGATRON_TAKEN


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
        if draw(st.integers(0, 4)) == 0:  # a field between, one the reader takes or not
            place = draw(st.sampled_from(NEMO_PLACES))
            line = line.replace(place, draw(st.sampled_from(NEMO_BETWEEN)) + place, 1)
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
                            skipped=draw(st.sampled_from([0, 0, 0, 2])),
                            extra=draw(st.frozensets(st.sampled_from(sorted(OPTIONAL)))))
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
    extra = draw(st.sampled_from([frozenset()] * 2 + [frozenset(OPTIONAL), frozenset({"moe"}),
                                                      frozenset({"skipped samples", "energy"})]))
    for k in range(1, draw(st.integers(1, 50)) + 1):
        odd = draw(st.sampled_from([""] * 150 + ["restart", "nan", "1E+400", "nan iterations",
                                                 "skipped", "time", "tflops", "prefix",
                                                 "alone", "loss", "fields", "between"]))
        step = MegatronStep(max(1, k - 3) if odd == "restart" else k, 50,
                            draw(st.sampled_from([4189.6, 4201.3, 950.0])), 1610.2,
                            grad_norm=odd if odd in ("nan", "1E+400") else "9.961",
                            nan=int(odd == "nan iterations"), skipped=int(odd == "skipped"),
                            extra=frozenset(OPTIONAL) - extra if odd == "fields" else extra)
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
        elif odd == "between":  # a field between that the reader takes, or a companion's marker
            parts[-1] = parts[-1].replace(" loss scale:", draw(st.sampled_from(
                MEGATRON_BETWEEN)) + " loss scale:")
        lines += parts
    return ("\n".join(lines) + draw(st.sampled_from(["\n", "", "\r\n"]))).encode()


@st.composite
def rank0_log(draw: st.DrawFn) -> bytes:
    """Megatron-Bridge's rank-0 log (Step Time lines alone, a start-up with or without its
    train_iters), now and then with an odd value, a prefix, noise or an iteration line."""
    lines = megatron_startup(8, 8) if draw(st.integers(0, 3)) else []
    if lines and draw(st.booleans()):
        lines = [x for x in lines if "train_iters" not in x]
    for k in range(1, draw(st.integers(1, 60)) + 1):
        line = MegatronStep(k, 50, draw(st.sampled_from([4189.6, 4201.3, 950.0])),
                            1610.2).step_time_text()
        odd = draw(st.sampled_from([""] * 40 + ["time", "tflops", "prefix", "noise", "cut"]))
        if odd == "time":
            line = line.replace("4.19s", draw(st.sampled_from(VALUES)) + "s")
        elif odd == "tflops":
            line = line.replace("1610.2", draw(st.sampled_from(["1.2.3", "12", ".", "nan"])))
        elif odd == "prefix":
            line = draw(st.sampled_from(PREFIXES)) + line
        elif odd == "noise":
            lines += draw(st.lists(st.sampled_from(NOISE), max_size=2))
        elif odd == "cut":
            line = line.partition(" GPU")[0]
        lines.append(line)
    return ("\n".join(lines) + draw(st.sampled_from(["\n", "", "\r\n"]))).encode()


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.one_of(nemo_log(), megatron_log(), bridge_log(), rank0_log()),
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
    # with the fields real runs add: read in bulk too
    [nemo_step(i, 49, 9.31, 814.6).replace(" | TFLOPS", f" | tokens_per_sec_per_gpu: {i} | TFLOPS")
     + " | val_loss: 11.2" for i in range(50)],
    [nemo_step(i, 49, 9.31, 814.6).replace(" | global_batch_size", " | moe_loss: 0.1 | "
                                           "global_batch_size") for i in range(50)],
    [x for k in range(1, 51) for x in MegatronStep(
        k, 50, 4189.6 + k, 1610.2, extra=frozenset(OPTIONAL)).lines(k >= 10)],
    [f"[rank7]: {x}" for k in range(1, 51) for x in MegatronStep(
        k, 50, 4189.6, None, extra=frozenset(OPTIONAL) - {"throughput"}).lines(False)],
])
def test_a_plain_log_is_read_in_bulk(monkeypatch: pytest.MonkeyPatch, lines: list[str]) -> None:
    buf = ("\n".join(lines) + "\n").encode()
    family = "megatron" if b"elapsed time" in buf else "nemo"
    rows = bulk.read(buf, len(buf), family)
    assert rows is not None and rows.index == list(range(50)) and rows.final == 49
    if b"Step Time" in buf:  # Megatron-Bridge's whole steps: read in one pass
        whole = family_megatron.records(b"\n" + buf, len(buf) + 1)
        lines_read = family_megatron.iteration_lines(b"\n" + buf, len(buf) + 1, None)
        assert whole is not None and whole == lines_read
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
    assert (family_megatron.records(buf, len(buf)) is not None) is bulk_read
    fast, slow = scans(buf, 1 << 22, monkeypatch)
    assert fast == slow


@pytest.mark.parametrize(("family", "field", "bulk_read"), [
    *(("nemo", f, f in NEMO_FREE) for f in NEMO_BETWEEN),
    *(("megatron", f, f in MEGATRON_FREE) for f in MEGATRON_BETWEEN)])
def test_a_field_between_is_read_in_bulk_unless_it_holds_a_name_the_reader_takes(
        monkeypatch: pytest.MonkeyPatch, family: str, field: str, bulk_read: bool) -> None:
    if family == "nemo":
        lines = [nemo_step(i, 49, 9.31, 814.6) for i in range(50)]
        lines[20] = lines[20].replace(" | train_step_timing", field + " | train_step_timing")
    else:
        lines = [x for k in range(1, 51)
                 for x in MegatronStep(k, 50, 4189.6, None).lines(False)]  # Megatron-LM's
        lines[20] = lines[20].replace(" loss scale:", field + " loss scale:")
    buf = ("\n" + "\n".join(lines) + "\n").encode()
    assert (bulk.read(buf, len(buf), family) is not None) is bulk_read
    fast, slow = scans(buf, 1 << 22, monkeypatch)
    assert fast == slow  # (in bulk regardless, a grad norm, TFLOPS or throughput would differ)


def test_rank_0s_step_time_lines_are_read_in_bulk(monkeypatch: pytest.MonkeyPatch) -> None:
    """One line per iteration, from the first; the final index from the start-up's
    train_iters; prefixed lines too (a prefix is not read)."""
    for prefix in ("", "0: "):
        lines = megatron_startup(8, 8, train_iters=50) + [
            prefix + MegatronStep(k, 50, 4189.6 + k * 10, 1610.2).step_time_text()
            for k in range(1, 51)]
        buf = ("\n".join(lines) + "\n").encode()
        rows = bulk.read(buf, len(buf), "bridge-step-time")
        assert rows is not None and rows.index == list(range(50)) and rows.final == 49
        assert rows.time[:2] == [4.2, 4.21] and rows.tflops_text[0] == "1610.2"
        fast, slow = scans(buf, 1 << 22, monkeypatch)
        assert fast == slow and fast.complete() and fast.family == "bridge-step-time"
        assert fast.gbs is None and fast.steps[49] == timing.Step(4.69, 1610.2)
