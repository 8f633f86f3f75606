"""llmb.analysis.cli end to end: the fixture experiments tree, identification, exit codes, odd
files.

Expected figures are worked out here from the literal values written into the fixture logs
(tests/fixtures/logs/make_fixtures.py): window values alternate between two numbers, odd
iterations first.
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from analyzercli import run_analyzer
from fronts import PROBE_MESSAGE, failing_front, into_closed_pipe
from llmb.analysis import identify
from llmb.analysis.cli import analyze
from llmb.recipes import catalog, perf
from paths import REPO

FIXTURES = REPO / "tests" / "fixtures" / "logs" / "experiments"
NEMOTRONH = "pretrain_nemotronh_56b_fp8_gpus128_tp8_pp1_cp1_vpNone_mbs1_gbs384"
STRONG340B = "pretrain_nemotron4_340b_fp8_gpus128_tp8_pp4_cp1_vp12_mbs1_gbs512"
MULTIRANK = "pretrain_llama3.1_8b_fp8_gpus16_tp1_pp1_cp2_vpNone_mbs1_gbs256"
WORKLOADS = ["pretrain_llama3.1", "pretrain_nemotron4", "pretrain_nemotronh"]


def window(odd: float, even: float, first: int = 11, last: int = 44) -> list[float]:
    """The literal values a fixture prints for iterations first..last."""
    return [odd if i % 2 else even for i in range(first, last + 1)]


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return run_analyzer(args, cwd, timeout=60, env={"PYTHONIOENCODING": "utf-8"})


@pytest.fixture(scope="module")
def fixture_json() -> dict[str, Any]:
    proc = cli("--format=json", str(FIXTURES))
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def by_experiment(data: dict[str, Any], experiment: str) -> dict[str, Any]:
    [found] = [r for r in data["results"] if r["experiment"] == experiment]
    return found


def assert_stats(result: dict[str, Any], times: list[float], tflops: list[float] | None) -> None:
    assert result["window_steps"] == len(times)
    assert result["time_mean"] == pytest.approx(statistics.fmean(times), abs=1e-6)
    assert result["time_std_dev"] == pytest.approx(statistics.pstdev(times), abs=1e-6)
    if tflops is None:
        assert result["tflops_per_gpu_mean"] is None
    else:
        assert result["tflops_per_gpu_mean"] == pytest.approx(statistics.fmean(tflops), abs=1e-4)
        assert result["tflops_per_gpu_std_dev"] == pytest.approx(statistics.pstdev(tflops),
                                                                 abs=1e-4)


def assert_derived(result: dict[str, Any], seq: int, gbs: int, gpus: int, flops: float,
                   peak: float, ref: float | None) -> None:
    mean = result["time_mean"]
    assert result["tokens_per_second"] == pytest.approx(seq * gbs / mean, abs=0.1)
    assert result["time_to_train_days"] == pytest.approx(1e12 / (seq * gbs / mean) / 86400,
                                                         abs=1e-4)
    assert result["mfu"] == pytest.approx(gbs * flops / mean / gpus / (peak * 1e12), abs=1e-6)
    if ref is None:
        assert result["reference_step_time"] is None and result["pct_of_reference"] is None
    else:
        assert result["reference_step_time"] == ref
        assert result["pct_of_reference"] == pytest.approx(ref / mean * 100, abs=1e-3)


def test_nemotronh_new_style_name_ansi_and_computed_tflops(fixture_json: dict[str, Any]) -> None:
    r = by_experiment(fixture_json, NEMOTRONH)
    times = window(15.85, 15.87)
    assert statistics.fmean(times) == pytest.approx(15.86)
    assert statistics.pstdev(times) == pytest.approx(0.01)
    flops = catalog.find_recipe("nemotronh").model_flops("56b")
    # Seed 000: the log's TFLOPS_per_GPU is invalid for Nemotron-H, so it is computed.
    assert_stats(r, times, [perf.tflops_per_gpu(384, flops, t, 128) for t in times])
    assert r["tflops_source"] == "computed"
    assert (r["status"], r["max_iteration"], r["final_iteration"]) == ("Success", 49, 49)
    assert (r["recipe"], r["model_size"], r["dtype"], r["gpu_type"], r["num_gpus"],
            r["global_batch_size"], r["seq_length"], r["scaling"], r["identified_by"]) == (
        "nemotronh", "56b", "fp8", "h100", 128, 384, 8192, "weak", "name")
    assert_derived(r, 8192, 384, 128, flops, 1979, 15.496)
    assert r["reference_source"] == "seed 000, nemo 25.04.01"  # with the measuring image
    assert r["checkpoint_save_s"] == 4.389


def test_old_style_name_crlf_gbs_from_published_row(fixture_json: dict[str, Any]) -> None:
    r = by_experiment(fixture_json, "pretrain_llama3.1_8b_bf16_16")
    assert_stats(r, window(12.29, 12.31), window(455.1, 455.3))
    assert r["tflops_source"] == "log"
    assert r["global_batch_size"] == 256  # 16 x 16 GPUs, seed 003
    assert r["status"] == "Success"
    flops = catalog.find_recipe("llama3.1").model_flops("8b")
    assert_derived(r, 8192, 256, 16, flops, 989, 12.3)
    assert r["pct_of_reference"] == pytest.approx(100.0)


def test_progress_bar_form_without_tflops(fixture_json: dict[str, Any]) -> None:
    r = by_experiment(fixture_json, "pretrain_nemotron4_15b_bf16_16")
    times = window(2.69, 2.71)
    flops = catalog.find_recipe("nemotron").model_flops("15b")
    assert_stats(r, times, [perf.tflops_per_gpu(64, flops, t, 16) for t in times])
    assert r["tflops_source"] == "computed"
    assert (r["status"], r["max_iteration"], r["final_iteration"]) == ("Success", 99, 99)
    assert_derived(r, 4096, 64, 16, flops, 989, 2.66)


def test_requeued_run_scientific_tflops_strong_scaling(fixture_json: dict[str, Any]) -> None:
    r = by_experiment(fixture_json, STRONG340B)
    # The second attempt's values win over the first attempt's 30.0 s steps.
    assert_stats(r, window(21.53, 21.55), window(1601.0, 1599.0))
    assert r["status"] == "Success"
    # GBS 512 at 128 GPUs is not the weak rule (GPUs / 4 = 32): strong scaling, which H100
    # does not publish, so no reference.
    assert (r["scaling"], r["gpu_type"], r["global_batch_size"]) == ("strong", "h100", 512)
    assert r["reference_step_time"] is None


def test_failed_run_reports_last_iteration_and_partial_window(fixture_json: dict[str, Any]
                                                              ) -> None:
    r = by_experiment(fixture_json, "pretrain_llama3.1_70b_fp8_gpus64_tp4_pp8_cp1_vp5_mbs1_gbs128")
    assert (r["status"], r["max_iteration"], r["final_iteration"]) == ("Failed", 30, 49)
    assert_stats(r, window(9.85, 9.87, last=30), [1100.0] * 20)


def test_multirank_interleaved_last_occurrence_wins(fixture_json: dict[str, Any]) -> None:
    r = by_experiment(fixture_json, MULTIRANK)
    assert_stats(r, window(9.35, 9.37), window(1012.0, 1010.0))
    assert r["status"] == "Success"


def test_manifest_identifies_the_run(fixture_json: dict[str, Any]) -> None:
    r = by_experiment(fixture_json, "custom-nemotron-run")
    assert r["identified_by"] == "manifest"
    # max_steps 30 in the manifest, and the log counts to 29/29.
    assert (r["status"], r["max_iteration"], r["final_iteration"]) == ("Success", 29, 29)
    times = window(1.97, 1.99, last=29)
    assert times.count(1.97) == 10 and times.count(1.99) == 9
    flops = catalog.find_recipe("nemotron").model_flops("15b")
    assert_stats(r, times, [perf.tflops_per_gpu(128, flops, t, 32) for t in times])
    assert_derived(r, 4096, 128, 32, flops, 1979, 1.98)
    assert r["checkpoint_load_s"] == 9.712


def test_logs_that_never_reached_the_window(fixture_json: dict[str, Any]) -> None:
    crashed = by_experiment(fixture_json, "pretrain_llama3.1_405b_fp8_32")
    assert (crashed["status"], crashed["max_iteration"], crashed["time_mean"]) == (
        "Failed", None, None)
    assert crashed["reference_step_time"] == 3.53  # identified all the same
    early = by_experiment(fixture_json, "pretrain_llama3.1_8b_bf16_8")
    assert (early["status"], early["max_iteration"], early["window_steps"]) == ("Failed", 7, 0)
    assert early["time_mean"] is None and early["tokens_per_second"] is None


def test_skipped_and_summary(fixture_json: dict[str, Any]) -> None:
    reasons = sorted((s["reason"], s["path"].split("/")[0]) for s in fixture_json["skipped"])
    assert [r for r, _ in reasons].count("sbatch output") == 4
    assert ("NCCL trace", "trace-by-manifest") in reasons
    assert ("NCCL trace", "pretrain_llama3.1_8b_fp8_gpus8_tp1_pp1_cp2_vpNone_mbs1_gbs128"
            "_nccltrace") in reasons
    assert fixture_json["summary"] == {
        "logs": 9, "success": 6, "failed": 3, "unreadable": 0, "skipped": 6,
        "skipped_by_reason": {"NCCL trace": 2, "sbatch output": 4},
        # Invalid runs, configurations and their verdicts are counted too
        "invalid": 0, "configurations": 9,
        "verdicts": {"pass": 5, "below": 0, "no_reference": 1, "no_successful_run": 3,
                     "window_outside_runs": 0}}
    assert fixture_json["analysis"]["window"] == {"first_iteration": 11, "last_iteration": 44}
    for r in fixture_json["results"]:
        assert r["filename"] == os.path.relpath(r["path"], FIXTURES)


def test_gpu_type_flag_applies_to_named_runs_not_manifests() -> None:
    data = analyze(str(FIXTURES), "gb200")
    strong = by_experiment(data, STRONG340B)
    assert (strong["gpu_type"], strong["scaling"]) == ("gb200", "strong")
    ref = catalog.find_recipe("nemotron").reference("340b", "fp8", "gb200", 128, "strong")
    assert strong["reference_step_time"] == (ref.step_time if ref else None)
    assert strong["mfu"] == pytest.approx(
        512 * catalog.find_recipe("nemotron").model_flops("340b") / strong["time_mean"] / 128
        / 4900e12, abs=1e-6)
    assert by_experiment(data, "custom-nemotron-run")["gpu_type"] == "h100"


@pytest.mark.parametrize(("name", "expected"), [
    ("pretrain_nemotronh_56b_fp8_gpus128_tp8_pp1_cp1_vpNone_mbs1_gbs384",
     ("pretrain_nemotronh", "56b", "fp8", 128, 384, ())),
    ("pretrain_nemotron4_340b_fp8_gpus128_tp8_pp4_cp1_vp12_mbs1_gbs512_389757",
     ("pretrain_nemotron4", "340b", "fp8", 128, 512, ())),
    ("pretrain_llama3.1_8b_bf16_16", ("pretrain_llama3.1", "8b", "bf16", 16, None, ())),
    ("pretrain_llama3.1_70b_fp8_256_1744409000", ("pretrain_llama3.1", "70b", "fp8", 256, None,
                                                  ())),
    ("pretrain_nemotron4_15b_bf16_16_nsys_1744", ("pretrain_nemotron4", "15b", "bf16", 16, None,
                                                  ("nsys",))),
    ("pretraining_nemotronh_56b_fp8_64", ("pretrain_nemotronh", "56b", "fp8", 64, None, ())),
    ("log-x_123_0", None),
    ("pretrain_gpt3_175b_fp8_64", None),
])
def test_parse_name_both_styles(name: str, expected: tuple[Any, ...] | None) -> None:
    info = identify.parse_name(name, WORKLOADS)
    if expected is None:
        assert info is None
    else:
        assert info is not None
        assert (info.workload, info.model_size, info.dtype, info.num_gpus, info.gbs,
                info.tags) == expected
        assert info.experiment == name.split("_1744")[0].split("_389757")[0]


# --- the command line ------------------------------------------------------------------------

def copy_run(src_experiment: str, dest: Path, new_name: str | None = None) -> Path:
    src = next((FIXTURES / src_experiment).rglob("log-*.out"))
    target = dest / (new_name or src_experiment) / src.name
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(src, target)
    return target


@pytest.mark.parametrize("fmt", ["table", "csv", "json"])
def test_each_format_exit_0(fmt: str) -> None:
    proc = cli(f"--format={fmt}", str(FIXTURES))
    assert proc.returncode == 0 and proc.stderr == ""
    if fmt == "json":
        assert len(json.loads(proc.stdout)["results"]) == 9
    elif fmt == "csv":
        rows = list(csv.reader(io.StringIO(proc.stdout)))
        assert rows[0][:7] == ["filename", "status", "time_mean", "time_std_dev",
                               "tflops_per_gpu_mean", "tflops_per_gpu_std_dev", "max_iteration"]
        assert len(rows) == 10
    else:
        lines = proc.stdout.splitlines()
        assert lines[0] == "Train Step Timing and TFLOPS Analysis (iterations 11-44)"
        assert max(map(len, lines[:14])) <= 100


def test_default_directory_is_experiments_in_cwd(tmp_path: Path) -> None:
    copy_run("pretrain_llama3.1_8b_bf16_16", tmp_path / "experiments")
    proc = cli("--format=json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["results"][0]["status"] == "Success"


def one_line_error(proc: subprocess.CompletedProcess[str], code: int, *words: str) -> None:
    assert proc.returncode == code
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    for word in words:
        assert word in proc.stderr


def test_exit_1_cases(tmp_path: Path) -> None:
    one_line_error(cli(str(tmp_path / "nope")), 1, "does not exist")
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("hi\n")
    one_line_error(cli(str(tmp_path / "empty")), 1, "no .out log files")
    only = tmp_path / "only-sbatch"
    (only / "x").mkdir(parents=True)
    (only / "x" / "sbatch_x_1.out").write_text("Submitted batch job 1\n")
    one_line_error(cli(str(only)), 1, "no training log", "1 .out file(s) skipped")
    failed = tmp_path / "failed"
    copy_run("pretrain_llama3.1_70b_fp8_gpus64_tp4_pp8_cp1_vp5_mbs1_gbs128", failed)
    proc = cli("--format=json", str(failed))
    one_line_error(proc, 1, "no successful run among 1 log(s)")
    assert json.loads(proc.stdout)["results"][0]["status"] == "Failed"  # still reported


@pytest.mark.parametrize(("args", "words"), [
    (["--format=xml"], ["--format=xml", "table, csv, json"]),
    (["--format"], ["--format needs a value"]),
    (["--bogus"], ["unknown option --bogus", "--full-names"]),
    # several DIRs are analyzed together ($LLMB_INSTALL/workloads/*/experiments), so
    # `a b` is no longer a usage error (test_several_directories); a bad window is.
    (["--window=44-11"], ["--window=44-11", "FIRST <= LAST"]),
    (["--gpu-type=a100"], ["--gpu-type=a100", "h100", "gb200"]),
])
def test_bad_options_exit_2(args: list[str], words: list[str]) -> None:
    one_line_error(cli(*args) if args[0] == "--format" else cli(*args, str(FIXTURES)), 2,
                   *words)


def test_help_exits_0_without_importing_yaml() -> None:
    proc = cli("--help")
    assert proc.returncode == 0 and proc.stdout.startswith("usage: ")
    assert "--format=table|csv|json" in proc.stdout
    probe = subprocess.run(
        [sys.executable, "-c", "import sys; from llmb.analysis import cli; cli.main(['--help']); "
         "print(sorted(m for m in ('yaml', 'llmb.recipes.catalog', 'numpy', 'nemo_run') "
         "if m in sys.modules))"],
        env={**os.environ, "PYTHONPATH": str(REPO / "common")}, capture_output=True, text=True,
        check=True)
    assert probe.stdout.strip().endswith("[]")


def test_format_values_are_case_insensitive_and_space_separated() -> None:
    proc = cli("--format", "JSON", str(FIXTURES))
    assert proc.returncode == 0 and json.loads(proc.stdout)["summary"]["success"] == 6


ODD_NAMES = ["run with spaces", "quo\"te's", "new\nline", "naïve-日本語", "back\\slash"]


def test_odd_files_never_crash_and_json_stays_valid(tmp_path: Path) -> None:
    root = tmp_path / "experiments"
    for name in ODD_NAMES:
        copy_run("pretrain_llama3.1_8b_bf16_16", root, name)
    undecodable = os.fsencode(root) + b"/bad-\xff-name"
    os.makedirs(undecodable)
    shutil.copy(next((FIXTURES / "pretrain_llama3.1_8b_bf16_16").rglob("log-*.out")),
                os.fsdecode(undecodable + b"/log-bad_1_0.out"))
    (root / "log-garbage.out").write_bytes(os.urandom(200_000).replace(b"NeMo", b"xxxx"))
    (root / "stray.out").write_bytes(bytes(range(256)) * 100)
    (root / "log-dangling.out").symlink_to(root / "missing-target.out")
    os.mkfifo(root / "log-fifo.out")
    (root / "dir.out").mkdir()
    (root / "loop").symlink_to(root)  # a directory link back into the tree

    for fmt in ("json", "csv", "table"):
        proc = cli(f"--format={fmt}", str(root))
        assert proc.returncode == 0, proc.stderr
    data = json.loads(cli("--format=json", str(root)).stdout)
    results = {r["filename"]: r for r in data["results"]}
    for name in ODD_NAMES:
        assert results[f"{name}/log-pretrain_llama3.1_8b_bf16_16_2201346_0.out"]["status"] == \
            "Success"
    assert results["bad-\ufffd-name/log-bad_1_0.out"]["status"] == "Success"
    assert results["log-garbage.out"]["status"] == "Failed"
    assert results["log-dangling.out"]["error"] == "cannot read: dangling symbolic link"
    assert results["log-fifo.out"]["error"] == "cannot read: not a regular file"
    skipped = {s["path"]: s["reason"] for s in data["skipped"]}
    assert skipped["stray.out"] == "no training output"
    assert skipped["dir.out"] == "directory"
    assert data["summary"]["success"] == len(ODD_NAMES) + 1
    assert data["summary"]["unreadable"] == 2

    rows = list(csv.DictReader(io.StringIO(cli("--format=csv", str(root)).stdout)))
    assert {r["filename"] for r in rows} == set(results)
    table = cli("--full-names", str(root)).stdout
    assert "new\\nline/log-" in table  # the newline is shown escaped, not printed


def test_smoke_test_runs_get_no_real_model_figures(tmp_path: Path) -> None:
    # A smoke test trains a tiny stand-in: its own TFLOPS are kept, nothing of the real model.
    src = FIXTURES / "custom-nemotron-run"
    shutil.copytree(src, tmp_path / "custom-nemotron-run")
    [manifest_path] = (tmp_path / "custom-nemotron-run").rglob("llmb_manifest.json")
    manifest = json.loads(manifest_path.read_text())
    manifest["options"]["smoke_test"] = True
    manifest_path.write_text(json.dumps(manifest))
    [log] = (tmp_path / "custom-nemotron-run").rglob("log-*.out")
    log.write_text(log.read_text().replace(
        " | consumed_samples", " | TFLOPS_per_GPU: 0.0004402 | consumed_samples"))
    [r] = analyze(str(tmp_path))["results"]
    assert (r["status"], r["smoke_test"], r["tflops_source"]) == ("Success", True, "log")
    assert r["tflops_per_gpu_mean"] == pytest.approx(0.0004402)
    assert r["mfu"] is None and r["reference_step_time"] is None
    assert r["tokens_per_second"] is None


def test_a_symbolic_link_loop_is_not_called_dangling(tmp_path: Path) -> None:
    (tmp_path / "log-looped.out").symlink_to(tmp_path / "log-looped.out")
    (tmp_path / "log-dangling.out").symlink_to(tmp_path / "missing.out")
    data = json.loads(cli("--format=json", str(tmp_path)).stdout)
    errors = {r["filename"]: r["error"] for r in data["results"]}
    assert errors == {"log-looped.out": "cannot read: symbolic link loop",
                      "log-dangling.out": "cannot read: dangling symbolic link"}


def test_a_reader_that_went_away_is_141_and_silent() -> None:
    """`parse_train_timing.sh | head`: 141 as every Unix tool, not 0 (0 says a --check passed,
    and nobody read the table whole), and no traceback."""
    for check in ((), ("--check",)):
        proc = into_closed_pipe([str(REPO / "common" / "parse_train_timing.sh"), *check,
                                 str(FIXTURES)], env={**os.environ, "LLMB_PYTHON": sys.executable})
        assert (proc.returncode, proc.stderr) == (141, ""), check


def test_an_error_keeps_its_own_status() -> None:
    proc = failing_front("llmb.analysis.cli", "analyze_tree", 7, [str(FIXTURES)],
                         env={k: v for k, v in os.environ.items() if k != "LLMB_ANALYZE_PROG"})
    assert (proc.returncode, proc.stderr) == (7, f"parse_train_timing.sh: {PROBE_MESSAGE}\n")
