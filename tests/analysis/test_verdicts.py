"""Verdicts end to end on the verdict fixtures (tests/fixtures/logs/make_verdict_fixtures.py):
repeats grouped into configurations, the tolerance verdict, each failure reason with its
suspect nodes, Invalid runs, --check exit codes, --window, several DIRs / an install tree, and
the comparison with a baseline tree. The JSON fields are the interface llmb-run codes against.
"""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
from pathlib import Path
from typing import Any

import pytest
from analyzercli import run_analyzer
from paths import LOGS

VERDICTS, BASELINE, EXPERIMENTS = LOGS / "verdicts", LOGS / "baseline", LOGS / "experiments"
LLAMA8_FP8_8 = "llama3.1/8b/fp8/h100/8gpu/weak/gbs128"
LLAMA8_FP8_8_DIR = "pretrain_llama3.1_8b_fp8_gpus8_tp1_pp1_cp2_vpNone_mbs1_gbs128"
LLAMA8_FP8_16 = "llama3.1/8b/fp8/h100/16gpu/weak/gbs256"
LLAMA8_FP8_32 = "llama3.1/8b/fp8/h100/32gpu/weak/gbs512"
LLAMA8_BF16_16 = "llama3.1/8b/bf16/h100/16gpu/weak/gbs256"
NEMOTRON15_FP8_32 = "nemotron/15b/fp8/h100/32gpu/weak/gbs128"
CONFIG_FIELDS = {
    "recipe", "model_size", "dtype", "gpu_type", "num_gpus", "scaling", "global_batch_size",
    "config_key", "runs", "successful_runs", "time_median", "time_min", "time_max", "time_cv",
    "reference_step_time", "pct_of_reference", "verdict"}
COMPARISON_FIELDS = {"config_key", "baseline_time_median", "time_median", "delta_pct",
                     "significant"}


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return run_analyzer(args, cwd)


@pytest.fixture(scope="module")
def data() -> dict[str, Any]:
    proc = cli("--format=json", str(VERDICTS))
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def config(data: dict[str, Any], key: str) -> dict[str, Any]:
    [found] = [c for c in data["configurations"] if c["config_key"] == key]
    return found


def run_of(data: dict[str, Any], experiment: str) -> dict[str, Any]:
    [found] = [r for r in data["results"] if r["experiment"] == experiment]
    return found


def test_every_result_and_configuration_carries_the_interface_fields(data: dict[str, Any]
                                                                       ) -> None:
    keys = {c["config_key"] for c in data["configurations"]}
    for r in data["results"]:
        assert r["status"] in ("Success", "Failed", "Invalid")
        assert isinstance(r["suspect_nodes"], list)
        assert r["config_key"] in keys
        assert r["status"] == "Success" or r["reason"]  # a Failed or Invalid run says why
    for c in data["configurations"]:
        assert set(c) >= CONFIG_FIELDS
        assert c["verdict"] in ("pass", "below", "no_reference", "no_successful_run",
                                "window_outside_runs")
    assert data["comparison"] is None


def test_repeats_are_grouped_with_median_spread_and_a_pass(data: dict[str, Any]) -> None:
    c = config(data, LLAMA8_FP8_8)
    means = [9.32, 9.36, 9.28]  # each run's window alternates 9.31/9.33, 9.35/9.37, 9.27/9.29
    assert (c["runs"], c["successful_runs"]) == (3, 3)
    assert c["time_median"] == pytest.approx(statistics.median(means))
    assert (c["time_min"], c["time_max"]) == pytest.approx((9.28, 9.36))
    assert c["time_cv"] == pytest.approx(statistics.pstdev(means) / statistics.fmean(means),
                                         abs=1e-6)
    assert c["reference_step_time"] == 9.33
    assert c["pct_of_reference"] == pytest.approx(9.33 / 9.32 * 100, abs=1e-3)
    assert c["verdict"] == "pass"
    assert [r["config_key"] for r in data["results"]].count(LLAMA8_FP8_8) == 3


def test_a_configuration_below_the_tolerance(data: dict[str, Any]) -> None:
    c = config(data, LLAMA8_BF16_16)
    assert c["time_median"] == pytest.approx((13.80 + 13.84) / 2)
    assert c["pct_of_reference"] == pytest.approx(12.3 / 13.82 * 100, abs=1e-3)  # 89.0
    assert c["verdict"] == "below"
    assert data["summary"]["verdicts"]["below"] == 1


