"""llmb.llmbrun.submit: the environment launch.sh runs in (the workload venv, the request, the
install's Slurm settings and token, the placement, the overrides, in that order; what llmb-run
decides never taken from the calling shell), the history record of what ran (no secret by name
or by value), and a failed or refused submission. Submissions through the real launch.sh and
Slurm are in tests/e2e; the command-line view is in test_cli.py."""

from __future__ import annotations

import contextlib
import gc
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import runinstall
import yaml
from llmb.launch import overrides, placement, request
from llmb.llmbrun import clusterconfig, submit
from llmb.llmbrun.errors import RunError
from llmb.llmbrun.tasks import Task
from runconfig import installed

SHELL = {"PATH": "/usr/bin:/bin", "HOME": "/home/u", "LANG": "C.UTF-8"}
NEMOTRON = Task("pretrain_nemotron4", "15b", "fp8", 16)


@pytest.fixture
def cfg(tmp_path: Path) -> clusterconfig.ClusterConfig:
    return installed(tmp_path / "i", env={"NCCL_DEBUG": "WARN", "MAX_STEPS": 30})


def edit(cfg: clusterconfig.ClusterConfig, change) -> clusterconfig.ClusterConfig:
    """The install's cluster_config.yaml changed by hand, read again."""
    data = yaml.safe_load(cfg.path.read_text())
    change(data)
    cfg.path.write_text(yaml.safe_dump(data))
    return clusterconfig.find_config(str(cfg.path), {})


def env_of(cfg: clusterconfig.ClusterConfig, task: Task = NEMOTRON, base: dict | None = None,
           above: bool = False, dry_run: bool = False, smoke: bool = False) -> dict[str, str]:
    return submit.launch_env(cfg, task, above, dry_run, smoke, {**SHELL, **(base or {})})


# --- the launch environment -------------------------------------------------------------------

def test_the_request_and_the_install_as_launch_sh_reads_them(
        cfg: clusterconfig.ClusterConfig) -> None:
    env = env_of(cfg)
    venv = Path(sys.prefix)
    assert {k: v for k, v in env.items() if k not in SHELL} == {
        "VIRTUAL_ENV": str(venv), "LLMB_PYTHON": str(venv / "bin" / "python"),
        "LLMB_INSTALL": str(cfg.install), "CLUSTER_TYPE": "slurm", "GPU_TYPE": "h100",
        "JOB_TOTAL_GPUS": "16", "MODEL_SIZE": "15b", "DTYPE": "fp8",
        "SBATCH_ACCOUNT": "acct", "SBATCH_PARTITION": "batch", "SBATCH_GPUS_PER_NODE": "gpu:8",
        "HF_TOKEN": runinstall.TOKEN, "NCCL_DEBUG": "WARN", "MAX_STEPS": "30"}
    assert env["PATH"] == f"{venv}/bin:{SHELL['PATH']}"
    assert (env["HOME"], env["LANG"]) == (SHELL["HOME"], SHELL["LANG"])


def test_what_llmb_run_decides_never_comes_from_the_shell(
        cfg: clusterconfig.ClusterConfig) -> None:
    shell = {name: "from-the-shell" for name in overrides.RESERVED}
    shell.update({var: "node9" for var in placement.ENV_VARS})
    env = env_of(cfg, base=shell)
    leaked = {k for k, v in env.items() if v == "from-the-shell" or v == "node9"}
    assert leaked == set()
    for absent in ("DRY_RUN", "ENABLE_PROFILE", "STRONG_SCALING", "STAGE_PATH", "CONDA_PREFIX",
                   "LLMB_WORKLOAD", "PYTHONHOME", "LLMB_ALLOW_UNVALIDATED_SCALE",
                   *placement.ENV_VARS):
        assert absent not in env, absent


def test_overrides_in_order_shell_then_install_then_task(
        cfg: clusterconfig.ClusterConfig) -> None:
    task = Task("pretrain_nemotron4", "15b", "fp8", 16, env={"MAX_STEPS": "12"},
                placement=placement.build(nodelist="node[1-2]", slurm_args=["--comment=a b"]))
    env = env_of(cfg, task, base={"NCCL_DEBUG": "INFO", "MAX_STEPS": "99", "OTHER": "kept"},
                 above=True, dry_run=True, smoke=True)
    assert (env["NCCL_DEBUG"], env["MAX_STEPS"], env["OTHER"]) == ("WARN", "12", "kept")
    assert (env["LLMB_NODELIST"], env["LLMB_SLURM_ARGS"]) == ("node[1-2]", "'--comment=a b'")
    assert (env["DRY_RUN"], env["SMOKE_TEST"], env["LLMB_ALLOW_UNVALIDATED_SCALE"]) == (
        "true", "true", "true")


