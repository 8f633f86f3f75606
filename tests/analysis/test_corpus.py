"""The log corpus (tests/fixtures/logs/corpus, from tests/helpers/logcorpus.py): every family and
shape the analyzer reads, each judged against a truth worked out here from what the log printed
(its step times and TFLOPS as text, the catalog's model FLOPs, gpus.yaml's peaks), never from
the analyzer."""

from __future__ import annotations

import math
from functools import cache
from typing import Any

import logcorpus
import pytest
from llmb.analysis import cli
from llmb.recipes import catalog
from paths import LOGS

CORPUS = LOGS / "corpus"
LLAMA8_FLOPS = 4.74e14  # docs/analyzer.md's Llama 3.1 8b model FLOPs per sample
KEPT = 5e-9  # the JSON keeps 9 significant digits


@cache
def analyzed(name: str) -> dict[str, Any]:
    return cli.analyze(str(CORPUS / name), logcorpus.CASES[name].gpu_type)


def result(name: str) -> dict[str, Any]:
    [found] = analyzed(name)["results"]
    return found


def window_mean(name: str, what: str = "times") -> float:
    """The mean of the window's values as the log printed them (Megatron's in ms)."""
    case = logcorpus.CASES[name]
    times, tflops = case.window()
    values = [float(t) for t in (times if what == "times" else tflops)]
    assert len(values) == 34
    scale = 1000 if what == "times" and case.family == "megatron" else 1
    return math.fsum(v / scale for v in values) / len(values)


def test_the_corpus_is_what_its_generator_writes() -> None:
    written = {p.relative_to(CORPUS).parts[0]: p for p in CORPUS.rglob("log-*.out")}
    assert sorted(written) == sorted(logcorpus.CASES)
    for name, case in logcorpus.CASES.items():
        assert written[name].read_bytes() == logcorpus.text(case).encode(), name
        assert written[name].parent.name == case.experiment


@pytest.mark.parametrize("name", [
    "bridge-b200-glued", "bridge-b300-glued", "bridge-timestamp-prefix", "bridge-skipped",
    "megatron-lm-inline-throughput", "bridge-unknown-model", "bridge-moe-fields",
    "bridge-rank0-step-time", "bridge-rank0-moe", "bridge-fp8-cs", "bridge-fp8-mx",
    "bridge-nvfp4", "nemo-epoch-rollover",
    "nemo-restart", "nemo-rank-prefix", "nemo-timestamp-prefix", "nemo-srun-label-scientific",
])
def test_a_complete_run_is_success_with_its_printed_figures(name: str) -> None:
    r = result(name)
    assert r["status"] == "Success", r["reason"]
    assert (r["max_iteration"], r["final_iteration"], r["window_steps"]) == (49, 49, 34)
    assert r["time_mean"] == pytest.approx(window_mean(name), rel=KEPT, abs=0)
    assert r["tflops_source"] == "log"
    assert r["tflops_per_gpu_mean"] == pytest.approx(window_mean(name, "tflops"), rel=KEPT)


@pytest.mark.parametrize("name", ["nemo-progress-bar", "nemo-no-tflops"])
def test_a_log_without_tflops_gets_them_from_the_model(name: str) -> None:
    r = result(name)
    mean = window_mean(name)
    assert r["status"] == "Success" and r["time_mean"] == pytest.approx(mean, rel=KEPT)
    assert r["tflops_source"] == "computed"
    # 128 samples of 8b per step on 8 GPUs; the mean of each step's figure
    case = logcorpus.CASES[name]
    each = [128 * LLAMA8_FLOPS / float(t) / 8 / 1e12 for t in case.window()[0]]
    assert r["tflops_per_gpu_mean"] == pytest.approx(math.fsum(each) / 34, rel=1e-3)


@pytest.mark.parametrize(("name", "gpu"), [("bridge-b200-glued", "b200"),
                                           ("bridge-b300-glued", "b300")])
def test_mfu_uses_the_peak_of_the_gpu_type_given(name: str, gpu: str) -> None:
    r = result(name)
    flops = catalog.find_recipe("llama3.1").model_flops("8b")
    peak = catalog.get_gpu_type(gpu).peak_tflops["bf16"]
    assert r["gpu_type"] == gpu and flops == pytest.approx(LLAMA8_FLOPS, rel=1e-2)
    assert r["mfu"] == pytest.approx(128 * flops / window_mean(name) / 8 / (peak * 1e12),
                                     rel=1e-6)
    # judged against the H100's peak instead, the same log is impossible (MFU far above 100%)
    h100 = cli.analyze(str(CORPUS / name))["results"][0]
    assert h100["status"] == "Invalid" and "above 100% of the h100 bf16 peak" in h100["reason"]