def test_tolerance_moves_the_line() -> None:
    loose = json.loads(cli("--format=json", "--tolerance=12", str(VERDICTS)).stdout)
    assert config(loose, LLAMA8_BF16_16)["verdict"] == "pass"  # 89.0 >= 88
    strict = json.loads(cli("--format=json", "--tolerance=0.5%", str(VERDICTS)).stdout)
    assert config(strict, LLAMA8_FP8_32)["verdict"] == "below"  # 98.1
    assert strict["analysis"]["tolerance_pct"] == 0.5


@pytest.mark.parametrize(("experiment", "status", "words", "nodes"), [
    ("pretrain_llama3.1_70b_bf16_gpus64_tp4_pp4_cp2_vp5_mbs1_gbs128", "Failed",
     ["stopped at iteration 37 of 49", "time limit", "DUE TO TIME LIMIT"], []),
    ("pretrain_nemotron4_340b_fp8_gpus128_tp8_pp8_cp1_vp12_mbs1_gbs32", "Failed",
     ["at iteration 13 of 49", "out of memory", "torch.OutOfMemoryError: CUDA out of memory"],
     ["nid001402"]),
    ("pretrain_llama3.1_70b_fp8_gpus128_tp4_pp8_cp1_vp5_mbs1_gbs256", "Failed",
     ["NCCL timeout", "[Rank 101] Watchdog caught collective operation timeout"], ["nid001412"]),
    ("pretrain_nemotron4_340b_bf16_gpus256_tp8_pp8_cp1_vp12_mbs1_gbs64", "Failed",
     ["userbuffers hang", "expecting 1337 got 1336", "then ended by the time limit"], []),
    ("pretrain_llama3.1_405b_fp8_gpus64_tp8_pp4_cp2_vp8_mbs1_gbs64", "Failed",
     ["cancelled", "CANCELLED AT 2025-04-11T17:20:00 ***"], []),
    ("pretrain_nemotronh_56b_fp8_gpus64_tp8_pp1_cp1_vpNone_mbs1_gbs192", "Failed",
     ["node failure", "Node failure on nid001703"], ["nid001703"]),
    ("pretrain_nemotron4_15b_bf16_gpus64_tp2_pp1_cp1_vpNone_mbs2_gbs256", "Invalid",
     ["reduced_train_loss is nan at iteration 23"], []),
    ("pretrain_llama3.1_405b_bf16_gpus128_tp8_pp4_cp2_vp8_mbs1_gbs128", "Invalid",
     ["NaN/Inf in the gradients", "found NaN in local grad norm"], ["nid001812"]),
    ("pretrain_nemotron4_340b_fp8_256", "Invalid",
     ["MFU 136% is above 100% of the h100 fp8 peak", "wrong GPU type?", "--gpu-type=b200"], []),
    ("custom-15b-run", "Invalid",
     ["MFU 371%", "the log is not this configuration's", "wrong manifest"], []),
    ("pretrain_llama3.1_8b_bf16_gpus32_tp1_pp1_cp2_vpNone_mbs1_gbs512", "Success",
     ["finished all 50 iterations, then error", "DistBackendError"], ["nid001900"]),
])
def test_reasons_and_suspect_nodes(data: dict[str, Any], experiment: str, status: str,
                                   words: list[str], nodes: list[str]) -> None:
    r = run_of(data, experiment)
    assert r["status"] == status
    assert "\n" not in r["reason"]
    for word in words:
        assert word in r["reason"]
    assert r["suspect_nodes"] == nodes


def test_batch_host_of_a_time_limit_is_no_suspect(data: dict[str, Any]) -> None:
    r = run_of(data, "pretrain_llama3.1_70b_bf16_gpus64_tp4_pp4_cp2_vp5_mbs1_gbs128")
    assert "nid001301" in r["reason"] and r["suspect_nodes"] == []


def test_clean_success_has_no_reason(data: dict[str, Any]) -> None:
    clean = [r for r in data["results"] if r["config_key"] == LLAMA8_FP8_8]
    assert all(r["status"] == "Success" and r["reason"] is None and r["suspect_nodes"] == []
               for r in clean)


