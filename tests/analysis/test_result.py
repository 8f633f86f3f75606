"""llmb.analysis.result: one run's scan and identity -> its figures, status and reason.

The rules: Success when the run reached its final iteration, Failed when it did not, Invalid
when its numbers cannot be trusted whatever it reached (a NaN/Inf loss, a step time that is no
plausible number of seconds, an MFU above 100%: the reason says whether another GPU type would
fit); a clean Success has no reason; every figure is finite or null. The scans here come from
NeMo's own step lines (llmb.container.nemolog) through llmb.analysis.timing, the identities from
the launcher's manifests (tests/helpers/trainmanifests.py) and the real catalog; the analyzer
CLI runs the same rules over the fixture trees in tests/analysis/test_verdicts.py."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from llmb.analysis import identify, result, timing
from llmb.container import nemolog
from llmb.recipes import perf
from trainmanifests import find, make_manifest

REFERENCE = 9.36  # llama3.1 8b fp8 on 16 H100, seed 003
SEQ, GBS, GPUS = 8192, 256, 16
# what NeMo logs for llama3.1 8b: TFLOPS that its model FLOPs per sample imply (the analyzer
# holds a logged figure to the identified model's)
FLOPS = identify.Identifier(None).recipe("llama3.1").model_flops("8b", 32)


def logged_tflops(step_time: float) -> float:
    return round(perf.tflops_per_gpu(GBS, FLOPS, step_time, GPUS), 1)


@pytest.fixture(scope="module")
def identifier() -> identify.Identifier:
    return identify.Identifier(None)


@pytest.fixture(scope="module")
def by_manifest(identifier: identify.Identifier) -> dict[str, Any]:
    ident, warning = identifier.from_manifest(
        "/run/llmb_manifest.json", make_manifest(*find("llama3.1", "8b", "fp8", "h100", GPUS)))
    assert ident is not None and warning is None
    return ident


@pytest.fixture(scope="module")
def by_name(identifier: identify.Identifier) -> dict[str, Any]:
    info = identify.parse_name("pretrain_llama3.1_8b_fp8_16", list(identifier.recipes))
    assert info is not None
    return identifier.from_name(info)


def lines(step_time: float = REFERENCE, last: int = 49, upto: int | None = None,
          first: int = 0, tflops: float | None = None, **at: Any) -> list[str]:
    """NeMo's step lines for iterations first..upto of 0..last, TFLOPS_per_GPU as NeMo computes
    them unless `tflops` is given; `at={12: {"loss": "nan"}}` replaces one line's loss or time
    by the text given."""
    out = []
    for i in range(first, (last if upto is None else upto) + 1):
        line = nemolog.step_line(iteration=i, last_iteration=last, lr=1e-4,
                                 global_batch_size=GBS, global_step=i,
                                 reduced_train_loss=11.0 - i * 0.01,
                                 train_step_timing=step_time,
                                 tflops_per_gpu=logged_tflops(step_time) if tflops is None
                                 else tflops,
                                 consumed_samples=GBS * (i + 1))
        for field, text in at.get(f"i{i}", {}).items():
            key = {"loss": "reduced_train_loss: ", "time": "train_step_timing in s: "}[field]
            head, _, tail = line.partition(key)
            line = head + key + text + tail[tail.index(" |"):]
        out.append(line)
    return out


def analyze(log: list[str], ident: dict[str, Any] | None, identifier: Any,
            window: tuple[int, int] = timing.WINDOW) -> dict[str, Any]:
    r = result.analyze_log("/exp/e/log-acct.e_7_0.out", "e/log-acct.e_7_0.out",
                           timing.scan_lines(log), ident, identifier, window)
    json.dumps(r, allow_nan=False)  # every figure finite or null: the JSON stays valid
    return r


def test_a_clean_success_at_the_reference(by_manifest: dict[str, Any],
                                          identifier: identify.Identifier) -> None:
    step = REFERENCE * 100 / 98
    r = analyze(lines(step), by_manifest, identifier)
    assert (r["status"], r["reason"], r["suspect_nodes"]) == ("Success", None, [])
    assert (r["max_iteration"], r["final_iteration"], r["window_steps"]) == (49, 49, 34)
    assert (r["identified_by"], r["recipe"], r["num_gpus"], r["global_batch_size"]) == (
        "manifest", "llama3.1", GPUS, GBS)
    assert r["time_mean"] == pytest.approx(step, abs=1e-3) and r["time_std_dev"] == 0
    assert r["pct_of_reference"] == pytest.approx(98.0, abs=0.02)
    assert r["tokens_per_second"] == pytest.approx(SEQ * GBS / r["time_mean"], abs=0.1)
    assert r["time_to_train_days"] == pytest.approx(
        perf.days_to_train(r["tokens_per_second"]), rel=1e-4)
    flops = by_manifest["recipe"].model_flops("8b", 32)
    assert r["mfu"] == pytest.approx(perf.mfu(GBS, flops, r["time_mean"], GPUS, 1979),
                                     rel=1e-5)
    assert (r["tflops_source"], r["tflops_per_gpu_mean"]) == ("log", logged_tflops(step))
    assert (r["reference_step_time"], r["reference_source"]) == (REFERENCE,
                                                                  "seed 003, nemo 25.02.01")
    assert r["filename"] == "e/log-acct.e_7_0.out" and r["path"] == "/exp/e/log-acct.e_7_0.out"


@pytest.mark.parametrize(("log", "status", "reason"), [
    (lines(upto=30), "Failed", "stopped at iteration 30 of 49; nothing after the last step "
                               "line says why"),
    ([*lines(upto=30), "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"],
     "Failed", "stopped at iteration 30 of 49: out of memory"),
    ([], "Failed", "no training step in the log and no error line after the start-up"),
    (lines(i23={"loss": "nan"}), "Invalid", "reduced_train_loss is nan at iteration 23"),
    (lines(upto=30, i23={"loss": "inf"}), "Invalid",
     "reduced_train_loss is inf at iteration 23; stopped at iteration 30 of 49"),
    (lines(i20={"time": "0"}, i21={"time": "1e308"}), "Invalid",
     "2 step time(s) are not a plausible number of seconds (first: 0 at iteration 20; "
     "allowed: 1e-06 s to 7 days); they are not counted"),
    ([*lines(upto=20), *lines(first=0)], "Success",
     "training started over at iteration 0 after reaching 20"),
    (lines(last=9), "Success", "the log counts to iteration 9, its llmb_manifest.json's "
                               "max_steps to 49; the log's count is used; the window 11-44 "
                               "lies beyond its final iteration 9: no figure"),
])
def test_status_and_reason(by_manifest: dict[str, Any], identifier: identify.Identifier,
                           log: list[str], status: str, reason: str) -> None:
    r = analyze(log, by_manifest, identifier)
    assert r["status"] == status
    assert r["reason"] is not None and r["reason"].startswith(reason), r["reason"]
    assert "\n" not in r["reason"]


def test_implausible_steps_are_left_out_of_the_figures(by_manifest: dict[str, Any],
                                                       identifier: identify.Identifier) -> None:
    r = analyze(lines(i20={"time": "0"}), by_manifest, identifier)
    assert (r["window_steps"], r["time_mean"]) == (33, REFERENCE)


def test_the_manifests_max_steps_is_the_final_iteration_when_the_log_has_no_count(
        by_manifest: dict[str, Any], identifier: identify.Identifier) -> None:
    """Progress-bar lines without a total: the manifest's max_steps - 1 decides."""
    log = [f"global_step={i}.00, train_step_timing in s={REFERENCE}" for i in range(50)]
    assert analyze(log, by_manifest, identifier)["status"] == "Success"
    r = analyze(log[:40], by_manifest, identifier)
    assert (r["status"], r["final_iteration"]) == ("Failed", 49)
    assert analyze(log[:40], None, None)["status"] == "Failed"  # no final iteration known


