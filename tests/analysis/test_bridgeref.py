"""A Megatron-Bridge run judged against NVIDIA's published Megatron-Bridge numbers: the
layout its log states picks the published row, or none and the nearest is named."""

from __future__ import annotations

from pathlib import Path

import pytest
from llmb.analysis import bridgeref, cli
from llmb.container import megatronlog, steplog
from llmb.container.steplog import Step
from llmb.recipes import catalog, published

# qwen3_235b_a22b on 256 GB200 in MXFP8 as Megatron-Bridge's summary publishes it
QWEN_GB200 = {"pipeline_model_parallel_size": 8, "virtual_pipeline_model_parallel_size": 3,
              "expert_model_parallel_size": 32}


def bridge_log(folder: Path, name: str, gbs: int, layout: dict[str, int], seconds: float,
               steps: int = 50) -> Path:
    """A run directory holding rank 0's and the last rank's lines in one log, as srun
    merges them."""
    run = folder / name / name
    run.mkdir(parents=True)
    lines = megatronlog.startup_lines(256, 8, 4096, gbs, steps, mbs=1, layout=layout)
    for i in range(steps):
        step = Step(index=i, last_index=steps - 1, global_step=i, lr=1e-4, gbs=gbs, loss=9.0,
                    seconds=seconds, tflops=1000.0, consumed=gbs * (i + 1))
        for rank in (0, 255):
            lines += steplog.step_lines("megatron-bridge", rank, 256, step)
    log = run / f"log-{name}_4242_0.out"
    log.write_text("\n".join(lines) + "\n")
    return log


def published_row() -> published.Row:
    run = published.Run(model="qwen3_235b_a22b", gpu_type="gb200", gpus=256, precision="fp8_mx",
                        gbs=8192, mbs=1, seq_len=4096, tp=1, pp=8, cp=1, vp=3, ep=32)
    row = published.match(run).reference
    assert row is not None
    return row


def test_a_run_that_ran_the_published_layout_is_judged_against_its_row(tmp_path: Path) -> None:
    row = published_row()
    want = published.step_time(row)
    bridge_log(tmp_path, "pretrain_qwen3_235b_fp8_mx_gpus256", 8192, QWEN_GB200, want / 0.98)
    analysis = cli.analyze(str(tmp_path), "gb200")
    [r] = analysis["results"]
    assert (r["recipe"], r["model_size"], r["dtype"], r["num_gpus"]) == ("qwen3", "235b",
                                                                         "fp8_mx", 256)
    assert r["global_batch_size"] == 8192  # from the log's summary
    assert r["reference_step_time"] == pytest.approx(want, rel=1e-6)
    assert row.file in r["reference_source"] and str(row.line) in r["reference_source"]
    [config] = analysis["configurations"]
    assert config["verdict"] == "pass"


def test_another_layout_has_no_reference_and_names_the_nearest_row(tmp_path: Path) -> None:
    bridge_log(tmp_path, "pretrain_qwen3_235b_fp8_mx_gpus256", 4096, QWEN_GB200, 9.0)
    analysis = cli.analyze(str(tmp_path), "gb200")
    [r] = analysis["results"]
    assert r["reference_step_time"] is None
    assert r["reference_source"].startswith("no published reference; nearest is ")
    assert "gbs 4096 (published 8192)" in r["reference_source"]
    assert analysis["configurations"][0]["verdict"] == "no_reference"


def test_a_log_without_the_summary_says_why_it_has_no_reference(tmp_path: Path) -> None:
    log = bridge_log(tmp_path, "pretrain_qwen3_235b_bf16_gpus256", 8192, {}, 9.0)
    log.write_text("\n".join(line for line in log.read_text().splitlines()
                             if not line.startswith(("  ", "[", "=", "-", "Configuration"))))
    [r] = cli.analyze(str(tmp_path), "gb200")["results"]
    assert r["reference_step_time"] is None and r["reference_source"] == bridgeref.NO_LAYOUT


def test_plain_fp8_is_the_recipes_first_fp8_recipe_for_the_gpu() -> None:
    qwen = next(r for r in catalog.all_recipes() if r.workload == "pretrain_qwen3")
    assert bridgeref.precision(qwen, "fp8", "gb200") == "fp8_mx"
    assert bridgeref.precision(qwen, "fp8", "h100") == "fp8_cs"
    assert bridgeref.precision(qwen, "nvfp4", "gb200") == "nvfp4"