def test_a_token_in_the_shell_wins_over_the_token_file(cfg: clusterconfig.ClusterConfig
                                                       ) -> None:
    assert env_of(cfg, base={"HF_TOKEN": "hf_exported_in_the_shell"})["HF_TOKEN"] == (
        "hf_exported_in_the_shell")
    (cfg.install / ".hf_token").unlink()  # not read at all then
    env_of(cfg, base={"HF_TOKEN": "hf_exported_in_the_shell"})


@pytest.mark.parametrize(("content", "why"), [
    (None, "cannot be read (No such file or directory)"),
    (b"hf_\xff\xfe\n", "is not UTF-8 text"),
])
def test_a_token_file_that_cannot_be_read_is_one_line(
        cfg: clusterconfig.ClusterConfig, content: bytes | None, why: str) -> None:
    token_file = cfg.install / ".hf_token"
    if content is None:
        token_file.unlink()
    else:
        token_file.write_bytes(content)
    with pytest.raises(RunError) as err:
        env_of(cfg)
    assert str(err.value) == f"hf_token_file={token_file}: {why}"


@pytest.mark.parametrize(("change", "present", "absent"), [
    # Run:ai: no Slurm settings at all
    (lambda d: d["launcher"].update(cluster_type="runai"), {"CLUSTER_TYPE": "runai"},
     ("SBATCH_ACCOUNT", "SBATCH_PARTITION", "SBATCH_GPUS_PER_NODE")),
    # a cluster without GPU GRES: no --gres
    (lambda d: d["launcher"]["slurm"].update(gres=None), {"SBATCH_ACCOUNT": "acct"},
     ("SBATCH_GPUS_PER_NODE",)),
    # the install's GRES as it is written, its type too (the GPU type's own count per node)
    (lambda d: (d["launcher"].update(gpu_type="gb200"),
                d["launcher"]["slurm"].update(gres="gpu:gb200:4")),
     {"SBATCH_GPUS_PER_NODE": "gpu:gb200:4", "GPU_TYPE": "gb200"}, ()),
    # a conda venv is activated as conda does it
    (lambda d: d["workloads"]["pretrain_nemotron4"].update(venv_kind="conda", venv="/opt/c"),
     {"CONDA_PREFIX": "/opt/c", "LLMB_PYTHON": "/opt/c/bin/python"}, ("VIRTUAL_ENV",)),
    # no token file configured: no HF_TOKEN
    (lambda d: d["launcher"].update(hf_token_file=None), {}, ("HF_TOKEN",)),
])
def test_the_install_decides(cfg: clusterconfig.ClusterConfig, change, present: dict[str, str],
                             absent: tuple[str, ...]) -> None:
    env = env_of(edit(cfg, change), base={"VIRTUAL_ENV": "/old/venv"})
    assert {k: env.get(k) for k in present} == present
    assert not set(absent) & set(env)


@pytest.mark.parametrize(("where", "message"), [
    ("shell", "SMOKE_TEST=perhaps is not a boolean; use true or false (also yes/no, 1/0, "
              "on/off) (from the environment)"),
    ("install", "SMOKE_TEST=perhaps is not a boolean; use true or false (also yes/no, 1/0, "
                "on/off) (from {path} launcher.env)"),
])
def test_a_launch_boolean_says_where_it_came_from(cfg: clusterconfig.ClusterConfig,
                                                  where: str, message: str) -> None:
    if where == "install":
        cfg = edit(cfg, lambda d: d["launcher"]["env"].update(SMOKE_TEST="perhaps"))
    with pytest.raises(RunError) as err:
        env_of(cfg, base={"SMOKE_TEST": "perhaps"} if where == "shell" else {})
    assert str(err.value) == message.format(path=cfg.path)


def test_launch_booleans_reach_launch_sh_as_true_or_false(
        cfg: clusterconfig.ClusterConfig) -> None:
    cfg = edit(cfg, lambda d: d["launcher"]["env"].update(ENABLE_GPU_METRICS="Yes"))
    env = env_of(cfg, base={"ENABLE_NCCLTRACE": "0", "ENABLE_CHECKPOINT": "on"})
    assert (env["ENABLE_GPU_METRICS"], env["ENABLE_NCCLTRACE"], env["ENABLE_CHECKPOINT"]) == (
        "true", "false", "true")