# MFU of llama3.1 8b fp8 on 16 GPUs at 9.36 s is 41% of the H100 peak: at 3.2 s it is 120% of
# the H100's (1979 TFLOPS) and 53% of the B200's (4500); at 1 ms no GPU's peak holds it.
@pytest.mark.parametrize(("ident", "step", "words"), [
    ("by_name", 3.2, ["MFU 120% is above 100% of the h100 fp8 peak (1979 TFLOPS): wrong GPU "
                      "type? on b200 it would be 53% (pass --gpu-type=b200)"]),
    ("by_manifest", 3.2, ["MFU 120% is above 100%", "on b200 it would be 53% (its "
                          "llmb_manifest.json says h100)"]),
    ("by_manifest", 0.3, ["MFU 1279% is above 100% of the h100 fp8 peak (1979 TFLOPS) and of "
                          "every GPU's: the log is not this configuration's (wrong log, or "
                          "wrong manifest)"]),
    ("by_name", 1e-4, ["MFU far is above 100%", "(wrong log, or wrong experiment name)"]),
])
def test_an_impossible_mfu_is_invalid_and_says_what_would_fit(
        request: pytest.FixtureRequest, identifier: identify.Identifier, ident: str,
        step: float, words: list[str]) -> None:
    r = analyze(lines(step), request.getfixturevalue(ident), identifier)
    assert r["status"] == "Invalid" and r["mfu"] > 1
    for word in words:
        assert word in r["reason"]


