"""llmb.analysis.crosscheck end to end: what a run's manifest or name says against what its log
states (world size, GBS, layers, the model NeMo's TFLOPS imply, the final iteration) and the
GPU's physical limits, on the crafted logs of tests/fixtures/logs/trust (make_trust_fixtures.py:
each one read as a Success before these checks)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from analyzercli import run_analyzer
from paths import LOGS

TRUST = LOGS / "trust"
EXPERIMENTS = LOGS / "experiments"


def analyze(root: Path) -> dict[str, Any]:
    proc = run_analyzer(["--format=json", str(root)])
    assert "Traceback" not in proc.stderr, proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def trust() -> dict[str, dict[str, Any]]:
    return {r["filename"].split("/")[0]: r for r in analyze(TRUST)["results"]}


@pytest.mark.parametrize(("case", "words"), [
    # The log: nemotron 15b fp8 on 16 GPUs at 0.21 s per step, an MFU of 371%.
    ("manifest-gpus", ["its llmb_manifest.json says 64 GPUs, the log 16 processes",
                       "MEMBER: 1/16", "the log is not this configuration's"]),
    ("manifest-gbs", ["its llmb_manifest.json says GBS 16, the step lines' "
                      "global_batch_size 64"]),
    ("manifest-layers", ["its llmb_manifest.json says num_layers 1, the catalog's nemotron 15b "
                         "fp8 on 16 h100 GPUs has 32"]),
    # No world-size line left, but NeMo's TFLOPS_per_GPU (7333 on 16 GPUs) still tell.
    ("absurd-gpus", ["TFLOPS_per_GPU 7700 at iteration 11 is above the h100 fp8 peak "
                     "(1979 TFLOPS)", "the log is not this configuration's"]),
    ("name-model", ["the log's TFLOPS_per_GPU imply 1.42e+15 model FLOPs per sample (GBS 128 "
                    "on 8 GPUs), its experiment name's model (llama3.1 8b, 32 layers) has "
                    "4.74e+14"]),
    ("tflops-digits", ["TFLOPS_per_GPU 100000000000000001097... (309 characters) at iteration 0 "
                       "is above the h100 fp8 peak (1979 TFLOPS)"]),
])
def test_a_log_that_is_not_its_configurations_is_invalid(
        trust: dict[str, dict[str, Any]], case: str, words: list[str]) -> None:
    r = trust[case]
    assert r["status"] == "Invalid", r["reason"]
    for word in words:
        assert word in r["reason"]


def test_invalid_runs_give_no_verdict(trust: dict[str, dict[str, Any]]) -> None:
    data = analyze(TRUST)
    configs = {c["config_key"]: c for c in data["configurations"]}
    # The manifest-layers log claimed the published 15b row and would have passed it.
    assert configs["nemotron/15b/fp8/h100/16gpu/weak/gbs64"]["verdict"] == "no_successful_run"
    assert configs["llama3.1/8b/bf16/h100/8gpu/weak/gbs128"]["verdict"] == "no_successful_run"


def copy_run(experiment: str, dest: Path) -> Path:
    shutil.copytree(EXPERIMENTS / experiment, dest / experiment)
    [log] = (dest / experiment).rglob("log-*.out")
    return log


def test_an_old_style_names_gbs_gives_way_to_the_logs(tmp_path: Path) -> None:
    """`pretrain_llama3.1_8b_bf16_16` states no GBS: the published row's (256) was assumed;
    the step lines say 128, so the run is not the published row and has no reference."""
    log = copy_run("pretrain_llama3.1_8b_bf16_16", tmp_path)
    text = log.read_text().replace("global_batch_size: 256", "global_batch_size: 128")
    # half the samples per step: NeMo's TFLOPS_per_GPU half as high too
    log.write_text(re.sub(r"TFLOPS_per_GPU: ([0-9.]+)",
                          lambda m: f"TFLOPS_per_GPU: {float(m.group(1)) / 2:.4}", text))
    [r] = analyze(tmp_path)["results"]
    assert (r["status"], r["global_batch_size"], r["reason"]) == ("Success", 128, None)
    assert r["config_key"].endswith("/gbs128") and r["reference_step_time"] is None


def test_a_name_that_says_another_gpu_count_is_invalid(tmp_path: Path) -> None:
    log = copy_run("pretrain_llama3.1_8b_bf16_16", tmp_path)
    log.write_bytes(log.read_bytes().replace(b"MEMBER: 1/16", b"MEMBER: 1/64").replace(
        b"Starting with 16 processes", b"Starting with 64 processes"))
    [r] = analyze(tmp_path)["results"]
    assert r["status"] == "Invalid"
    assert "its experiment name says 16 GPUs, the log 64 processes" in r["reason"]


def test_a_smoke_tests_own_batch_is_not_compared(tmp_path: Path) -> None:
    """A smoke test trains a tiny stand-in with GBS = its world size; its manifest keeps the
    recipe's GBS."""
    log = copy_run("custom-nemotron-run", tmp_path)
    [path] = (tmp_path / "custom-nemotron-run").rglob("llmb_manifest.json")
    manifest = json.loads(path.read_text())
    manifest["options"]["smoke_test"] = True
    path.write_text(json.dumps(manifest))
    log.write_bytes(log.read_bytes().replace(b"global_batch_size: 128", b"global_batch_size: 32"))
    [r] = analyze(tmp_path)["results"]
    assert r["status"] == "Success" and r["smoke_test"] is True


def test_the_logs_final_iteration_wins_over_max_steps_and_says_so(tmp_path: Path) -> None:
    copy_run("custom-nemotron-run", tmp_path)  # counts to 29/29
    [path] = (tmp_path / "custom-nemotron-run").rglob("llmb_manifest.json")
    manifest = json.loads(path.read_text())
    manifest["options"]["max_steps"] = 20
    path.write_text(json.dumps(manifest))
    [r] = analyze(tmp_path)["results"]
    assert (r["status"], r["final_iteration"]) == ("Success", 29)
    assert "the log counts to iteration 29, its llmb_manifest.json's max_steps to 19" in r["reason"]