# --- the history record -----------------------------------------------------------------------

def test_the_record_says_what_ran(cfg: clusterconfig.ClusterConfig) -> None:
    task = Task("pretrain_nemotron4", "15b", "fp8", 4096, True, 3, {"NCCL_DEBUG": "INFO"},
                placement.build(exclude="node7"))
    env = env_of(cfg, task, base={"ENABLE_CHECKPOINT": "yes", "UNRELATED": "x"}, above=True)
    record = submit.history_record(cfg, task, env, "4242", "exp", "/runs/exp_1",
                                   rerun_of="4100")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", record.pop("time"))
    assert record == {
        "type": "submit", "job_id": "4242", "experiment": "exp", "experiment_dir": "/runs/exp_1",
        "workload": "pretrain_nemotron4", "size": "15b", "dtype": "fp8", "scale": 4096,
        "gpu_type": "h100", "profile": True, "repeat": 3, "smoke": False, "unvalidated": True,
        "scaling": "weak",
        # the launch settings in effect, from any source, and the task's own overrides
        "env": {"ENABLE_CHECKPOINT": "true", "MAX_STEPS": "30", "NCCL_DEBUG": "INFO"},
        "placement": {"exclude": "node7"}, "rerun_of": "4100"}
    plain = submit.history_record(cfg, NEMOTRON, env_of(cfg), "1", None, None)
    assert "rerun_of" not in plain and plain["placement"] == {}
    assert (plain["profile"], plain["unvalidated"], plain["experiment_dir"]) == (
        False, False, None)


def test_no_secret_reaches_the_record_from_any_field(cfg: clusterconfig.ClusterConfig) -> None:
    token = runinstall.TOKEN  # from the install's token file
    shell = {"NGC_API_KEY": "nvapi-shell-secret-0123", "LOAD_CHECKPOINT_PATH": f"/ck/{token}"}
    task = Task("pretrain_nemotron4", "15b", "fp8", 16,
                env={"RUN_CONF_IMAGE": "nvapi-shell-secret-0123/img"},
                placement=placement.build(reservation=f"res-{token}"))
    env = env_of(cfg, task, base=shell)
    record = submit.history_record(cfg, task, env, "7", f"exp-{token}", f"/runs/{token}")
    text = repr(record)
    assert token not in text and "nvapi-shell-secret-0123" not in text
    assert record["env"]["LOAD_CHECKPOINT_PATH"] == "/ck/********"
    assert record["env"]["RUN_CONF_IMAGE"] == "********/img"
    assert record["placement"]["reservation"] == "res-********"
    assert (record["experiment"], record["experiment_dir"]) == ("exp-********", "/runs/********")
    assert "HF_TOKEN" not in record["env"] and "NGC_API_KEY" not in record["env"]


# --- submitting -------------------------------------------------------------------------------

@pytest.mark.parametrize(("line", "submitted", "directory"), [
    ("llmb: submitted pretrain_nemotron4_15b_fp8_gpus16 as job 4242\n",
     ("pretrain_nemotron4_15b_fp8_gpus16", "4242"), None),
    ("llmb: experiment directory: /lustre/my runs/exp/exp_1744\n", None,
     "/lustre/my runs/exp/exp_1744"),
    ("  llmb: submitted x as job 1\n", None, None),  # only at the start of a line
    ("llmb: submitted as job 1\n", None, None),
])
def test_what_launch_sh_prints_is_read(line: str, submitted: tuple[str, str] | None,
                                       directory: str | None) -> None:
    m = submit.SUBMIT_RE.match(line)
    assert (m.groups() if m else None) == submitted
    d = submit.EXPDIR_RE.match(line.rstrip("\n"))
    assert (d.group(1) if d else None) == directory


def test_a_failed_launch_is_one_line_and_records_nothing(
        cfg: clusterconfig.ClusterConfig, capfd: pytest.CaptureFixture[str]) -> None:
    """The real launch.sh refuses (the install has no image): its own line goes through."""
    with pytest.raises(RunError) as err:
        submit.submit(cfg, NEMOTRON, env_of(cfg))
    image = cfg.install / "images" / "nvidia+nemo+25.04.01.sqsh"
    assert capfd.readouterr().err.startswith(f"llmb: the container image {image} does not exist")
    script = cfg.repo / "nemotron" / "launch.sh"
    assert re.fullmatch(rf"pretrain_nemotron4 15b fp8 x16 \(repeat 1\): {script} failed "
                        r"\(exit \d+\); see the line above", str(err.value))
    assert not cfg.history.path.exists()