def test_a_run_on_another_gpu_type_fits_its_own_peak(identifier: identify.Identifier) -> None:
    b200 = make_manifest(*find("llama3.1", "8b", "fp8", "h100", GPUS))
    b200["gpu_type"] = "b200"  # not published for B200: no reference, figures all the same
    ident, _ = identifier.from_manifest("/b200/llmb_manifest.json", b200)
    r = analyze(lines(3.2), ident, identifier)
    assert (r["status"], r["gpu_type"], r["reason"]) == ("Success", "b200", None)
    assert r["mfu"] == pytest.approx(0.53, abs=0.01) and r["reference_step_time"] is None


def test_a_smoke_test_gets_no_figure_of_the_real_model(by_manifest: dict[str, Any],
                                                       identifier: identify.Identifier) -> None:
    smoke = {**by_manifest, "smoke": True, "reference": None}
    r = analyze(lines(0.05, tflops=400.0), smoke, identifier)
    assert (r["status"], r["smoke_test"], r["reason"]) == ("Success", True, None)
    assert r["mfu"] is r["tokens_per_second"] is r["pct_of_reference"] is None
    assert (r["tflops_source"], r["tflops_per_gpu_mean"]) == ("log", 400.0)


def test_tflops_are_computed_where_the_log_has_none_or_cannot_be_trusted(
        by_manifest: dict[str, Any], identifier: identify.Identifier) -> None:
    without = [line.split(" | TFLOPS_per_GPU")[0] for line in lines()]
    r = analyze(without, by_manifest, identifier)
    flops = by_manifest["recipe"].model_flops("8b", 32)
    assert r["tflops_source"] == "computed"
    assert r["tflops_per_gpu_mean"] == pytest.approx(
        perf.tflops_per_gpu(GBS, flops, REFERENCE, GPUS), abs=1e-3)
    nemotronh, _ = identifier.from_manifest(
        "/h/llmb_manifest.json", make_manifest(*find("nemotronh", "56b", "fp8", "h100", 64)))
    assert nemotronh is not None and not nemotronh["recipe"].logged_tflops
    assert analyze(lines(15.0), nemotronh, identifier)["tflops_source"] == "computed"


def test_an_unidentified_run_keeps_the_logs_own_figures() -> None:
    r = analyze(lines(), None, None)
    assert (r["status"], r["reason"], r["recipe"], r["identified_by"]) == (
        "Success", None, None, None)
    assert (r["time_mean"], r["tflops_per_gpu_mean"], r["tflops_source"]) == (
        REFERENCE, logged_tflops(REFERENCE), "log")
    assert r["mfu"] is r["tokens_per_second"] is r["smoke_test"] is None


def test_the_window_is_the_callers(by_manifest: dict[str, Any],
                                   identifier: identify.Identifier) -> None:
    slow_start = [*lines(20.0, upto=34), *lines(first=35)]
    assert analyze(slow_start, by_manifest, identifier, (35, 44))["time_mean"] == REFERENCE
    assert analyze(slow_start, by_manifest, identifier)["time_mean"] > REFERENCE


