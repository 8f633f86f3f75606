"""The installer: config validation (every bad input), interactive prompts by injection,
dry run, a real headless install into a temporary LLMB_INSTALL (enroot test double), resume."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from llmb import installer, slurm

REPO = Path(__file__).resolve().parents[1]
INSTALL_SH = REPO / "installer" / "install.sh"
SHIMS = REPO / "tests" / "shims"
DEV_VENV = Path(sys.prefix)


def write_config(tmp_path: Path, **over) -> Path:
    cfg = {
        "install_path": str(tmp_path / "install"),
        "gpu_type": "h100",
        "workloads": ["pretrain_nemotron4"],
        "slurm": {"account": "acct", "partition": "batch"},
        "venv": {"reuse": str(DEV_VENV)},
        "image": {"method": "local"},
    }
    for key, value in over.items():
        if value is None:
            cfg.pop(key, None)
        else:
            cfg[key] = value
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def install_env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(PATH=f"{SHIMS}:{env['PATH']}", LLMB_PYTHON=sys.executable, ENROOT_SHIM_DELAY="0",
               ENROOT_SHIM_LOG=str(tmp_path / "enroot.log"), LLMB_IMAGE_SPACE_GB="0")
    for var in ("HF_TOKEN", "LLMB_INSTALL", "VIRTUAL_ENV", "STAGE_PATH"):
        env.pop(var, None)
    return env


def run_install(tmp_path: Path, *args: str, env: dict[str, str] | None = None,
                stdin=subprocess.DEVNULL) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(INSTALL_SH), *args], env=env or install_env(tmp_path),
                          capture_output=True, text=True, stdin=stdin, timeout=300)


# --- every bad input: one clear line, non-zero, nothing created --------------------------

BAD = [
    ({"gpu_type": "a100"}, "gpu_type=a100 is not supported; allowed: h100, b200, gb200"),
    ({"workloads": ["pretrain_gpt3"]}, "workloads: pretrain_gpt3 is not a workload"),
    ({"workloads": []}, "workloads is empty"),
    ({"workloads": ["pretrain_nemotronh"], "gpu_type": "gb200"},
     "pretrain_nemotronh is not published for gpu_type=gb200"),
    ({"cluster_type": "k8s"}, "cluster_type=k8s is not supported"),
    ({"slurm": {"partition": "batch"}}, "slurm.account is required"),
    ({"slurm": {"account": "a", "partition": "b", "qos": "x"}}, "slurm has unknown key(s) qos"),
    ({"venv": {"kind": "pipenv"}}, "venv.kind=pipenv is not supported; allowed: venv, conda"),
    ({"venv": {"reuse": "/nonexistent"}}, "venv.reuse=/nonexistent is not a venv"),
    ({"image": {"method": "docker"}}, "image.method=docker is not supported"),
    ({"workloads": ["pretrain_llama3.1"]}, "HF_TOKEN is required for pretrain_llama3.1"),
    ({"hf_token_file": "/nonexistent/tok"}, "hf_token_file=/nonexistent/tok"),
    ({"install_path": None}, "install_path is required"),
    ({"colour": "blue"}, "unknown key(s) colour"),
]


@pytest.mark.parametrize(("over", "message"), BAD, ids=[m[:30] for _, m in BAD])
def test_bad_config_is_one_clear_line(tmp_path, over, message):
    proc = run_install(tmp_path, "--config", str(write_config(tmp_path, **over)))
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("llmb-install: ") and message in lines[0]
    assert not (tmp_path / "install").exists()


def test_config_file_missing_or_not_yaml(tmp_path):
    proc = run_install(tmp_path, "--config", str(tmp_path / "nope.yaml"))
    assert proc.returncode == 1 and "No such file" in proc.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("workloads: [unclosed\n")
    proc = run_install(tmp_path, "--config", str(bad))
    assert proc.returncode == 1 and "not valid YAML" in proc.stderr


def test_no_terminal_and_no_config_is_an_error(tmp_path):
    proc = run_install(tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.strip() == (
        "llmb-install: stdin is not a terminal, so there is no one to answer the prompts; run "
        "it in a terminal or pass --config FILE (see installer/example-config.yaml)")


def test_python_without_yaml_is_a_clear_error(tmp_path):
    env = install_env(tmp_path)
    env["LLMB_PYTHON"] = "/bin/false"
    proc = run_install(tmp_path, "--config", "x", env=env)
    assert proc.returncode == 1 and "cannot import yaml" in proc.stderr


def test_dry_run_prints_the_plan_and_changes_nothing(tmp_path):
    cfg = write_config(tmp_path, image={"method": "srun"}, workloads="all",
                       hf_token_file=str(tmp_path / "tok"))
    (tmp_path / "tok").write_text("hf_secret_value\n")
    proc = run_install(tmp_path, "--config", str(cfg), "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert "Dry run: nothing will be changed" in proc.stdout
    assert "srun --account=acct --partition=batch" in proc.stdout
    assert "hf_secret_value" not in proc.stdout + proc.stderr
    assert proc.stdout.count("image:") == 1  # one image shared by every recipe
    assert not (tmp_path / "install").exists()


# --- a real headless install -----------------------------------------------------------------

def test_headless_install_then_rerun(tmp_path):
    tok = tmp_path / "tok"
    tok.write_text("hf_secret_value\n")
    cfg = write_config(tmp_path, workloads=["pretrain_nemotron4", "pretrain_llama3.1"],
                       hf_token_file=str(tok), env={"NCCL_DEBUG": "WARN"})
    proc = run_install(tmp_path, "--config", str(cfg))
    assert proc.returncode == 0, proc.stderr
    root = tmp_path / "install"
    for d in ("images", "datasets", "venvs", "workloads/pretrain_nemotron4",
              "workloads/pretrain_llama3.1"):
        assert (root / d).is_dir()
    assert (root / "images" / "nvidia+nemo+25.04.01.sqsh").read_bytes()[:4] == b"hsqs"
    token = root / ".hf_token"
    assert stat.S_IMODE(token.stat().st_mode) == 0o600
    assert "hf_secret_value" not in proc.stdout + proc.stderr
    conf = yaml.safe_load((root / "cluster_config.yaml").read_text())
    assert conf["schema"] == 1
    assert conf["llmb"] == {"repo": str(REPO), "install_path": str(root)}
    assert conf["launcher"]["slurm"] == {"account": "acct", "partition": "batch",
                                         "cpu_partition": "batch", "gres": None}
    assert conf["launcher"]["env"] == {"NCCL_DEBUG": "WARN"}
    assert conf["workloads"]["pretrain_nemotron4"]["recipe"] == "nemotron"
    assert conf["workloads"]["pretrain_llama3.1"]["venv"] == str(DEV_VENV)
    assert os.access(root / "llmb-run", os.X_OK)
    listing = subprocess.run([str(root / "llmb-run"), "list"], capture_output=True, text=True,
                             cwd=tmp_path, env=install_env(tmp_path), timeout=60)
    assert listing.returncode == 0, listing.stderr
    assert "pretrain_nemotron4 (installed)" in listing.stdout
    assert "pretrain_nemotronh (not installed)" in listing.stdout
    # a second run: everything is done, nothing is imported again
    again = run_install(tmp_path, "--config", str(cfg))
    assert again.returncode == 0, again.stderr
    assert again.stdout.count("done before, skipped") == 9
    assert (tmp_path / "enroot.log").read_text().count("enroot import") == 1


def test_resumes_after_an_interrupted_step(tmp_path):
    cfg = write_config(tmp_path)
    env = install_env(tmp_path)
    env["ENROOT_SHIM_FAIL"] = "1"  # the image step fails after the venv steps succeeded
    first = run_install(tmp_path, "--config", str(cfg), env=env)
    assert first.returncode == 1
    assert "image import failed" in first.stderr.strip().splitlines()[-1]
    state = json.loads((tmp_path / "install" / installer.STATE_FILE).read_text())
    assert state["done"] == ["layout", "setup:pretrain_nemotron4", "venv:pretrain_nemotron4"]
    second = run_install(tmp_path, "--config", str(cfg))
    assert second.returncode == 0, second.stderr
    assert "Resuming: 3 of 6 steps already done" in second.stdout
    assert second.stdout.count("done before, skipped") == 3
    assert (tmp_path / "install" / "cluster_config.yaml").exists()


def test_creates_a_real_venv_per_workload(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    req = os.path.relpath(empty, REPO)
    cfg = write_config(tmp_path, image={"method": "skip"},
                       venv={"kind": "venv", "python": sys.executable,
                             "requirements": [req]})
    proc = run_install(tmp_path, "--config", str(cfg))
    assert proc.returncode == 0, proc.stderr
    venv = tmp_path / "install" / "venvs" / "pretrain_nemotron4"
    assert (venv / "bin" / "python").exists() and (venv / "pyvenv.cfg").exists()


# --- interactive, by injection ----------------------------------------------------------------

def answers(*replies: str):
    it = iter(replies)
    asked: list[str] = []

    def input_fn(prompt: str) -> str:
        asked.append(prompt)
        return next(it)

    return input_fn, asked


def test_interactive_uses_discovered_defaults_and_revalidates(tmp_path, capsys):
    found = {"partitions": [slurm.Partition("batch", True, "gpu:h100:8"),
                            slurm.Partition("cpu", False, "")],
             "accounts": ["bench", "other"]}
    input_fn, asked = answers(
        str(tmp_path / "inst"),  # install path
        "",                      # cluster type: default slurm
        "",                      # GPU type: discovered h100
        "pretrain_gpt3",         # not offered -> asked again
        "pretrain_llama3.1",
        "nobody",                # not an account -> asked again
        "",                      # default account bench
        "",                      # partition: default batch
        "",                      # gres: gpu:8
        "srun",                  # image method
        "",                      # image partition: cpu
        "",                      # venv kind
        "yes",
    )
    secrets = iter(["", "hf_typed_secret"])
    plan = installer.interactive_plan(input_fn, lambda _p: next(secrets), {}, found)
    out = capsys.readouterr().out
    assert "not offered: pretrain_gpt3" in out and "nobody is not one of: bench, other" in out
    assert "hf_typed_secret" not in out
    assert plan.workloads == ["pretrain_llama3.1"]
    assert plan.slurm == {"account": "bench", "partition": "batch", "gres": "gpu:8",
                          "cpu_partition": "cpu"}
    assert plan.image["method"] == "srun" and plan.hf_token == "hf_typed_secret"
    assert any("GPU type" in q and "default: h100" in q for q in asked)


def test_interactive_typed_fallback_when_discovery_failed(tmp_path):
    input_fn, _ = answers(str(tmp_path / "i"), "slurm", "b200", "all", "", "myacct", "", "gpu",
                          "none", "local", "venv", "no")
    with pytest.raises(installer.InstallError, match="cancelled; nothing was changed"):
        installer.interactive_plan(input_fn, lambda _p: "", {}, {"partitions": None,
                                                                  "accounts": None})
    assert not (tmp_path / "i").exists()


def test_input_ending_is_a_clear_error():
    def eof(_prompt: str) -> str:
        raise EOFError

    with pytest.raises(installer.InstallError, match="no answer to 'Install directory"):
        installer.interactive_plan(eof, eof, {}, {"partitions": None, "accounts": None})


def test_discovery_on_a_cluster_without_accounting(monkeypatch, capsys):
    def no_accounting(_user):
        raise slurm.SlurmUnavailable("sacctmgr failed: You are not running a supported "
                                     "accounting_storage plugin")

    monkeypatch.setattr(slurm, "partitions", lambda: [slurm.Partition("batch", True, "gpu:8")])
    monkeypatch.setattr(slurm, "accounts", no_accounting)
    found = installer.discover("root")
    assert found["accounts"] is None and found["partitions"][0].gpus == 8
    assert "cannot list accounts: sacctmgr failed" in capsys.readouterr().out


def test_partition_gres_parsing():
    assert slurm.Partition("p", False, "gpu:h100:8(S:0-1)").gpus == 8
    assert slurm.Partition("p", False, "gpu:h100:8(S:0-1)").gpu_model == "h100"
    assert slurm.Partition("p", False, "").gpus == 0
    assert slurm.Partition("p", False, "gpu:4").gpu_model is None


@pytest.mark.e2e
def test_discovery_against_the_real_test_cluster(slurm_cluster, monkeypatch):
    for key, value in slurm_cluster.items():
        monkeypatch.setenv(key, value)
    parts = slurm.partitions()
    assert [(p.name, p.default, p.gpus) for p in parts] == [("batch", True, 8)]
    with pytest.raises(slurm.SlurmUnavailable, match="sacctmgr"):
        slurm.accounts("root")  # the test cluster has no accounting: typed fallback