def test_a_launch_leaves_no_file_open(cfg: clusterconfig.ClusterConfig,
                                      capfd: pytest.CaptureFixture[str]) -> None:
    """launch.sh's output pipe is closed whatever ends the launch: PYTHONWARNINGS=error would
    print a ResourceWarning for an unclosed file at the front's exit."""
    def launch() -> None:
        with contextlib.suppress(RunError):
            submit.submit(cfg, NEMOTRON, env_of(cfg))

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        launch()
        gc.collect()
    assert [w for w in caught if issubclass(w.category, ResourceWarning)] == []


def test_dry_runs_are_one_process_a_workload_not_one_launch_a_run(
        cfg: clusterconfig.ClusterConfig, capfd: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A bulk dry run of 1000 runs took 40 minutes: launch.sh and a nemo-run import for each.
    Each run is validated in-process (launch.sh's rules), then one process of the recipe's
    entrypoint prints every dry run of the workload, as launch.sh would print each."""
    started: list[list[str]] = []
    validated: list[str] = []
    popen, from_env = subprocess.Popen, request.from_env

    def counted_popen(argv, *args, **kwargs):
        started.append(list(argv))
        return popen(argv, *args, **kwargs)

    def counted_from_env(recipe, env=None):
        validated.append(recipe.workload)
        return from_env(recipe, env)

    monkeypatch.setattr(submit.subprocess, "Popen", counted_popen)
    monkeypatch.setattr(request, "from_env", counted_from_env)
    runs = [Task("pretrain_nemotron4", "15b", "fp8", 16, repeat=r) for r in (1, 2, 3, 4)]
    assert submit.run_tasks(cfg, runs, True, False) == 0
    entry = cfg.repo / "nemotron" / "pretrain_nemotron4.py"
    assert [argv[1:] for argv in started] == [[str(entry), "dry-runs"]]
    assert validated == ["pretrain_nemotron4"] * 4
    out = capfd.readouterr().out
    assert out.count("# llmb DRY_RUN: nothing written, nothing submitted\n") == 4
    assert [line for line in out.splitlines() if line.startswith("llmb-run: [")] == [
        f"llmb-run: [{r}/4] pretrain_nemotron4 15b fp8 x16 (repeat {r})" for r in (1, 2, 3, 4)]
    assert not cfg.history.path.exists()


def test_errors_stop_every_submission(cfg: clusterconfig.ClusterConfig,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    contradicting = Task("pretrain_nemotron4", "15b", "fp8", 16, env={"SMOKE_TEST": "false"})
    unknown = Task("pretrain_nemotron4", "99b", "fp8", 16)
    below = Task("pretrain_nemotron4", "15b", "fp8", 8)  # a smoke run may: a warning
    assert submit.run_tasks(cfg, [NEMOTRON, contradicting, unknown, below], False, True) == 1
    out = capsys.readouterr()
    assert out.out == ""  # nothing was started
    assert out.err.splitlines() == [
        "llmb-run: warning: pretrain_nemotron4 15b fp8 x8 (repeat 1): --scale 8 is not a "
        "published scale (published: 16, 32, 64, 128, 256, 512, 1024, 2048); a smoke run uses "
        "the nearest published layout, no reference applies",
        "llmb-run: pretrain_nemotron4 99b fp8 x16 (repeat 1): -s 99b is not a size of "
        "pretrain_nemotron4; allowed: 15b, 340b",
        "llmb-run: pretrain_nemotron4 15b fp8 x16 (repeat 1): --smoke contradicts the task's "
        "SMOKE_TEST=false",
        "llmb-run: 2 errors; nothing was submitted"]


def test_an_unreadable_token_stops_before_the_first_submission(
        cfg: clusterconfig.ClusterConfig, capsys: pytest.CaptureFixture[str]) -> None:
    (cfg.install / ".hf_token").unlink()
    assert submit.run_tasks(cfg, [NEMOTRON], True, False) == 1
    out = capsys.readouterr()
    assert out.out == ""
    assert out.err == f"llmb-run: hf_token_file={cfg.install / '.hf_token'}: cannot be read " \
                      "(No such file or directory)\n"


def test_one_error_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    submit.report_errors(["a: --scale 8 is below the smallest published scale 16"])
    assert capsys.readouterr().err == (
        "llmb-run: a: --scale 8 is below the smallest published scale 16\n")
