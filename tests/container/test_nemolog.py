"""The NeMo log lines, formatted once, must match what NeMo prints (the seeds' literal lines)."""

from __future__ import annotations

import re

import pytest
from llmb.container import nemolog
from paths import SEEDS

PUBLISHED_STEP_LINE = (
    "Training epoch 0, iteration 11/49 | lr: 1.5e-05 | global_batch_size: 128 | global_step: 11"
    " | reduced_train_loss: 11.96 | train_step_timing in s: 12.39 | TFLOPS_per_GPU: 610.2"
    " | consumed_samples: 1536"
)


def seed_line(fragment: str) -> str:
    """The first line of the seeds that contains fragment, from the fragment to the line's end."""
    for seed in sorted(SEEDS.glob("*.md")):
        for line in seed.read_text(encoding="utf-8").splitlines():
            if fragment in line:
                return line[line.index(fragment) :].strip()
    raise AssertionError(f"no seed line contains {fragment!r}")


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (11.96, "11.96"),
        (12.39, "12.39"),
        (610.2, "610.2"),
        (1134.4, "1.134e+03"),
        (1.5e-05, "1.5e-05"),
        (4.491e-06, "4.491e-06"),
        (2.6934, "2.693"),
        (0.051234, "0.05123"),
        (999.94, "999.9"),
        (123.45, "123.5"),
        (6.0, "6"),
    ],
)
def test_g4_is_four_significant_digits(value: float, text: str) -> None:
    assert nemolog.g4(value) == text


def test_step_line_matches_the_spec_line() -> None:
    line = nemolog.step_line(
        iteration=11,
        last_iteration=49,
        lr=1.5e-05,
        global_batch_size=128,
        global_step=11,
        reduced_train_loss=11.9612,
        train_step_timing=12.3911,
        tflops_per_gpu=610.24,
        consumed_samples=1536,
    )
    assert line == PUBLISHED_STEP_LINE


def test_step_line_field_order_matches_the_seed_lines() -> None:
    # The seeds' lines are older (memory fields, no TFLOPS_per_GPU); the shared fields keep
    # their order and spelling.
    seed = seed_line("Training epoch 0, iteration 49/49")
    ours = nemolog.step_line(
        iteration=49,
        last_iteration=49,
        lr=7.496e-06,
        global_batch_size=128,
        global_step=49,
        reduced_train_loss=11.96,
        train_step_timing=12.39,
        tflops_per_gpu=1.0,
        consumed_samples=6400,
    )

    def keys(line: str) -> list[str]:
        return [part.split(":")[0].strip() for part in line.split(" | ")[1:]]

    shared = [k for k in keys(seed) if k in keys(ours)]
    assert shared == [k for k in keys(ours) if k in keys(seed)]
    assert shared == [
        "lr",
        "global_batch_size",
        "global_step",
        "reduced_train_loss",
        "train_step_timing in s",
        "consumed_samples",
    ]
    assert ours.startswith("Training epoch 0, iteration 49/49 | lr: 7.496e-06 |")


def test_checkpoint_save_line_is_the_seed_line() -> None:
    expected = seed_line("Global Checkpoint Save")
    assert nemolog.checkpoint_save_line(0, 50, 1744408121.151, 4.3891) == expected


def test_checkpoint_load_line_is_the_seed_line() -> None:
    expected = seed_line("Global Checkpoint Load")
    # 3 decimals keep the trailing zero: "1744407969.270s".
    assert nemolog.checkpoint_load_line(0, 1744407969.27, 9.7121) == expected


def test_checkpoint_name_is_nemos() -> None:
    assert nemolog.checkpoint_name(12800) == "default--None=0.0000-epoch=0-consumed_samples=12800.0"


def test_log_line_has_the_nemo_prefix() -> None:
    line = nemolog.log_line("Global Checkpoint Save : x", "nemo_logging:393")
    assert re.fullmatch(
        r"\[NeMo I \d{4}-\d\d-\d\d \d\d:\d\d:\d\d nemo_logging:393\] Global Checkpoint Save : x",
        line,
    )
    assert nemolog.log_prefix("smoke:1", "W").startswith("[NeMo W ")
