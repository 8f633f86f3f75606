"""llmb-run: config discovery, validation before any submission (the scale rules), bulk
file expansion with every error reported at once, the launch environment, the history file
under concurrent writers, and status. Real submissions are in test_setup_e2e.py."""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from llmb.launch import overrides, placement
from llmb.llmbrun import analyzer, clusterconfig, status, submit, tasks
from llmb.llmbrun.history import History
from llmb.shared import slurmquery
from paths import REPO

LLMB_RUN = REPO / "installer" / "llmb-run"


@pytest.fixture
def install(tmp_path: Path) -> Path:
    root = tmp_path / "install"
    root.mkdir()
    (root / ".hf_token").write_text("hf_from_file\n")
    conf = {
        "schema": 1,
        "llmb": {"repo": str(REPO), "install_path": str(root)},
        "launcher": {"cluster_type": "slurm", "gpu_type": "h100",
                     "slurm": {"account": "acct", "partition": "batch",
                               "cpu_partition": "batch", "gres": "gpu:8"},
                     "hf_token_file": str(root / ".hf_token"), "env": {"NCCL_DEBUG": "WARN"}},
        "workloads": {w: {"recipe": r, "venv": sys.prefix, "venv_kind": "venv", "image": None}
                      for w, r in (("pretrain_llama3.1", "llama3.1"),
                                   ("pretrain_nemotron4", "nemotron"))},
    }
    (root / "cluster_config.yaml").write_text(yaml.safe_dump(conf))
    return root


def run(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if k != "LLMB_INSTALL"}
    full.update(LLMB_PYTHON=sys.executable, **env)
    return subprocess.run(["bash", str(LLMB_RUN), *args], cwd=cwd, env=full,
                          capture_output=True, text=True, timeout=120)


def test_list_marks_installed_workloads(install):
    proc = run(["list"], install)
    assert proc.returncode == 0, proc.stderr
    assert "pretrain_llama3.1 (installed)" in proc.stdout
    assert "pretrain_nemotronh (not installed)" in proc.stdout
    assert "-s 8b    --dtype fp8  --scale 8, 16, 32, 64, 128" in proc.stdout


