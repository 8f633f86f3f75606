"""llmb.llmbrun.suite.plan: which published configurations a suite runs (every size, dtype, weak
and strong row of the install's GPU type within the bounds), in which order, the partition's
size from sinfo (a test double answering as Slurm 22.05's sinfo does; the real one is asked in
tests/e2e/test_suite_e2e.py), and the GPU-hours estimate against figures worked out by hand."""

from __future__ import annotations

from pathlib import Path

import pytest
from llmb.llmbrun import clusterconfig, submit, tasks
from llmb.llmbrun.errors import RunError
from llmb.llmbrun.suite import plan as suiteplan
from llmb.llmbrun.suite.plan import Selection, SuiteConfig
from llmb.shared.errors import UsageError
from runinstall import make_install


def config(tmp_path: Path, **kw) -> clusterconfig.ClusterConfig:
    root = make_install(tmp_path / "install", **kw)
    return clusterconfig.find_config(str(root / "cluster_config.yaml"), {})


def keys(configs: list[SuiteConfig]) -> list[str]:
    return [c.key for c in configs]


def test_every_published_row_of_the_installed_workloads_within_the_bounds(tmp_path):
    cfg = config(tmp_path)  # llama3.1 and nemotron4 on h100
    found = suiteplan.published(cfg, Selection(max_scale=32), {})
    assert keys(found) == [
        "pretrain_llama3.1/8b/bf16/weak/32", "pretrain_llama3.1/8b/fp8/weak/32",
        "pretrain_llama3.1/405b/bf16/weak/32", "pretrain_llama3.1/405b/fp8/weak/32",
        "pretrain_nemotron4/15b/bf16/weak/32", "pretrain_nemotron4/15b/fp8/weak/32",
        "pretrain_llama3.1/8b/bf16/weak/16", "pretrain_llama3.1/8b/fp8/weak/16",
        "pretrain_nemotron4/15b/bf16/weak/16", "pretrain_nemotron4/15b/fp8/weak/16",
        "pretrain_llama3.1/8b/bf16/weak/8", "pretrain_llama3.1/8b/fp8/weak/8"]
    fifteen = found[-3]  # nemotron4 15b fp8 x16
    assert (fifteen.reference, fifteen.time_limit_s) == (1.98, 1800)  # 00:30:00
    narrowed = suiteplan.published(cfg, Selection(("pretrain_nemotron4",), ("fp8",), 32, 128),
                                   {})
    assert keys(narrowed) == ["pretrain_nemotron4/15b/fp8/weak/128",
                              "pretrain_nemotron4/340b/fp8/weak/128",
                              "pretrain_nemotron4/15b/fp8/weak/64",
                              "pretrain_nemotron4/15b/fp8/weak/32"]


def test_strong_scaling_rows_are_planned_and_launched_as_such(tmp_path):
    cfg = config(tmp_path, gpu_type="b200", workloads=("pretrain_nemotron4",))
    found = suiteplan.published(cfg, Selection(dtypes=("fp8",), min_scale=512, max_scale=512),
                                {})
    assert keys(found) == ["pretrain_nemotron4/340b/fp8/weak/512",
                           "pretrain_nemotron4/340b/fp8/strong/512"]
    strong = tasks.Task("pretrain_nemotron4", "340b", "fp8", 512, scaling="strong")
    assert tasks.check_task(cfg, strong) == ([], [], False)
    env = submit.launch_env(cfg, strong, False, True, False, {"PATH": "/usr/bin"})
    assert env["STRONG_SCALING"] == "true"
    assert submit.history_record(cfg, strong, env, "7", "e", None)["scaling"] == "strong"
    weak = submit.launch_env(cfg, tasks.Task("pretrain_nemotron4", "340b", "fp8", 512), False,
                             True, False, {"PATH": "/usr/bin", "STRONG_SCALING": "true"})
    assert "STRONG_SCALING" not in weak


def test_runs_go_largest_scale_first_repeats_interleaved():
    configs = [SuiteConfig("w", "s", d, "weak", n, 1.0, 60) for n, d in ((16, "a"), (16, "b"),
                                                                           (8, "a"))]
    runs = suiteplan.order_runs(configs, 2)
    assert [(r.number, configs[r.config].scale, configs[r.config].dtype, r.repeat)
            for r in runs] == [(1, 16, "a", 1), (2, 16, "b", 1), (3, 16, "a", 2),
                               (4, 16, "b", 2), (5, 8, "a", 1), (6, 8, "a", 2)]