def test_invalid_runs_never_count_as_successful(data: dict[str, Any]) -> None:
    c = config(data, "nemotron/15b/bf16/h100/64gpu/weak/gbs256")
    assert (c["runs"], c["successful_runs"], c["invalid_runs"]) == (1, 0, 1)
    assert c["verdict"] == "no_successful_run"
    assert data["summary"]["invalid"] == 4


def test_gpu_type_flag_resolves_the_impossible_mfu() -> None:
    data = json.loads(cli("--format=json", "--gpu-type=b200", str(VERDICTS)).stdout)
    r = run_of(data, "pretrain_nemotron4_340b_fp8_256")
    assert r["gpu_type"] == "b200" and r["status"] == "Success" and r["reason"] is None


def test_requeued_run_is_a_success_that_names_the_failed_node() -> None:
    data = json.loads(cli("--format=json", str(EXPERIMENTS)).stdout)
    r = run_of(data, "pretrain_nemotron4_340b_fp8_gpus128_tp8_pp4_cp1_vp12_mbs1_gbs512")
    assert r["status"] == "Success"
    assert "started over at iteration 0 after reaching 20" in r["reason"]
    assert "node failure" in r["reason"] and r["suspect_nodes"] == ["nid001234"]


def test_check_exit_codes(tmp_path: Path) -> None:
    proc = cli("--check", str(VERDICTS))
    assert proc.returncode == 3
    [line] = proc.stderr.splitlines()
    assert "check failed: 1 configuration(s) below 95% of the reference (worst: " \
           f"{LLAMA8_BF16_16} at 89.0%)" in line
    assert "Invalid run(s)" in line and "without a successful run" in line
    assert "Configurations" in proc.stdout  # the table is still printed
    # Only passing configurations: --check exits 0, as does a plain run with failures.
    good = tmp_path / "good"
    shutil.copytree(VERDICTS / LLAMA8_FP8_8_DIR, good / "a")
    assert cli("--check", str(good)).returncode == 0
    assert cli(str(VERDICTS)).returncode == 0
    assert cli("--check", "--tolerance=12", str(good)).returncode == 0
    # No reference is not a failure of the check.
    smoke = tmp_path / "unknown"
    shutil.copytree(good / "a", smoke / "my-custom-run")
    assert cli("--check", "--format=json", str(smoke)).returncode == 0


def test_window_option_changes_the_statistics() -> None:
    data = json.loads(cli("--format=json", "--window=35-44", str(VERDICTS)).stdout)
    assert data["analysis"]["window"] == {"first_iteration": 35, "last_iteration": 44}
    r = next(r for r in data["results"] if r["config_key"] == LLAMA8_FP8_8)
    assert r["window_steps"] == 10
    wide = json.loads(cli("--format=json", "--window=0-49", str(VERDICTS)).stdout)
    r = next(r for r in wide["results"] if r["config_key"] == LLAMA8_FP8_8)
    assert r["window_steps"] == 50 and r["time_mean"] > 9.4  # warm-up steps now count


def test_baseline_comparison() -> None:
    proc = cli("--format=json", f"--baseline={BASELINE}", str(VERDICTS))
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    compared = {c["config_key"]: c for c in data["comparison"]}
    assert set(compared) == {LLAMA8_FP8_8, NEMOTRON15_FP8_32, LLAMA8_FP8_16, LLAMA8_FP8_32}
    assert compared[LLAMA8_FP8_16]["delta_pct"] == 0
    assert not compared[LLAMA8_FP8_16]["significant"]
    for c in compared.values():
        assert set(c) >= COMPARISON_FIELDS
    slower = compared[LLAMA8_FP8_8]
    assert slower["baseline_time_median"] == pytest.approx(8.84)
    assert slower["delta_pct"] == pytest.approx((9.32 - 8.84) / 8.84 * 100, abs=1e-3)
    assert slower["significant"] is True
    same = compared[NEMOTRON15_FP8_32]  # 2.000 now, 2.005 before: inside the step jitter
    assert same["delta_pct"] == pytest.approx((2.0 - 2.005) / 2.005 * 100, abs=1e-3)
    assert same["significant"] is False
    assert data["analysis"]["baseline"]["only_baseline"] == 1  # nemotronh 32 GPUs
    table = cli(f"--baseline={BASELINE}", str(VERDICTS)).stdout
    assert "Compared with the baseline" in table and "+5.4" in table


