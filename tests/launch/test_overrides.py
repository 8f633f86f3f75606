"""llmb.launch.overrides: one rule for a run's environment wherever it comes from. A variable that
makes bash, the loader or Python run code is refused in one line naming it and why, by
llmb-run's --env, a bulk file's env, cluster_config.yaml's launcher.env, a replayed history
record and the installer's env:, before launch.sh starts (a --dry-run included): the planted
script never runs. The installer stores nothing llmb-run would then refuse."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from llmb.launch import overrides
from llmb.llmbrun.history import History
from paths import REPO
from runinstall import llmb_run_env, make_install, run
from slurmshims import Slurm

# --- the rule ---------------------------------------------------------------------------------

CHECKS = [
    ("BASH_ENV", "/tmp/x.sh", "BASH_ENV cannot be set for a run: bash runs the file"),
    ("ENV", "/tmp/x.sh", "ENV cannot be set for a run"),
    ("SHELLOPTS", "xtrace", "SHELLOPTS cannot be set for a run"),
    ("BASHOPTS", "extdebug", "BASHOPTS cannot be set for a run"),
    ("PS4", "$(touch /tmp/p)", "PS4 cannot be set for a run"),
    ("PYTHONPATH", "/tmp", "PYTHONPATH cannot be set for a run"),
    ("PYTHONHOME", "/tmp", "PYTHONHOME cannot be set for a run"),
    ("PYTHONSTARTUP", "/tmp/x.py", "PYTHONSTARTUP cannot be set for a run"),
    ("PYTHONINSPECT", "1", "PYTHONINSPECT cannot be set for a run"),
    ("PYTHONUSERBASE", "/tmp", "PYTHONUSERBASE cannot be set for a run"),
    ("LD_PRELOAD", "/tmp/x.so", "LD_PRELOAD cannot be set for a run"),
    ("LD_AUDIT", "/tmp/x.so", "LD_AUDIT cannot be set for a run"),
    ("LD_LIBRARY_PATH", "/tmp", "LD_LIBRARY_PATH cannot be set for a run"),
    ("GLIBC_TUNABLES", "glibc.malloc.check=3", "GLIBC_TUNABLES cannot be set for a run"),
    ("CDPATH", "/tmp", "CDPATH cannot be set for a run"),
    ("IFS", "/", "IFS cannot be set for a run"),
    ("BASH_FUNC_echo%%", "() { id; }", "is not a variable name"),
    ("MODEL_SIZE", "70b", "llmb-run sets MODEL_SIZE itself"),
    ("SBATCH_QOS", "high", "SBATCH_QOS"),
    ("NCCL_DEBUG", "a\nb", "contains control character(s) \\n"),
    ("X", [1], "must be a text or number value"),
    pytest.param("X", 10 ** 5000, "more digits than a value can hold", id="huge-int"),
    (7, "x", "is not a variable name"),
    ("SLURM_TASK_PROLOG", "/tmp/x.sh", "SLURM_TASK_PROLOG cannot be set for a run: srun runs"),
    ("NCCL_NET_PLUGIN", "/tmp/libx.so", "NCCL_NET_PLUGIN cannot be a path"),
    ("CUDA_INJECTION64_PATH", "/tmp/x.so", "CUDA_INJECTION64_PATH cannot be set for a run"),
    pytest.param("NCCL_DEBUG", "W" * 300_000, "NCCL_DEBUG=" + "W" * 80 + "... (300000 "
                 "characters) is longer than the 4096 characters", id="300-KB"),
]


@pytest.mark.parametrize(("name", "value", "message"), CHECKS)
def test_refused_in_one_line(name, value, message) -> None:
    with pytest.raises(overrides.Refused) as err:
        overrides.check("--env", name, value)
    assert message in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(("name", "value", "text"), [
    ("NCCL_DEBUG", "WARN", "WARN"), ("MAX_STEPS", 100, "100"), ("SMOKE_TEST", True, "true"),
    ("PYTHONUNBUFFERED", "1", "1"), ("TOKENIZERS_PARALLELISM", False, "false"),
    ("NCCL_NET_PLUGIN", "aws-ofi", "aws-ofi"), ("X", "x" * 4096, "x" * 4096)])
def test_settings_pass(name, value, text) -> None:
    assert overrides.check("--env", name, value) == text


# --- every source, through the real commands ----------------------------------------------------

@pytest.fixture
def planted(tmp_path: Path) -> dict[str, str]:
    """What each hostile value points at: a script, a directory with a sitecustomize.py; each
    leaves a marker file when it runs."""
    marker = tmp_path / "ran"
    script = tmp_path / "startup.sh"
    script.write_text(f"touch {marker}\n")
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    return {"BASH_ENV": str(script), "ENV": str(script), "PYTHONPATH": str(site),
            "PYTHONSTARTUP": str(site / "sitecustomize.py"), "SHELLOPTS": "xtrace",
            "SLURM_TASK_PROLOG": str(script), "marker": str(marker)}


HOSTILE = ("BASH_ENV", "PYTHONPATH", "SHELLOPTS", "SLURM_TASK_PROLOG")
SINGLE = ["single", "-w", "pretrain_nemotron4", "-s", "15b", "--dtype", "fp8", "--scale",
          "16", "--dry-run"]


def one_line(proc, name: str) -> None:
    assert proc.returncode in (1, 2), proc.stderr
    assert len(proc.stderr.splitlines()) == 1, proc.stderr
    assert f"{name} cannot be set for a run: " in proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""


@pytest.mark.parametrize("name", HOSTILE)
def test_single_env(tmp_path, planted, name) -> None:
    root = make_install(tmp_path / "install")
    one_line(run([*SINGLE, "--env", f"{name}={planted[name]}"], root), name)
    assert not Path(planted["marker"]).exists()


@pytest.mark.parametrize("name", HOSTILE)
def test_bulk_env(tmp_path, planted, name) -> None:
    root = make_install(tmp_path / "install")
    bulk = tmp_path / "sweep.yaml"
    bulk.write_text(yaml.safe_dump({"tasks": [
        {"workload": "pretrain_nemotron4", "size": "15b", "dtype": "fp8", "scale": 16},
        {"workload": "pretrain_nemotron4", "size": "15b", "dtype": "fp8", "scale": 16,
         "env": {name: planted[name]}}]}))
    proc = run(["bulk", str(bulk), "--dry-run"], root)
    one_line(proc, name)
    assert "task 2: env" in proc.stderr
    assert not Path(planted["marker"]).exists()


@pytest.mark.parametrize("name", HOSTILE)
def test_cluster_config_launcher_env(tmp_path, planted, name) -> None:
    root = make_install(tmp_path / "install", env={name: planted[name]})
    proc = run(SINGLE, root)
    one_line(proc, name)
    assert "launcher.env" in proc.stderr
    assert not Path(planted["marker"]).exists()


@pytest.mark.parametrize("name", HOSTILE)
def test_a_replayed_history_record(tmp_path, planted, name) -> None:
    root = make_install(tmp_path / "install")
    History(root / "llmb_run_history.jsonl").append({
        "type": "submit", "job_id": "41", "experiment": "x", "experiment_dir": None,
        "workload": "pretrain_nemotron4", "size": "15b", "dtype": "fp8", "scale": 16,
        "gpu_type": "h100", "repeat": 1, "profile": False, "smoke": False,
        "env": {name: planted[name]}, "placement": {}})
    shims = Slurm(tmp_path / "shims")
    shims.set(squeue={"41": ["FAILED", "x", "node1", "None"]})
    proc = run(["rerun", "41", "--dry-run"], root, path=f"{shims.dir}:/usr/bin:/bin")
    one_line(proc, name)
    assert "job 41 cannot be rerun" in proc.stderr
    assert not Path(planted["marker"]).exists()


def run_installer(tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """installer/install.sh --config (headless) --dry-run, in a clean environment."""
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({
        "install_path": str(tmp_path / "install"), "gpu_type": "h100",
        "workloads": ["pretrain_nemotron4"], "slurm": {"account": "acct", "partition": "b"},
        "venv": {"reuse": sys.prefix}, "image": {"method": "skip"}, "env": env}))
    return subprocess.run(["bash", str(REPO / "installer" / "install.sh"), "--config",
                           str(config), "--dry-run"], env=llmb_run_env(),
                          capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("name", [*HOSTILE, "MODEL_SIZE", "SBATCH_QOS", "LD_PRELOAD"])
def test_installer_env(tmp_path, planted, name) -> None:
    value = planted.get(name, "70b" if name == "MODEL_SIZE" else "high")
    proc = run_installer(tmp_path, {name: value})
    assert proc.returncode == 1, proc.stdout
    assert len(proc.stderr.splitlines()) == 1 and f" {name}" in proc.stderr
    assert not Path(planted["marker"]).exists()
    assert not (tmp_path / "install").exists()


def test_an_ordinary_setting_still_reaches_launch_sh(tmp_path) -> None:
    root = make_install(tmp_path / "install", image=None)
    (root / "images").mkdir()
    (root / "images" / "nvidia+nemo+25.04.01.sqsh").write_bytes(b"hsqs")
    proc = run([*SINGLE, "--env", "NCCL_DEBUG=INFO", "--env", "PYTHONUNBUFFERED=1"], root)
    assert proc.returncode == 0, proc.stderr
    assert "#SBATCH" in proc.stdout


def test_llmb_run_refuses_what_launch_sh_refuses_in_its_own_environment(tmp_path) -> None:
    root = make_install(tmp_path / "install")
    proc = run(SINGLE, root, SHELLOPTS="xtrace")  # (the wrapper's own bash traces itself)
    assert proc.returncode == 1
    assert proc.stderr.splitlines()[-1].startswith(
        "llmb-run: SHELLOPTS is set in the environment: bash turns")
    assert proc.stdout == "" and "launch.sh" not in proc.stderr


def test_the_installer_stores_what_llmb_run_accepts(tmp_path) -> None:
    proc = run_installer(tmp_path, {"NCCL_DEBUG": "WARN", "PYTHONUNBUFFERED": 1})
    assert proc.returncode == 0, proc.stderr