def test_an_unreadable_log_is_a_failed_result_with_its_error() -> None:
    r = result.unreadable("bad-\udcff/log-x.out", "/e/bad-\udcff/log-x.out",
                          "cannot read: dangling symbolic link")
    assert (r["status"], r["error"], r["reason"], r["suspect_nodes"]) == (
        "Failed", "cannot read: dangling symbolic link", "cannot read: dangling symbolic link",
        [])
    assert r["filename"] == "bad-\ufffd/log-x.out"
    json.dumps(r, ensure_ascii=False).encode("utf-8")


@pytest.mark.parametrize(("value", "places", "rounded"), [
    (123456789.123, 1, 123456789.1),
    (1234.56789012, 6, 1234.56789),
    (9.123456789, 6, 9.12345679),  # never below 9 significant digits
    (0.0004402, 6, 0.0004402),
    (math.inf, 3, None), (math.nan, 3, None), (None, 3, None),
])
def test_figures_are_rounded_and_finite(value: float | None, places: int,
                                        rounded: float | None) -> None:
    assert result._round(value, places) == rounded


# --- the job's batch output -------------------------------------------------------------------

SRUN = "srun: error: node2: tasks 8-15: Exited with exit code 1\n"


def job_files(folder: Path, job: str, batch: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    log = folder / f"log-acct-acct.exp_{job}_0.out"
    log.write_text("\n".join(lines(upto=20)) + "\n")
    (folder / f"sbatch_acct-acct.exp_{job}.out").write_text(batch)
    return log


def test_the_batch_output_of_the_same_job_adds_its_findings(tmp_path: Path) -> None:
    log = job_files(tmp_path, "41", "+ export PYTHONUNBUFFERED=1\n" + SRUN)
    scan = timing.scan_log(log)
    assert not scan.findings
    assert result.add_batch_output(str(log), scan) is True
    assert scan.findings.suspects() == ["node2"]
    assert "node2: tasks 8-15: Exited with exit code 1" in scan.findings.summary()


@pytest.mark.parametrize(("log_name", "batch_name"), [
    ("log-acct-acct.exp_41_0.out", "sbatch_acct-acct.exp_42.out"),  # another job's
    ("log-acct-acct.exp_41_0.out", "sbatch_acct-acct.exp_41.out.bak"),
    ("log-my-run.out", "sbatch_my-run.out"),  # not nemo-run's log name: no job id
])
def test_only_the_same_jobs_batch_output_counts(tmp_path: Path, log_name: str,
                                                batch_name: str) -> None:
    log = tmp_path / log_name
    log.write_text("\n".join(lines(upto=20)) + "\n")
    (tmp_path / batch_name).write_text(SRUN)
    scan = timing.scan_log(log)
    assert result.add_batch_output(str(log), scan) is False
    assert not scan.findings


def test_a_batch_output_without_errors_adds_nothing(tmp_path: Path) -> None:
    log = job_files(tmp_path, "43", "+ export PYTHONUNBUFFERED=1\n")
    assert result.add_batch_output(str(log), timing.scan_log(log)) is False
    assert result.add_batch_output(str(tmp_path / "gone" / log.name), timing.LogScan()) is False


TOKEN = "hf_" + "Zq9" * 12  # shaped like a Hugging Face token


def test_a_secret_a_log_quotes_never_reaches_the_reason(by_manifest: dict[str, Any],
                                                         identifier: identify.Identifier,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A run that died on an error line quoting HF_TOKEN's value (or any token-shaped string):
    the reason says why, the token masked, as every message of llmb masks it."""
    monkeypatch.setenv("HF_TOKEN", "s3cret-value-of-the-install")
    log = [*lines(upto=20), "RuntimeError: 401 for token s3cret-value-of-the-install",
           f"RuntimeError: 401 Client Error for token {TOKEN}"]
    r = analyze(log, by_manifest, identifier)
    assert r["status"] == "Failed" and r["reason"]
    assert "s3cret-value" not in r["reason"] and TOKEN not in r["reason"]
    gone = result.unreadable("e/log.out", "/exp/e/log.out", f"cannot read: {TOKEN}")
    assert TOKEN not in gone["reason"] and TOKEN not in gone["error"]