def test_gpu_hours_against_a_figure_worked_out_by_hand(tmp_path):
    """Nemotron-4 15b fp8 on 16 H100s: the published step time is 1.98 s. One run is the
    start-up allowance plus MAX_STEPS steps: 600 s + 50 x 1.98 s = 699 s; on 16 GPUs that is
    16 x 699 / 3600 = 3.10667 GPU-hours; 3 repeats: 9.32 GPU-hours."""
    cfg = config(tmp_path)
    (c,) = suiteplan.published(cfg, Selection(("pretrain_nemotron4",), ("fp8",), 16, 16), {})
    steps = suiteplan.steps_per_run(cfg, {})
    assert steps == 50
    assert c.run_seconds(steps) == pytest.approx(699.0)
    assert c.gpu_hours(steps) == pytest.approx(3.106667, abs=1e-6)
    assert suiteplan.total_gpu_hours([c], 3, steps) == pytest.approx(9.32)
    plan = suiteplan.render_plan([c], 3, steps)
    assert plan.splitlines()[1].split() == ["pretrain_nemotron4", "15b", "fp8", "weak", "16",
                                            "3", "1.98", "9.3"]
    # MAX_STEPS from launcher.env: 20 steps -> (600 + 20 x 1.98) x 16 / 3600 = 2.8427 GPU-h
    steps = suiteplan.steps_per_run(config(tmp_path / "b", env={"MAX_STEPS": "20"}), {})
    assert c.gpu_hours(steps) == pytest.approx(2.8427, abs=1e-4)
    # never more than the time limit: 100000 steps are cut at 00:30:00 -> 16 x 0.5 = 8 GPU-h
    assert c.gpu_hours(100_000) == pytest.approx(8.0)


def test_a_configuration_without_a_reference_counts_its_time_limit(tmp_path):
    """GB200 340b publishes no step time: one run is its time limit, 01:00:00, on 128 GPUs
    = 128 GPU-hours; TIME_LIMIT from the shell (launcher.env has none) replaces it."""
    cfg = config(tmp_path, gpu_type="gb200", workloads=("pretrain_nemotron4",))
    (c, *_) = suiteplan.published(cfg, Selection(dtypes=("bf16",), max_scale=128), {})
    assert (c.key, c.reference, c.gpu_hours(50)) == ("pretrain_nemotron4/340b/bf16/weak/128",
                                                     None, 128.0)
    (c, *_) = suiteplan.published(cfg, Selection(dtypes=("bf16",), max_scale=128),
                                  {"TIME_LIMIT": "00:15:00"})
    assert c.gpu_hours(50) == 32.0
    assert "1 configuration(s) without a published step time counted at their time limit" \
        in suiteplan.estimate_line([c], 1, 50)


@pytest.mark.parametrize(("sel", "error", "message"), [
    (Selection(("pretrain_gpt3",)), UsageError, "-w pretrain_gpt3 is not a workload; known: "),
    (Selection(("pretrain_nemotronh",)), UsageError,
     "-w pretrain_nemotronh is not installed here (installed: pretrain_llama3.1, "
     "pretrain_nemotron4); rerun the installer with it"),
    (Selection(dtypes=("fp16",)), UsageError, "--dtype fp16 is not a dtype; allowed: bf16, fp8"),
    (Selection(min_scale=64, max_scale=32), UsageError, "--min-scale 64 is above --max-scale 32"),
    (Selection(max_scale=4), RunError, "no published configuration of the selected workloads "
     "on h100 is within 1 to 4 GPUs; their published scales: 8, 16, 32"),
])
def test_a_selection_that_cannot_be_planned_is_one_line(tmp_path, sel, error, message):
    with pytest.raises(error) as info:
        suiteplan.published(config(tmp_path), sel, {})
    assert message in str(info.value) and "\n" not in str(info.value)


def sinfo(tmp_path: Path, monkeypatch, text: str, rc: int = 0) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / "sinfo"
    script.write_text(f"#!/bin/sh\ncat <<'EOF'\n{text}EOF\nexit {rc}\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")


def test_the_default_largest_scale_is_what_the_partition_offers(tmp_path, monkeypatch):
    """sinfo -o %P|%a|%D|%G|%T: nodes down, drained or not responding cannot take a job."""
    sinfo(tmp_path, monkeypatch, "batch*|up|3|gpu:8|idle\nbatch*|up|2|gpu:8|allocated\n"
          "batch*|up|1|gpu:8|drained\nbatch*|up|1|gpu:8|down*\nbatch*|up|1|gpu:8|idle*\n")
    gpus, origin = suiteplan.partition_gpus(config(tmp_path))
    assert (gpus, origin) == (40, "partition batch: 5 node(s) x 8 h100 GPUs")


@pytest.mark.parametrize(("text", "rc", "message"), [
    ("", 0, "sinfo does not list partition batch (launcher.slurm.partition of "),
    ("batch*|up|2|gpu:8|drained\n", 0, "partition batch has no node that can take a job "
     "(sinfo lists 2, none up); give --max-scale N"),
    ("slurm_load_partitions: Unable to contact slurm controller\n", 1,
     "cannot ask how many GPUs partition batch has (sinfo failed: slurm_load_partitions: "
     "Unable to contact slurm controller (asked 3 times)); give --max-scale N"),
])
def test_a_partition_size_sinfo_cannot_give_is_one_line(tmp_path, monkeypatch, text, rc,
                                                         message):
    sinfo(tmp_path, monkeypatch, text, rc)
    with pytest.raises(RunError) as info:
        suiteplan.partition_gpus(config(tmp_path))
    assert message in str(info.value)


def test_time_limits_in_every_slurm_form():
    assert suiteplan.time_limit_seconds("00:30:00") == 1800
    assert suiteplan.time_limit_seconds("1-02:00:05") == 93605
    with pytest.raises(RunError, match="TIME_LIMIT=90 is not a Slurm time"):
        suiteplan.time_limit_seconds("90")
