"""llmb.analysis.logscan: what a log states besides its step times, whatever its family (the
record rules themselves are held in test_timing.py), and which file is no training log."""

from __future__ import annotations

import pytest
from llmb.analysis import timing
from logformats import (
    MegatronStep,
    megatron_startup,
    nccl_tests_output,
    nemo_step,
    nsys_stats_text,
    print_env_dump,
)


def test_an_epoch_rollover_goes_on_a_restart_starts_over() -> None:
    # NeMo starts `iteration` again with each data epoch; global_step goes on
    lines = [nemo_step(g % 20, 49, 9.3, epoch=g // 20, global_step=g) for g in range(50)]
    scan = timing.scan_lines(lines)
    assert list(scan.steps) == list(range(50)) and scan.complete()
    assert scan.restart_count == 0 and scan.final_change is None
    # the global step going back is a restart, as before
    again = timing.scan_lines(lines[:30] + lines)
    assert (again.restart_count, again.restarts) == (1, [(29, 0)]) and again.complete()


@pytest.mark.parametrize(("line", "seq", "dp"), [
    ("  seq_length: 8192", 8192, None),
    ("  seq_length ...................................... 4096", 4096, None),
    ("GPTConfig(num_layers=32, seq_length=2048, hidden_size=4096)", 2048, None),
    ("data_parallel_size: 16", None, 16),
    ("using world size: 64, data-parallel size: 8, context-parallel size: 1", None, 8),
    ("seq_length: 0", None, None), ("max_seq_length: 9", None, None),
])
def test_the_start_ups_sequence_length_and_data_parallel_size(line: str, seq: int | None,
                                                             dp: int | None) -> None:
    scan = timing.scan_lines([line, *MegatronStep(1, 1, 1000.0).lines(glued=False)])
    assert (scan.seq_length, scan.data_parallel) == (seq, dp)


def test_facts_after_the_first_step_are_not_the_start_ups() -> None:
    step = MegatronStep(1, 2, 1000.0).lines(glued=False)
    scan = timing.scan_lines([*megatron_startup(8, 8, seq_length=4096), *step,
                              "seq_length: 128", "data_parallel_size: 1"])
    assert (scan.seq_length, scan.data_parallel, scan.world_size) == (4096, 8, 8)
    lm = timing.scan_lines(["using world size: 16, data-parallel size: 2", *step])
    assert (lm.world_size, lm.data_parallel) == (16, 2)


def test_megatrons_nan_and_skipped_iterations_are_counted() -> None:
    steps = [MegatronStep(k, 9, 1000.0, nan=int(k in (4, 6)), skipped=int(k in (2, 3, 8)))
             for k in range(1, 10)]
    scan = timing.scan_lines([x for s in steps for x in s.lines(glued=False)])
    assert scan.nan_iterations == (3, 1)  # step index 3: the log's iteration 4
    assert scan.skipped_iterations == (1, 3)  # first at index 1, three in all
    assert scan.label(3) == 4 and timing.scan_lines([nemo_step(3, 9, 1.0)]).label(3) == 3


@pytest.mark.parametrize(("lines", "foreign"), [
    (nccl_tests_output(), "nccl-tests output"),
    (nsys_stats_text(), "an Nsight Systems report's text"),
    (print_env_dump(), "a print_env.sh dump"),
])
def test_another_tools_output_is_told_and_a_training_start_up_is_not(lines: list[str],
                                                                    foreign: str) -> None:
    scan = timing.scan_lines(lines)
    assert (scan.foreign, scan.training, scan.step_lines) == (foreign, False, 0)
    startup = timing.scan_lines(megatron_startup(8, 8))
    assert (startup.foreign, startup.training) == (None, True)
    # a training log that quotes such a line is still a training log
    quoted = timing.scan_lines([*megatron_startup(8, 8), *lines[:2]])
    assert quoted.training