def test_baseline_errors_are_one_line(tmp_path: Path) -> None:
    proc = cli(f"--baseline={tmp_path / 'nope'}", str(VERDICTS))
    assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1
    assert "--baseline=" in proc.stderr and "does not exist" in proc.stderr
    (tmp_path / "empty").mkdir()
    proc = cli(f"--baseline={tmp_path / 'empty'}", str(VERDICTS))
    assert proc.returncode == 1 and "no .out log files" in proc.stderr


def install_tree(tmp_path: Path) -> Path:
    """$LLMB_INSTALL/workloads/<workload>/experiments/... with two workloads."""
    install = tmp_path / "llmb"
    for src in (LLAMA8_FP8_8_DIR,
                "pretrain_nemotron4_15b_fp8_gpus32_tp2_pp1_cp1_vpNone_mbs2_gbs128"):
        workload = src.split("_")[0] + "_" + src.split("_")[1]
        shutil.copytree(VERDICTS / src, install / "workloads" / workload / "experiments" / src)
    custom = install / "workloads" / "pretrain_llama3.1" / "experiments" / "my-run" / "x"
    custom.mkdir(parents=True)
    shutil.copy(next((VERDICTS / LLAMA8_FP8_8_DIR).rglob("log-*.out")),
                custom / "log-my-run_1_0.out")
    return install


def test_a_whole_install_tree(tmp_path: Path) -> None:
    install = install_tree(tmp_path)
    workloads = install / "workloads"
    by_root = json.loads(cli("--format=json", str(workloads)).stdout)
    by_glob = json.loads(cli("--format=json", *map(str, sorted(workloads.glob(
        "*/experiments")))).stdout)
    assert by_glob["analysis"]["directory"] == str(workloads)
    assert len(by_glob["analysis"]["directories"]) == 2
    for data in (by_root, by_glob):
        keys = {c["config_key"] for c in data["configurations"]}
        assert {LLAMA8_FP8_8, NEMOTRON15_FP8_32} <= keys
        assert config(data, LLAMA8_FP8_8)["runs"] == 3
        assert "unidentified/my-run" in keys  # the folder under experiments, not the workload
        assert all(r["filename"].startswith("pretrain_") for r in data["results"])
        assert data["summary"]["logs"] == 5


def test_the_same_directory_twice_is_read_once() -> None:
    data = json.loads(cli("--format=json", str(VERDICTS), str(VERDICTS)).stdout)
    assert data["summary"]["logs"] == 19


def test_a_missing_directory_among_several(tmp_path: Path) -> None:
    proc = cli(str(VERDICTS), str(tmp_path / "gone"))
    assert proc.returncode == 1 and "gone does not exist" in proc.stderr
    assert proc.stdout == ""


def _job_logs(folder: Path, job: int, last: int, batch: str) -> None:
    """A run's log (steps 0..last of 49, NeMo's lines) and its job's batch output."""
    from llmb.container import nemolog

    folder.mkdir(parents=True)
    lines = [nemolog.step_line(iteration=i, last_iteration=49, lr=1e-4, global_batch_size=128,
                               global_step=i, reduced_train_loss=9.0, train_step_timing=1.5,
                               tflops_per_gpu=400.0, consumed_samples=128 * (i + 1))
             for i in range(last + 1)]
    (folder / f"log-acct.exp_{job}_0.out").write_text("\n".join(lines) + "\n")
    (folder / f"sbatch_acct-acct.exp_{job}.out").write_text(batch)


def test_srun_lines_in_the_batch_output_name_a_failed_runs_nodes(tmp_path: Path) -> None:
    """srun writes its own errors into the job's sbatch output, not into the tasks' log: a
    failed run takes its reason and suspect nodes from there; a successful run and another
    job's batch output are left alone."""
    srun = ("srun: error: node2: tasks 8-15: Exited with exit code 1\n"
            "srun: error: node1: task 0: Killed\n")
    _job_logs(tmp_path / "failed", 41, 20, srun)
    _job_logs(tmp_path / "done", 42, 49, srun)
    _job_logs(tmp_path / "other", 43, 20, "")
    (tmp_path / "other" / "sbatch_acct-acct.exp_44.out").write_text(srun)
    proc = cli("--format=json", str(tmp_path))
    results = {r["experiment"]: r for r in json.loads(proc.stdout)["results"]}
    failed = results["failed"]
    # node1's task was killed by srun after node2's exited: the exit names the suspect
    assert failed["status"] == "Failed" and failed["suspect_nodes"] == ["node2"]
    assert "node2: tasks 8-15: Exited with exit code 1" in failed["reason"]
    assert results["done"]["status"] == "Success" and results["done"]["reason"] is None
    assert results["done"]["suspect_nodes"] == []
    assert results["other"]["suspect_nodes"] == []
    assert "nothing after the last step line says why" in results["other"]["reason"]


