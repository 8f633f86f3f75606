"""llmb.analysis.megatron_steps: Megatron's iteration line and its Step Time companion, one line
at a time and, with hypothesis, in any arrangement a log may print them (glued or not, any
prefix, any noise between): always the same step records."""

from __future__ import annotations

import os
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from llmb.analysis import megatron_steps, timing
from logformats import MegatronStep

STEP = MegatronStep(12, 50, 4189.6, 1610.2, grad_norm="9.961")


def test_an_iteration_line_is_step_k_minus_1_with_its_figures() -> None:
    line = megatron_steps.parse(STEP.iteration_text(), megatron_steps.companion(
        STEP.step_time_text().removesuffix("MODEL_TFLOP/s/GPU")))
    assert line is not None
    assert (line.iteration, line.final, line.time, line.tflops, line.gbs) == (
        11, 49, 4.1896, 1610.2, 128)
    assert line.time_text == "4189.6 ms" and line.tflops_text == "1610.2"
    assert (line.nonfinite, line.refused, line.nan_iterations, line.skipped_iterations) == (
        None, None, 0, 0)


def test_health_counts_and_values_that_are_not_numbers() -> None:
    sick = MegatronStep(7, 50, 4189.6, grad_norm="nan", nan=2, skipped=1)
    line = megatron_steps.parse(sick.iteration_text())
    assert line is not None and line.tflops is None
    assert (line.nonfinite, line.nan_iterations, line.skipped_iterations) == (
        ("grad norm", "nan"), 2, 1)
    comma = megatron_steps.parse(STEP.iteration_text().replace("4189.6", "4189,6"))
    assert comma is not None and comma.time is None and comma.time_text == "4189,6 ms"
    odd = megatron_steps.parse(STEP.iteration_text(), (None, "1_610"))
    assert odd is not None and odd.refused == ("MODEL_TFLOP/s/GPU", "1_610")
    gbs = megatron_steps.parse(STEP.iteration_text().replace("size:   128", "size: 12.5"))
    assert gbs is not None and gbs.gbs is None and gbs.refused == ("global batch size", "12.5")


@pytest.mark.parametrize("text", [
    STEP.iteration_text().replace("iteration       12/", "iteration        0/"),
    STEP.iteration_text().replace(" | elapsed time per iteration (ms): 4189.6", ""),
    "elapsed time per iteration (ms): 4189.6 | no iteration here",
])
def test_no_iteration_from_1_or_no_time_is_no_step(text: str) -> None:
    assert megatron_steps.parse(text) is None


def test_megatron_lm_prints_its_throughput_in_the_line() -> None:
    text = STEP.iteration_text().replace(
        " | learning rate:", " | throughput per GPU (TFLOP/s/GPU): 1750.5 | learning rate:")
    line = megatron_steps.parse(text)
    assert line is not None and line.tflops == 1750.5
    # the Step Time companion, when there is one, is the figure taken
    assert megatron_steps.parse(text, (1610.2, "1610.2")).tflops == 1610.2  # type: ignore


def test_a_scan_names_the_family_and_numbers_iterations_as_the_log_does() -> None:
    scan = timing.scan_lines(STEP.lines(glued=True))
    assert scan.family == "megatron" and scan.steps == {11: timing.Step(4.1896, 1610.2)}
    assert (scan.label(11), scan.name("tflops"), scan.name("gbs")) == (
        12, "MODEL_TFLOP/s/GPU", "global batch size")


# --- any arrangement, the same records ---------------------------------------------------------

PREFIXES = ["", "0: ", " 7: ", "[rank3]: ", "retraining/0 [default0]:",
            "[2025-11-20T14:55:23+08:00] retraining/0 "]
NOISE = [
    "[Rank 0] (after 3 iterations) memory (GB) | mem-allocated-gigabytes: 51.072",
    "Number of parameters in transformer layers in billions:  6.98",
    "throughput per GPU (TFLOP/s/GPU) is logged from the next iteration",
    "node001:4242:4242 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read",
    "/usr/lib/python3/dist-packages/torch/utils.py:12: UserWarning: Step Time is approximate",
    "",
]


@st.composite
def arranged(draw: st.DrawFn) -> tuple[list[str], dict[int, timing.Step]]:
    """Megatron steps printed in some arrangement, and the records they stand for."""
    count = draw(st.integers(1, 30))
    lines: list[str] = []
    expect: dict[int, timing.Step] = {}
    for k in range(1, count + 1):
        ms = draw(st.integers(1, 10**7)) / 10  # printed with one decimal: exactly this
        tflops = draw(st.one_of(st.none(), st.integers(1, 10**6).map(lambda t: t / 10)))
        step = MegatronStep(k, count, ms, tflops, second=k)
        prefix = draw(st.sampled_from(PREFIXES))
        noise = [draw(st.sampled_from(PREFIXES)) + n
                 for n in draw(st.lists(st.sampled_from(NOISE), max_size=3))]
        if tflops is not None and draw(st.booleans()):  # glued, noise before
            lines += [*noise, prefix + step.step_time_text() + step.iteration_text()]
        else:  # separate, noise anywhere around them
            cut = draw(st.integers(0, len(noise)))
            companion = [prefix + step.step_time_text()] if tflops is not None else []
            lines += [*noise[:cut], *companion, *noise[cut:], prefix + step.iteration_text()]
        expect[k - 1] = timing.Step(ms / 1000, tflops)
    return lines, expect


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(arranged(), st.sampled_from([7, 64, 300, 4096]))
def test_any_arrangement_gives_the_same_records(case: tuple[list[str], dict[int, timing.Step]],
                                                chunk: int) -> None:
    lines, expect = case
    scan = timing.scan_lines(lines)
    assert scan.steps == expect
    assert scan.complete() and scan.bad_times == 0 and scan.refused is None
    with tempfile.NamedTemporaryFile("wb", suffix=".out", delete=False) as f:
        f.write(("\n".join(lines) + "\n").encode())
    try:
        assert timing.scan_log(f.name, chunk_bytes=chunk).steps == expect
    finally:
        os.unlink(f.name)