def test_config_found_through_llmb_install(install, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert run(["list"], elsewhere, LLMB_INSTALL=str(install)).returncode == 0
    proc = run(["list"], elsewhere)
    assert proc.returncode == 1
    assert proc.stderr.startswith("llmb-run: no cluster_config.yaml found")
    assert len(proc.stderr.strip().splitlines()) == 1


SINGLE_ERRORS = [
    (["-w", "pretrain_gpt3", "-s", "8b", "--dtype", "fp8", "--scale", "8"],
     "-w pretrain_gpt3 is not a workload"),
    (["-w", "pretrain_nemotronh", "-s", "56b", "--dtype", "fp8", "--scale", "32"],
     "pretrain_nemotronh is not installed here"),
    (["-w", "pretrain_llama3.1", "-s", "7b", "--dtype", "fp8", "--scale", "8"],
     "-s 7b is not a size of pretrain_llama3.1; allowed: 8b, 70b, 405b"),
    (["-w", "pretrain_llama3.1", "-s", "8b", "--dtype", "fp16", "--scale", "8"],
     "--dtype fp16 is not published for pretrain_llama3.1 8b on h100; allowed: bf16, fp8"),
    (["-w", "pretrain_llama3.1", "-s", "70b", "--dtype", "fp8", "--scale", "32"],
     "--scale 32 is below the smallest published scale 64"),
    (["-w", "pretrain_llama3.1", "-s", "8b", "--dtype", "fp8", "--scale", "24"],
     "--scale 24 is not a published scale; published: 8, 16, 32, 64, 128"),
    (["-w", "pretrain_llama3.1", "-s", "8b", "--dtype", "fp8", "--scale", "132"],
     "--scale 132: 132 GPUs is not a positive multiple of 8 GPUs per node"),
    (["-w", "pretrain_llama3.1", "-s", "8b", "--dtype", "fp8", "--scale", "8", "--env", "X"],
     "--env X is not NAME=VALUE"),
]
USAGE_ERRORS = {"--env X is not NAME=VALUE"}


@pytest.mark.parametrize(("args", "message"), SINGLE_ERRORS, ids=[m[:28] for _, m in SINGLE_ERRORS])
def test_single_rejects_before_submitting(install, args, message):
    proc = run(["single", *args], install)
    assert proc.returncode == (2 if message in USAGE_ERRORS else 1)
    assert message in proc.stderr
    assert "submitted" not in proc.stdout
    assert not (install / "llmb_run_history.jsonl").exists()


def test_above_max_scale_is_a_warning_and_tells_launch(install):
    cfg = clusterconfig.find_config(str(install / "cluster_config.yaml"), {})
    task = tasks.Task("pretrain_llama3.1", "8b", "fp8", 256)
    errors, warnings, above = tasks.check_task(cfg, task)
    assert errors == [] and above
    assert "above the largest published scale 128: an unvalidated configuration" in warnings[0]
    env = submit.launch_env(cfg, task, True, False, False,
                             {"PATH": "/usr/bin", "LLMB_PYTHON": "/x", "VIRTUAL_ENV": "/old"})
    assert env["LLMB_ALLOW_UNVALIDATED_SCALE"] == "true"
    assert env["VIRTUAL_ENV"] == sys.prefix and env["PATH"].startswith(f"{sys.prefix}/bin:")
    assert env["LLMB_PYTHON"] == f"{sys.prefix}/bin/python"
    assert env["HF_TOKEN"] == "hf_from_file"
    assert env["SBATCH_GPUS_PER_NODE"] == "gpu:8" and env["SBATCH_ACCOUNT"] == "acct"
    assert (env["JOB_TOTAL_GPUS"], env["MODEL_SIZE"], env["DTYPE"]) == ("256", "8b", "fp8")
    assert env["NCCL_DEBUG"] == "WARN" and "DRY_RUN" not in env and "SMOKE_TEST" not in env


def test_task_env_overrides_and_smoke(install):
    cfg = clusterconfig.find_config(str(install / "cluster_config.yaml"), {})
    task = tasks.Task("pretrain_nemotron4", "15b", "fp8", 16, True, 1,
                        {"NCCL_DEBUG": "INFO", "MAX_STEPS": "20"})
    env = submit.launch_env(cfg, task, False, True, True, {"PATH": "/usr/bin"})
    assert env["NCCL_DEBUG"] == "INFO" and env["MAX_STEPS"] == "20"
    assert env["ENABLE_PROFILE"] == "true" and env["SMOKE_TEST"] == "true"
    assert env["DRY_RUN"] == "true"


def write_bulk(tmp_path: Path, data) -> Path:
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_bulk_expands_sizes_dtypes_scales_repeats(install):
    data = {"defaults": {"repeats": 2, "env": {"MAX_STEPS": 20}},
            "tasks": [{"workload": "pretrain_nemotron4", "sizes": ["15b"],
                       "dtypes": ["fp8", "bf16"], "scales": [16, 32],
                       "env": {"SMOKE_TEST": True}},
                      {"workload": "pretrain_llama3.1", "size": "8b", "dtype": "bf16",
                       "scale": 8, "repeats": 1, "profile": True}]}
    expanded, errors = tasks.tasks_from_bulk(data, "f")
    assert errors == []
    assert len(expanded) == 2 * 2 * 2 + 1
    assert expanded[0].env == {"MAX_STEPS": "20", "SMOKE_TEST": "true"}
    assert expanded[-1].profile and expanded[-1].env == {"MAX_STEPS": "20"}
    assert [t.repeat for t in expanded[:2]] == [1, 2]


def test_bulk_reports_every_error_at_once(install, tmp_path):
    sweep = write_bulk(tmp_path, {"tasks": [
        {"workload": "pretrain_llama3.1", "size": "8b", "dtype": "fp8", "scales": [8, 24, 4]},
        {"workload": "pretrain_nemotron4", "size": "15b", "dtypes": ["fp16"], "scale": 16},
        {"workload": "pretrain_nemotron4", "size": "15b", "dtype": "fp8", "scale": 16,
         "repeats": 0},
        {"workload": "pretrain_nemotron4", "dtype": "fp8", "scale": 16},
        {"workload": "pretrain_nemotron4", "size": "15b", "dtype": "fp8", "scale": 16,
         "colour": "red"},
        {"workload": "pretrain_llama3.1", "size": "8b", "dtype": "fp8", "scale": 256},
    ]})
    proc = run(["bulk", str(sweep)], install)
    assert proc.returncode == 1
    err = proc.stderr
    for message in ("task 3: repeats=0 must be a whole number from 1 to 1000",
                    "task 4: size (or sizes) is required",
                    "task 5: unknown key(s) colour",
                    "--scale 24 is not a published scale",
                    "--scale 4 is below the smallest published scale 8",
                    "--dtype fp16 is not published for pretrain_nemotron4 15b"):
        assert message in err, message
    assert "6 errors; nothing was submitted" in err
    assert "submitted" not in proc.stdout
    assert not (install / "llmb_run_history.jsonl").exists()


def test_bulk_file_missing_or_not_yaml(install, tmp_path):
    assert "No such file" in run(["bulk", str(tmp_path / "none.yaml")], install).stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("tasks: [\n")
    assert "is not valid YAML" in run(["bulk", str(bad)], install).stderr
    empty = write_bulk(tmp_path, {"tasks": []})
    assert "no tasks" in run(["bulk", str(empty)], install).stderr


SHADOW = "root:$6$salt$hash:19000:0:99999:7:::\nalice:$6$pepper$other:19000:0:99999:7:::\n"


@pytest.mark.parametrize("text", [SHADOW, "just a line of text\n", "", "42"])
def test_a_file_that_is_no_bulk_file_is_described_never_echoed(install, tmp_path, text):
    """A mistyped path (/etc/shadow) is not printed back, password hashes and all."""
    wrong = tmp_path / "shadow"
    wrong.write_text(text)
    proc = run(["bulk", str(wrong)], install)
    assert proc.returncode == 1
    (line,) = proc.stderr.splitlines()
    lines = text.count("\n") + (bool(text) and not text.endswith("\n"))
    assert line.startswith(f"llmb-run: bulk file {wrong} ({len(text)} bytes, {lines} line(s)) "
                           "is "), line
    assert line.endswith("; a bulk file is a YAML mapping with tasks (and defaults), or a YAML "
                         "list of tasks; its lines are not shown: is it the file you meant?")
    for secret in ("$6$", "salt", "root", "alice", "just a line"):
        assert secret not in line.replace(str(wrong), "")


def test_many_bad_entries_list_the_first_and_count_the_rest(install, tmp_path):
    """Not one line per bad entry (a file of a million would print a million lines)."""
    many = tmp_path / "many.yaml"
    many.write_text("- 1\n" * 20_000)
    proc = run(["bulk", str(many)], install)
    assert proc.returncode == 1
    lines = proc.stderr.splitlines()
    assert len(lines) == submit.MAX_LISTED + 2
    assert lines[0] == f"llmb-run: {many}: task 1: must be a mapping"
    assert lines[-2:] == [
        f"llmb-run: ... and {20_000 - submit.MAX_LISTED} more error(s) not listed",
        "llmb-run: 20000 errors; nothing was submitted"]


def test_dry_run_goes_through_launch_sh_and_records_nothing(install):
    proc = run(["single", "-w", "pretrain_nemotron4", "-s", "15b", "--dtype", "fp8",
                "--scale", "16", "--dry-run"], install)
    assert proc.returncode == 0, proc.stderr
    assert "DRY_RUN" in proc.stdout and "sbatch" in proc.stdout
    assert not (install / "llmb_run_history.jsonl").exists()


def test_launch_refusal_is_one_line_before_launch_sh_runs(install):
    # the image was never imported: launch.sh's own rule refuses it, checked before launch.sh
    # runs, in one line; nothing is submitted or recorded
    proc = run(["single", "-w", "pretrain_nemotron4", "-s", "15b", "--dtype", "fp8",
                "--scale", "16"], install)
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [
        "llmb-run: pretrain_nemotron4 15b fp8 x16 (repeat 1): the container image "
        f"{install}/images/nvidia+nemo+25.04.01.sqsh does not exist; run ./setup.sh (it "
        "imports nvcr.io/nvidia/nemo:25.04.01) or set RUN_CONF_IMAGE"]
    assert "[1/1]" not in proc.stdout
    assert not (install / "llmb_run_history.jsonl").exists()


# --- history and status --------------------------------------------------------------------

def _writer(path: str, n: int, tag: int) -> None:
    h = History(Path(path))
    for i in range(n):
        h.append({"type": "submit", "job_id": f"{tag}-{i}", "pad": "x" * 5000})


def test_history_survives_concurrent_writers(tmp_path):
    path = tmp_path / "h.jsonl"
    procs = [multiprocessing.Process(target=_writer, args=(str(path), 50, t)) for t in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    subs = History(path).submissions()
    assert len(subs) == 200
    assert len({s["job_id"] for s in subs}) == 200


def test_status_caches_final_states_and_reads_results(install, monkeypatch, capsys):
    cfg = clusterconfig.find_config(str(install / "cluster_config.yaml"), {})
    for job in ("101", "102", "103"):
        cfg.history.append({"type": "submit", "job_id": job, "workload": "pretrain_llama3.1",
                            "size": "8b", "dtype": "fp8", "scale": 8, "repeat": 1,
                            "experiment_dir": str(install)})
    states = {"101": "RUNNING", "102": "COMPLETED", "103": slurmquery.PURGED}
    calls: list[list[str]] = []

    def fake_infos(ids, names=None):
        calls.append(list(ids))
        return {j: slurmquery.JobInfo(j, states[j], nodes="node1") for j in ids}

    monkeypatch.setattr(slurmquery, "job_infos", fake_infos)
    monkeypatch.setattr(analyzer, "analyze_runs", lambda dirs: analyzer.RunAnalysis(
        results={j: [{"filename": f"{j}/x/log-x_{j}_0.out", "status": "Success",
                      "time_mean": 1.234}] for j in dirs}))
    assert status.cmd_status(cfg, False, "table") == 0
    out = capsys.readouterr().out
    assert "101  RUNNING    -        -        -" in out
    assert "102  COMPLETED  Success  -        1.234" in out
    assert "103  PURGED     Success" in out  # Slurm forgot it; the logs still tell
    calls.clear()
    status.cmd_status(cfg, False, "json")
    assert calls == [["101"]]  # the final states came from the history file


# --- what llmb-run validated is what runs and what the history records ----------------------

@pytest.mark.parametrize(("name", "value", "instead"), [
    ("MODEL_SIZE", "340b", "-s/--size"), ("DTYPE", "bf16", "--dtype"),
    ("JOB_TOTAL_GPUS", "128", "--scale"), ("GPU_TYPE", "b200", "launcher.gpu_type"),
    ("ENABLE_PROFILE", "true", "-p/--profile"), ("DRY_RUN", "false", "--dry-run"),
    ("SBATCH_ACCOUNT", "other", "launcher.slurm.account"),
])
def test_env_cannot_override_what_llmb_run_validated(install, name, value, instead):
    proc = run(["single", "-w", "pretrain_nemotron4", "-s", "15b", "--dtype", "fp8", "--scale",
                "16", "--env", f"{name}={value}"], install)
    assert proc.returncode == 2
    assert proc.stderr == (f"llmb-run: --env {name}={value}: llmb-run sets {name} itself (and "
                           f"records it in the history); use {overrides.RESERVED[name]}\n")
    assert instead in proc.stderr
    assert not (install / "llmb_run_history.jsonl").exists()


def test_bulk_and_cluster_config_env_cannot_override_either(install, tmp_path):
    sweep = write_bulk(tmp_path, {"tasks": [{"workload": "pretrain_nemotron4", "size": "15b",
                                             "dtype": "fp8", "scale": 16,
                                             "env": {"JOB_TOTAL_GPUS": 128}}]})
    proc = run(["bulk", str(sweep)], install)
    assert proc.returncode == 1
    assert proc.stderr == (f"llmb-run: {sweep}: task 1: env JOB_TOTAL_GPUS=128: llmb-run sets "
                           "JOB_TOTAL_GPUS itself (and records it in the history); use --scale "
                           "(bulk: scale or scales)\n")
    conf = yaml.safe_load((install / "cluster_config.yaml").read_text())
    conf["launcher"]["env"] = {"DTYPE": "bf16"}
    (install / "cluster_config.yaml").write_text(yaml.safe_dump(conf))
    proc = run(["list"], install)
    assert proc.returncode == 1 and "launcher.env DTYPE=bf16: llmb-run sets DTYPE" in proc.stderr


@pytest.mark.parametrize(("value", "expected"), [
    ("false", False), ("False", False), ("no", False), ("0", False), ("off", False),
    (False, False), ("true", True), ("yes", True), ("1", True), (True, True)])
def test_bulk_booleans_are_strict(value, expected):
    (task,), errors = tasks.tasks_from_bulk(
        {"tasks": [{"workload": "w", "size": "8b", "dtype": "fp8", "scale": 8,
                    "profile": value, "env": {"SMOKE_TEST": value}}]}, "f")
    assert errors == []
    assert task.profile is expected
    assert task.env["SMOKE_TEST"] == ("true" if expected else "false")


@pytest.mark.parametrize("value", ["maybe", 2, "ja", [True], "truee"])
def test_bulk_booleans_refuse_what_is_not_one(value):
    _, errors = tasks.tasks_from_bulk(
        {"tasks": [{"workload": "w", "size": "8b", "dtype": "fp8", "scale": 8,
                    "profile": value}]}, "f")
    assert len(errors) == 1 and errors[0].startswith("f: task 1: profile=")
    assert "is not a boolean; use true or false" in errors[0]


def _cfg(install: Path) -> clusterconfig.ClusterConfig:
    return clusterconfig.find_config(str(install / "cluster_config.yaml"), {})


def test_the_calling_shell_cannot_change_a_run_behind_the_history(install):
    """ENABLE_PROFILE, STRONG_SCALING, GPUS_PER_NODE, DRY_RUN in the shell are removed; launch
    settings llmb-run does not choose (SMOKE_TEST, MAX_STEPS) are normalised and recorded."""
    cfg = _cfg(install)
    task = tasks.Task("pretrain_nemotron4", "15b", "fp8", 16)
    shell = {"PATH": "/usr/bin", "ENABLE_PROFILE": "true", "STRONG_SCALING": "yes",
             "GPUS_PER_NODE": "4", "DRY_RUN": "true", "LLMB_ALLOW_UNVALIDATED_SCALE": "1",
             "SMOKE_TEST": "Yes", "MAX_STEPS": "20", "MODEL_SIZE": "340b"}
    env = submit.launch_env(cfg, task, False, False, False, shell)
    for name in ("ENABLE_PROFILE", "STRONG_SCALING", "GPUS_PER_NODE", "DRY_RUN",
                 "LLMB_ALLOW_UNVALIDATED_SCALE"):
        assert name not in env, name
    assert (env["MODEL_SIZE"], env["SMOKE_TEST"], env["MAX_STEPS"]) == ("15b", "true", "20")
    rec = submit.history_record(cfg, task, env, "7", "exp", "/d")
    assert (rec["profile"], rec["smoke"]) == (False, True)
    assert rec["env"] == {"SMOKE_TEST": "true", "MAX_STEPS": "20"}


def test_a_bad_boolean_in_the_shell_stops_before_anything_is_submitted(install, tmp_path):
    proc = run(["single", "-w", "pretrain_nemotron4", "-s", "15b", "--dtype", "fp8", "--scale",
                "16"], install, SMOKE_TEST="perhaps")
    assert proc.returncode == 1
    assert proc.stderr == ("llmb-run: SMOKE_TEST=perhaps is not a boolean; use true or false "
                           "(also yes/no, 1/0, on/off) (from the environment)\n")
    assert proc.stdout == ""


def test_history_keeps_no_secret_by_name_or_by_value(install):
    cfg = _cfg(install)
    token = "hf_from_file"  # the install's hf_token_file
    place = placement.build(slurm_args=[f"--comment=ci-{token}"])
    task = tasks.Task("pretrain_llama3.1", "8b", "fp8", 8, env={
        "MY_PASSWD": "hunter2hunter2", "NGC_CREDENTIAL": "nvapi-0123456789",
        "WANDB_NOTE": f"run with {token}", "NOTE": "plain", "MAX_STEPS": "10"},
        placement=place)
    env = submit.launch_env(cfg, task, False, False, False,
                            {"PATH": "/usr/bin", "APP_SECRET": "runai-secret-value"})
    rec = submit.history_record(cfg, task, env, "7", f"exp-{token}", None)
    text = json.dumps(rec)
    for secret in (token, "hunter2hunter2", "nvapi-0123456789", "runai-secret-value"):
        assert secret not in text
    assert "MY_PASSWD" not in rec["env"] and "NGC_CREDENTIAL" not in rec["env"]
    assert rec["env"]["WANDB_NOTE"] == "run with ********"
    assert rec["placement"]["slurm_args"] == ["--comment=ci-********"]
    assert rec["experiment"] == "exp-********"
    assert (rec["env"]["NOTE"], rec["env"]["MAX_STEPS"]) == ("plain", "10")
    cfg.history.append(rec)
    assert (cfg.history.path.stat().st_mode & 0o777) == 0o600


def test_non_utf8_config_and_bulk_file_are_one_line(install, tmp_path):
    sweep = tmp_path / "sweep.yaml"
    sweep.write_bytes(b"tasks:\n- workload: pretrain_nemotron4 # caf\xe9\n")
    proc = run(["bulk", str(sweep)], install)
    assert (proc.returncode, proc.stderr) == (
        1, f"llmb-run: bulk file {sweep} is not UTF-8 text (byte 0xe9 at offset 43); save it "
           "as UTF-8\n")
    conf = install / "cluster_config.yaml"
    conf.write_bytes(conf.read_bytes() + b"# \xff\n")
    proc = run(["list"], install)
    assert proc.returncode == 1
    assert proc.stderr.startswith(f"llmb-run: {conf} is not UTF-8 text (byte 0xff at offset ")
    assert len(proc.stderr.splitlines()) == 1