@pytest.mark.parametrize("dtype", sorted(logcorpus.DTYPES))
def test_mfu_holds_each_precision_to_its_own_peak(dtype: str) -> None:
    name = f"bridge-{dtype.replace('_', '-')}"
    r = result(name)
    flops = catalog.find_recipe("llama3.1").model_flops("8b")
    peak = catalog.get_gpu_type("b200").peak_tflops[logcorpus.DTYPES[dtype]]
    assert (r["dtype"], r["gpu_type"]) == (dtype, "b200")
    assert r["mfu"] == pytest.approx(128 * flops / window_mean(name) / 8 / (peak * 1e12),
                                     rel=1e-6)


def test_rank_0s_log_gives_the_figures_of_the_same_run_logged_by_every_rank() -> None:
    """Rank 0's Step Time lines (seconds to two decimals) against the iteration lines' times
    (a tenth of a millisecond) of the same steps: one run, one MFU to 0.1%."""
    rank0, merged = result("bridge-rank0-step-time"), result("bridge-b200-glued")
    assert rank0["mfu"] == pytest.approx(merged["mfu"], rel=1e-3)
    assert rank0["tflops_per_gpu_mean"] == pytest.approx(merged["tflops_per_gpu_mean"],
                                                         rel=1e-3)


def test_a_model_the_catalog_does_not_know_gets_timing_and_tokens_not_a_reference() -> None:
    r = result("bridge-unknown-model")
    assert (r["recipe"], r["model_size"], r["num_gpus"], r["global_batch_size"]) == (
        "qwen3", "30b_a3b", 8, 512)
    assert r["seq_length"] == 4096  # from the start-up's configuration
    assert r["tokens_per_second"] == pytest.approx(4096 * 512 / window_mean(
        "bridge-unknown-model"), rel=1e-6)
    assert r["mfu"] is None and r["reference_step_time"] is None
    [config] = analyzed("bridge-unknown-model")["configurations"]
    assert config["verdict"] == "no_reference"


@pytest.mark.parametrize(("name", "status", "reason"), [
    ("bridge-nan-iterations", "Invalid",
     "grad norm is nan at iteration 30; number of nan iterations is 1 at iteration 30"),
    ("bridge-inf-grad-norm", "Invalid", "grad norm is inf at iteration 18"),
    ("bridge-skipped", "Success",
     "number of skipped iterations: 2 in all, the first at iteration 5"),
    ("bridge-oom", "Failed", "stopped at iteration 23 of 50: out of memory: "
                             "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
                             "3.50 GiB."),
    ("bridge-data-parallel-mismatch", "Invalid",
     "its experiment name says 16 GPUs, the log's data_parallel_size 8 x TP 1 x PP 1 x CP 1 is "
     "8: the log is not this configuration's"),
    ("nemo-restart", "Success", "training started over at iteration 0 after reaching 20, "
                                "after requeued: slurmstepd: error: *** STEP 4100001.0"),
    ("nemo-startup-only", "Failed",
     "no training step in the log and no error line after the start-up"),
])
def test_status_and_reason(name: str, status: str, reason: str) -> None:
    r = result(name)
    assert r["status"] == status
    assert r["reason"].startswith(reason)


def test_a_failed_megatron_run_names_its_suspect_node() -> None:
    assert result("bridge-oom")["suspect_nodes"] == ["node003"]


@pytest.mark.parametrize(("name", "what"), [
    ("nccl-tests", "nccl-tests output"), ("nsys-report", "an Nsight Systems report's text"),
    ("print-env", "a print_env.sh dump")])
def test_another_tools_output_named_like_a_log_is_skipped_with_a_note(name: str,
                                                                     what: str) -> None:
    analysis = analyzed(name)
    assert analysis["results"] == []
    [skipped] = analysis["skipped"]
    assert skipped["reason"] == f"not a training log: {what}"
    assert skipped["path"].endswith(f"log-{logcorpus.CASES[name].experiment}_"
                                    f"{logcorpus.CASES[name].job}_0.out")