# --- the window rule -------------------------------------------------------------------------

TRUST = LOGS / "trust"


@pytest.fixture(scope="module")
def trust() -> dict[str, dict[str, Any]]:
    return {r["filename"].split("/")[0]: r
            for r in json.loads(cli("--format=json", str(TRUST)).stdout)["results"]}


@pytest.mark.parametrize(("case", "words"), [
    # steps 0-12 and 49: complete, but 2 of the window's 34 iterations
    ("window-gap", ["only 2 of the 34 window iterations 11-44 have a step line with a plausible "
                    "time (at least 31 needed)"]),
    ("beyond-final", ["iteration 20 is beyond its final iteration 19"]),
    ("final-changes", ["the final iteration changes within the log (99, then 49 at iteration 21)"
                       ": two runs in one log"]),
])
def test_a_run_without_its_window_is_invalid(trust: dict[str, dict[str, Any]], case: str,
                                             words: list[str]) -> None:
    r = trust[case]
    assert r["status"] == "Invalid", r["reason"]
    for word in words:
        assert word in r["reason"]


def one_good_run(tmp_path: Path, keep: Any = lambda i: True) -> Path:
    """One passing llama3.1 8b fp8 run (window 9.31/9.33), its step lines kept where keep(i)."""
    src = sorted((VERDICTS / LLAMA8_FP8_8_DIR).iterdir())[0]
    dest = tmp_path / "runs" / LLAMA8_FP8_8_DIR / src.name
    shutil.copytree(src, dest)
    [log] = dest.rglob("log-*.out")
    lines = log.read_text().splitlines(keepends=True)
    log.write_text("".join(x for x in lines if "train_step_timing" not in x
                           or keep(int(x.split("iteration ")[1].split("/")[0]))))
    return tmp_path / "runs"


@pytest.mark.parametrize(("missing", "status"), [(3, "Success"), (4, "Invalid")])
def test_a_run_needs_90_percent_of_its_window(tmp_path: Path, missing: int, status: str) -> None:
    gone = set(range(20, 20 + missing))
    [r] = json.loads(cli("--format=json", str(one_good_run(tmp_path, lambda i: i not in gone))
                         ).stdout)["results"]
    assert (r["status"], r["window_steps"]) == (status, 34 - missing)
    if status == "Invalid":
        assert f"only {34 - missing} of the 34 window iterations 11-44" in r["reason"]


def test_a_window_beyond_the_runs_is_said_to_be(tmp_path: Path) -> None:
    root = one_good_run(tmp_path)
    proc = cli("--check", "--window=60-70", str(root))
    assert proc.returncode == 3
    [line] = proc.stderr.splitlines()
    assert "the window 60-70 lies outside the runs of 1 configuration(s) (e.g. " \
           f"{LLAMA8_FP8_8}, whose runs end at iteration 49)" in line
    assert "without a successful run" not in line
    data = json.loads(cli("--format=json", "--window=60-70", str(root)).stdout)
    assert data["configurations"][0]["verdict"] == "window_outside_runs"
    [r] = data["results"]
    assert r["status"] == "Success" and r["window_steps"] == 0
    assert r["reason"] == "the window 60-70 lies beyond its final iteration 49: no figure"


def test_a_run_that_ends_inside_the_window_says_what_its_figure_covers() -> None:
    data = json.loads(cli("--format=json", str(EXPERIMENTS)).stdout)
    r = run_of(data, "custom-nemotron-run")  # 30 steps: iterations 0-29
    assert (r["status"], r["window_steps"]) == ("Success", 19)
    assert r["reason"] == "its final iteration 29 cuts the window 11-44 to 11-29"
