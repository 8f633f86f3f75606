"""llmb.llmbrun.submit: every value of every run is checked by launch.sh's own rules before the
first submission, so a bulk file whose third run has a bad MAX_STEPS submits nothing and says
so in one line per problem; `--env` and `rerun` answer in one line. A smoke run allows any
scale with a warning, as launch.sh does. Submissions go to the sbatch test double."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from llmb.llmbrun.history import History
from paths import REPO
from runinstall import make_install, run
from slurmshims import Slurm

SHIMS = REPO / "tests" / "shims"
TASK = {"workload": "pretrain_nemotron4", "size": "15b", "dtype": "fp8", "scale": 16}


@pytest.fixture
def install(tmp_path: Path) -> Path:
    root = make_install(tmp_path / "install")
    (root / "images").mkdir()
    (root / "images" / "nvidia+nemo+25.04.01.sqsh").write_bytes(b"hsqs")
    return root


def llmb_run(install: Path, *args: str):
    log = install / "sbatch.log"
    return run(list(args), install, path=f"{SHIMS}:/usr/bin:/bin", SHIM_LOG=str(log)), log


BAD_LATER_RUN = [
    ({"MAX_STEPS": "05"}, "MAX_STEPS=05 is not a positive integer; write it as 5"),
    ({"MAX_STEPS": "0"}, "MAX_STEPS=0 is not a positive integer"),
    ({"TIME_LIMIT": "1h"}, "TIME_LIMIT=1h is not a Slurm time"),
    ({"LOAD_CHECKPOINT_PATH": "/nonexistent/ckpt"}, "LOAD_CHECKPOINT_PATH=/nonexistent/ckpt "
                                                    "does not exist"),
    ({"LOAD_CHECKPOINT_PATH": "/tmp/a,b"}, "LOAD_CHECKPOINT_PATH=/tmp/a,b contains ,"),
    ({"RUN_CONF_IMAGE": "Not An Image"}, "RUN_CONF_IMAGE=Not An Image is neither an image"),
    ({"RUN_CONF_IMAGE": "/nonexistent.sqsh"}, "RUN_CONF_IMAGE=/nonexistent.sqsh does not "
                                              "exist"),
    ({"PROFILE_START_STEP": "60"}, "PROFILE_START_STEP=60 must be less than "
                                   "PROFILE_STOP_STEP"),
    ({"ENABLE_GPU_METRICS": "true"}, "ENABLE_GPU_METRICS=true needs ENABLE_PROFILE=true"),
]


@pytest.mark.parametrize(("env", "message"), BAD_LATER_RUN)
@pytest.mark.parametrize("dry_run", [False, True])
def test_a_bad_value_of_a_later_run_stops_the_bulk_before_the_first_submission(
        install, tmp_path, env, message, dry_run):
    bulk = tmp_path / "sweep.yaml"
    bulk.write_text(yaml.safe_dump({"tasks": [TASK, TASK, {**TASK, "env": env}]}))
    proc, log = llmb_run(install, "bulk", str(bulk), *(["--dry-run"] if dry_run else []))
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [
        f"llmb-run: pretrain_nemotron4 15b fp8 x16 (repeat 1): {message}"
        + proc.stderr.split(message, 1)[1].splitlines()[0]]
    assert "[1/3]" not in proc.stdout and not log.exists()
    assert not (install / "llmb_run_history.jsonl").exists()


def test_every_bad_run_is_named_at_once(install, tmp_path):
    bulk = tmp_path / "sweep.yaml"
    bulk.write_text(yaml.safe_dump({"tasks": [
        {**TASK, "env": {"MAX_STEPS": "x"}}, TASK, {**TASK, "env": {"TIME_LIMIT": "soon"}}]}))
    proc, log = llmb_run(install, "bulk", str(bulk))
    assert proc.returncode == 1 and not log.exists()
    lines = proc.stderr.splitlines()
    assert len(lines) == 3 and "MAX_STEPS=x" in lines[0] and "TIME_LIMIT=soon" in lines[1]
    assert lines[2] == "llmb-run: 2 errors; nothing was submitted"


@pytest.mark.parametrize(("flag", "message"), [
    ("MAX_STEPS=abc", "MAX_STEPS=abc is not a positive integer"),
    ("TIME_LIMIT=25:00", "TIME_LIMIT=25:00 is not a Slurm time"),
])
def test_env_answers_in_one_line(install, flag, message):
    proc, log = llmb_run(install, "single", "-w", "pretrain_nemotron4", "-s", "15b", "--dtype",
                         "fp8", "--scale", "16", "--env", flag)
    assert proc.returncode == 1 and not log.exists()
    assert proc.stderr.splitlines() == [f"llmb-run: pretrain_nemotron4 15b fp8 x16 (repeat 1): "
                                        f"{message}" + proc.stderr.split(message)[1].rstrip()]


def test_rerun_answers_in_one_line(install, tmp_path):
    History(install / "llmb_run_history.jsonl").append({
        "type": "submit", "job_id": "51", "experiment": "x", "experiment_dir": None,
        "workload": "pretrain_nemotron4", "size": "15b", "dtype": "fp8", "scale": 16,
        "gpu_type": "h100", "repeat": 1, "profile": False, "smoke": False,
        "env": {"TIME_LIMIT": "forever"}, "placement": {}})
    shims = Slurm(tmp_path / "slurm")
    shims.set(squeue={"51": ["FAILED", "x", "node1", "None"]})
    proc = run(["rerun", "51"], install, path=f"{shims.dir}:{SHIMS}:/usr/bin:/bin",
               SHIM_LOG=str(tmp_path / "sbatch.log"))
    assert proc.returncode == 1
    assert proc.stderr.splitlines()[-1] == (
        "llmb-run: pretrain_nemotron4 15b fp8 x16 (repeat 1): TIME_LIMIT=forever is not a "
        "Slurm time; use HH:MM:SS or D-HH:MM:SS, e.g. 00:45:00")
    assert not (tmp_path / "sbatch.log").exists()


# --- smoke runs at any scale -------------------------------------------------------------------

@pytest.mark.parametrize(("workload", "size", "scale", "nodes"), [
    ("pretrain_nemotron4", "15b", 8, 1), ("pretrain_llama3.1", "405b", 16, 2)])
def test_a_smoke_run_below_the_smallest_published_scale_is_a_warning(install, workload, size,
                                                                     scale, nodes):
    proc, _ = llmb_run(install, "single", "-w", workload, "-s", size, "--dtype", "fp8",
                       "--scale", str(scale), "--smoke", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert f"--scale {scale} is not a published scale" in proc.stderr
    assert "a smoke run uses the nearest published layout" in proc.stderr
    assert f"#SBATCH --nodes={nodes}" in proc.stdout


def test_a_smoke_task_in_a_bulk_file_too(install, tmp_path):
    bulk = tmp_path / "sweep.yaml"
    bulk.write_text(yaml.safe_dump({"tasks": [{**TASK, "scale": 8,
                                               "env": {"SMOKE_TEST": True}}]}))
    proc, _ = llmb_run(install, "bulk", str(bulk), "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert "#SBATCH --nodes=1" in proc.stdout


@pytest.mark.parametrize(("args", "message"), [
    (["--scale", "8"], "--scale 8 is below the smallest published scale 64"),
    (["--scale", "12", "--smoke"], "--scale 12: "),  # not a whole number of 8-GPU nodes
    (["--scale", "16", "--smoke"], "16 GPUs is not divisible by TP x PP x CP = 32"),
])
def test_what_a_smoke_run_still_refuses(install, args, message):
    proc, _ = llmb_run(install, "single", "-w", "pretrain_llama3.1", "-s", "70b", "--dtype",
                       "fp8", *args, "--dry-run")
    assert proc.returncode == 1
    assert message in proc.stderr and len(proc.stderr.splitlines()) == 1


LAUGHS = "l0: &l0 [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]\n" for i in range(1, 8))
BULK_HOSTILE = [
    ("laughs-workload", LAUGHS + "tasks:\n  - {workload: *l7, size: 15b, dtype: fp8, scale: 16}\n",
     "expands, its aliases followed, to more than 1000000 values"),
    ("laughs-repeats", LAUGHS + "tasks:\n  - {workload: pretrain_nemotron4, size: 15b, dtype: "
     "fp8, scale: 16, repeats: *l7}\n", "expands, its aliases followed, to more than 1000000"),
    ("ten-million-runs", yaml.safe_dump({"tasks": [{
        "workload": "pretrain_nemotron4", "sizes": [f"s{i}" for i in range(100)],
        "dtypes": [f"d{i}" for i in range(100)], "scales": list(range(1, 101)),
        "repeats": 10}]}),
     "asks for 10000000 runs (task 1 alone 10000000: its sizes x dtypes x scales x repeats); "
     "a bulk file runs at most 1000"),
    ("task-prolog", yaml.safe_dump({"tasks": [{**TASK, "env": {"SLURM_TASK_PROLOG": "/t/x"}}]}),
     "env SLURM_TASK_PROLOG cannot be set for a run: srun runs the program it names before "
     "every task"),
    ("value-300KB", yaml.safe_dump({"tasks": [{**TASK, "env": {"NCCL_DEBUG": "W" * 300_000}}]}),
     "(300000 characters) is longer than the 4096 characters a run's setting can hold"),
]


@pytest.mark.parametrize(("text", "message"), [(t, m) for _, t, m in BULK_HOSTILE],
                         ids=[k for k, _, _ in BULK_HOSTILE])
def test_a_hostile_bulk_file_is_one_line_before_anything_is_expanded(install, tmp_path, text,
                                                                     message):
    bulk = tmp_path / "sweep.yaml"
    bulk.write_text(text)
    proc, log = llmb_run(install, "bulk", str(bulk), "--dry-run")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[:500]
    assert len(proc.stderr.splitlines()) == 1 and len(proc.stderr) < 600, proc.stderr[:600]
    assert message in proc.stderr
    assert not log.exists()


@pytest.mark.parametrize(("env", "message"), [
    ("SLURM_TASK_PROLOG=/tmp/x.sh", "--env SLURM_TASK_PROLOG cannot be set for a run"),
    ("SLURM_EPILOG=/tmp/x.sh", "--env SLURM_EPILOG cannot be set for a run"),
    ("NCCL_NET_PLUGIN=/tmp/libx.so", "--env NCCL_NET_PLUGIN cannot be a path"),
    ("CUDA_INJECTION64_PATH=/tmp/x.so", "--env CUDA_INJECTION64_PATH cannot be set for a run"),
    ("_SLURM_SPANK_OPTION_pyxis_container_image=x", "a SPANK plugin (pyxis"),
    ("NCCL_DEBUG=" + "W" * 100_000, "(100000 characters) is longer than the 4096 characters"),
])
def test_a_hook_or_huge_setting_on_the_command_line_is_one_line(install, env, message):
    proc, log = llmb_run(install, "single", "-w", "pretrain_nemotron4", "-s", "15b", "--dtype",
                         "fp8", "--scale", "16", "--dry-run", "--env", env)
    assert proc.returncode in (1, 2) and "Traceback" not in proc.stderr
    assert len(proc.stderr.splitlines()) == 1 and message in proc.stderr
    assert not log.exists()


def test_error_lines_mask_a_secret_a_value_holds(capsys, monkeypatch):
    """`-w <the token>` (pasted in the wrong place): the refusal names the flag, the token
    masked, as every front's line masks it."""
    from llmb.llmbrun import submit

    token = "hf_ADVcanary0123456789abcdefghijklmn"
    monkeypatch.setenv("HF_TOKEN", token)
    submit.report_errors([f"-w {token} is not a workload", "x"])
    err = capsys.readouterr().err
    assert token not in err and "-w ******** is not a workload" in err
