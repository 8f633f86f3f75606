"""The step lines a job prints per framework and rank read back, through the analyzer's scan,
as the steps they were: every rank's log of a Megatron-Bridge run, and NeMo's rank 0."""

from __future__ import annotations

from pathlib import Path

import pytest
from llmb.analysis import timing
from llmb.container import megatronlog, steplog
from llmb.container.steplog import Step

STEPS = 6
WORLD = 3


def steps(first: int = 0) -> list[Step]:
    return [Step(index=i, last_index=STEPS - 1, global_step=first + i, lr=1e-4, gbs=WORLD,
                 loss=10.0 - i / 10, seconds=1.23456 + i / 100, tflops=456.78, consumed=3 * (i + 1))
            for i in range(STEPS)]


def log_of(framework: str, ranks: range, first: int = 0) -> list[str]:
    """What the given ranks print, in the order the job prints it."""
    start = steplog.startup_lines(framework, WORLD, 4096, WORLD, first + STEPS)
    return (start if 0 in ranks else []) + [line for step in steps(first) for rank in ranks
                    for line in steplog.step_lines(framework, rank, WORLD, step)]


def test_a_bridge_run_prints_step_time_on_rank_0_and_records_on_the_last_rank() -> None:
    step = steps()[0]
    assert steplog.step_lines("megatron-bridge", 1, WORLD, step) == []  # a middle rank: nothing
    assert steplog.step_lines("megatron-bridge", 0, WORLD, step) == [
        "Step Time : 1.23s GPU utilization: 456.8MODEL_TFLOP/s/GPU"]
    (record,) = steplog.step_lines("megatron-bridge", WORLD - 1, WORLD, step)
    assert "iteration        1/       6 | consumed samples:            3 |" in record
    assert "elapsed time per iteration (ms): 1234.6 |" in record
    assert steplog.step_lines("megatron-bridge", 0, 1, step) == [
        megatronlog.step_time_line(step.seconds, step.tflops), record]  # one process: both


def test_every_ranks_log_of_a_bridge_run_reads_as_its_steps(tmp_path: Path) -> None:
    whole = timing.scan_lines(log_of("megatron-bridge", range(WORLD)))
    assert sorted(whole.steps) == list(range(STEPS)) and whole.complete()
    # the record's tenth of a millisecond, the companion's TFLOPS
    assert [round(s.time, 4) for s in whole.steps.values()] == [
        round(1.23456 + i / 100, 4) for i in range(STEPS)]
    assert {s.tflops for s in whole.steps.values()} == {456.8}
    last = timing.scan_lines(log_of("megatron-bridge", range(WORLD - 1, WORLD)))
    assert sorted(last.steps) == list(range(STEPS)) and last.complete()
    rank0 = tmp_path / "rank0.out"  # Step Time lines only: read as a file's chunks are
    rank0.write_text("\n".join(log_of("megatron-bridge", range(1))) + "\n")
    first = timing.scan_log(rank0)
    assert sorted(first.steps) == list(range(STEPS)) and first.complete()
    assert first.world_size == WORLD
    assert [s.time for s in first.steps.values()] == [round(1.23456 + i / 100, 2)
                                                      for i in range(STEPS)]


def test_a_resumed_bridge_run_counts_iterations_over_the_whole_training() -> None:
    (record,) = steplog.step_lines("megatron-bridge", WORLD - 1, WORLD, steps(first=10)[0])
    assert "iteration       11/      16 |" in record


@pytest.mark.parametrize("rank", [1, WORLD - 1])
def test_nemo_prints_from_rank_0_only(rank: int) -> None:
    assert steplog.step_lines("nemo", rank, WORLD, steps()[0]) == []
    scan = timing.scan_lines(log_of("nemo", range(WORLD)))
    assert sorted(scan.steps) == list(range(STEPS)) and scan.complete()


def test_a_moe_runs_losses_follow_lm_loss_and_the_analyzer_reads_the_steps() -> None:
    """Megatron-Bridge's order: lm loss, the router's losses, the MTP losses, loss scale."""
    moe = [Step(**{**vars(s), "losses": (("load_balancing_loss", 0.0),
                                         ("seq_load_balancing_loss", 1.0123),
                                         ("mtp_1 loss", 6.5), ("odd", -1.0))})
           for s in steps()]
    (record,) = steplog.step_lines("megatron-bridge", 0, 1, moe[0])[1:]
    assert ("| lm loss: 1.000000E+01 | load_balancing_loss: 0.000000E+00 | "
            "seq_load_balancing_loss: 1.012300E+00 | mtp_1 loss: 6.500000E+00 | loss scale: "
            "1.0 |") in record  # a negative figure is left out, as training_log leaves it
    lines = [line for s in moe for line in steplog.step_lines("megatron-bridge", 0, 1, s)]
    scan = timing.scan_lines(lines)
    assert sorted(scan.steps) == list(range(STEPS)) and scan.complete()
    assert [round(s.time, 4) for s in scan.steps.values()] == [
        round(1.23456 + i / 100, 4) for i in range(STEPS)]
