"""The installer: config validation (every bad input), interactive prompts by injection,
dry run, a real headless install into a temporary LLMB_INSTALL (enroot test double), resume."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from fronts import PROBE_MESSAGE, failing_front, into_closed_pipe
from llmb.install import cli, prompts, steps
from llmb.layout import INSTALL_STATE_FILE
from llmb.shared import slurmquery
from paths import REPO, SHIMS

INSTALL_SH = REPO / "installer" / "install.sh"
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
    ({"gpu_type": "a100"},
     "gpu_type=a100 is not supported; allowed: h100, b200, gb200, h200, b300, gb300"),
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


@pytest.mark.parametrize("args", [["--bogus"], ["--config"], ["extra"]])
def test_a_bad_flag_is_one_line(tmp_path, args):
    proc = run_install(tmp_path, *args)
    assert proc.returncode == 2
    assert proc.stderr.startswith("llmb-install: ") and "see install.sh --help" in proc.stderr
    assert len(proc.stderr.splitlines()) == 1


def test_python_without_yaml_is_a_clear_error(tmp_path):
    env = install_env(tmp_path)
    env["LLMB_PYTHON"] = "/bin/false"
    proc = run_install(tmp_path, "--config", "x", env=env)
    assert proc.returncode == 1 and "cannot import yaml" in proc.stderr


def test_dry_run_prints_the_plan_and_changes_nothing(tmp_path):
    cfg = write_config(tmp_path, image={"method": "srun"}, workloads="all",
                       hf_token_file=str(tmp_path / "tok"))
    (tmp_path / "tok").write_text("hf_secret_value\n")
    (tmp_path / "tok").chmod(0o600)
    proc = run_install(tmp_path, "--config", str(cfg), "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert "Dry run: nothing will be changed" in proc.stdout
    assert "srun --account=acct --partition=batch" in proc.stdout
    assert "hf_secret_value" not in proc.stdout + proc.stderr
    images = re.findall(r"\d+\. image:(\S+): import", proc.stdout)
    assert images and len(images) == len(set(images))  # each image once, shared by its recipes
    assert not (tmp_path / "install").exists()


# --- a real headless install -----------------------------------------------------------------

def test_headless_install_then_rerun(tmp_path):
    tok = tmp_path / "tok"
    tok.write_text("hf_secret_value\n")
    tok.chmod(0o600)
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
    assert again.stdout.count("already done, kept") == 9
    assert (tmp_path / "enroot.log").read_text().count("enroot import") == 1


def test_resumes_after_an_interrupted_step(tmp_path):
    cfg = write_config(tmp_path)
    env = install_env(tmp_path)
    env["ENROOT_SHIM_FAIL"] = "1"  # the image step fails after the venv steps succeeded
    first = run_install(tmp_path, "--config", str(cfg), env=env)
    assert first.returncode == 1
    assert "image import failed" in first.stderr.strip().splitlines()[-1]
    state = json.loads((tmp_path / "install" / INSTALL_STATE_FILE).read_text())
    assert list(state["setup"]) == ["pretrain_nemotron4"]
    second = run_install(tmp_path, "--config", str(cfg))
    assert second.returncode == 0, second.stderr
    assert "Resuming: 3 of 6 steps already done (checked on disk)" in second.stdout
    assert second.stdout.count("already done, kept") == 3
    assert (tmp_path / "install" / "cluster_config.yaml").exists()


def test_creates_a_real_venv_per_workload(tmp_path):
    req = empty_requirements(tmp_path)
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
    found = {"partitions": [slurmquery.Partition("batch", True, "gpu:h100:8"),
                            slurmquery.Partition("cpu", False, "")],
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
    plan = cli.interactive_plan(input_fn, lambda _p: next(secrets), {}, found)
    out = capsys.readouterr().out
    offered = [c.name for c in prompts.workload_choices("h100", "slurm")]
    assert (f"pretrain_gpt3 is not one of: {', '.join(offered)} (or their numbers "
            f"1-{len(offered)}, or all)") in out
    assert "nobody is not one of: bench, other (or their numbers 1-2)" in out
    assert "hf_typed_secret" not in out
    assert plan.workloads == ["pretrain_llama3.1"]
    assert plan.slurm == {"account": "bench", "partition": "batch", "gres": "gpu:8",
                          "cpu_partition": "cpu"}
    assert plan.image["method"] == "srun" and plan.hf_token == "hf_typed_secret"
    assert any("GPU type" in q and "default: h100" in q for q in asked)


def test_interactive_typed_fallback_when_discovery_failed(tmp_path):
    input_fn, _ = answers(str(tmp_path / "i"), "slurm", "b200", "all", "", "myacct", "", "gpu",
                          "none", "local", "venv", "no")
    with pytest.raises(cli.InstallError, match="cancelled; nothing was changed"):
        cli.interactive_plan(input_fn, lambda _p: "", {}, {"partitions": None,
                                                                  "accounts": None})
    assert not (tmp_path / "i").exists()


def test_input_ending_is_a_clear_error():
    def eof(_prompt: str) -> str:
        raise EOFError

    with pytest.raises(cli.InstallError, match="no answer to 'Install directory"):
        cli.interactive_plan(eof, eof, {}, {"partitions": None, "accounts": None})


def test_discovery_on_a_cluster_without_accounting(monkeypatch, capsys):
    def no_accounting(_user):
        raise slurmquery.SlurmUnavailable("sacctmgr failed: You are not running a supported "
                                     "accounting_storage plugin")

    monkeypatch.setattr(slurmquery, "partitions",
                        lambda: [slurmquery.Partition("batch", True, "gpu:8")])
    monkeypatch.setattr(slurmquery, "accounts", no_accounting)
    found = cli.discover("root")
    assert found["accounts"] is None and found["partitions"][0].gpus == 8
    assert "cannot list accounts: sacctmgr failed" in capsys.readouterr().out


def test_partition_gres_parsing():
    assert slurmquery.Partition("p", False, "gpu:h100:8(S:0-1)").gpus == 8
    assert slurmquery.Partition("p", False, "gpu:h100:8(S:0-1)").gpu_model == "h100"
    assert slurmquery.Partition("p", False, "").gpus == 0
    assert slurmquery.Partition("p", False, "gpu:4").gpu_model is None


@pytest.mark.e2e
def test_discovery_against_the_real_test_cluster(slurm_cluster, monkeypatch):
    for key, value in slurm_cluster.items():
        monkeypatch.setenv(key, value)
    parts = slurmquery.partitions()
    assert [(p.name, p.default, p.gpus) for p in parts] == [("batch", True, 8)]
    with pytest.raises(slurmquery.SlurmUnavailable, match="sacctmgr"):
        slurmquery.accounts("root")  # the test cluster has no accounting: typed fallback


# --- interrupted and changed installs are checked on disk -----------------------------------

SCRATCH = REPO / "build" / "test-requirements"  # inside the repository (git ignores build/)


@pytest.fixture(autouse=True)
def _scratch_requirements():
    yield
    if SCRATCH.is_dir():
        for made in SCRATCH.glob(f"*-{os.getpid()}.txt"):
            made.unlink()


def empty_requirements(tmp_path: Path) -> str:
    """An empty requirements file inside the repository (the installer refuses one outside),
    relative to it, for installs that should pip-install nothing."""
    SCRATCH.mkdir(parents=True, exist_ok=True)
    empty = SCRATCH / f"{tmp_path.name}-{os.getpid()}.txt"
    empty.write_text("")
    return os.path.relpath(empty, REPO)


def test_a_venv_killed_midway_is_detected_and_rebuilt(tmp_path):
    """SIGKILL the installer while `python -m venv` runs (bin/python exists, pip does not yet):
    the rerun finds no completion marker, rebuilds the venv and installs into it."""
    cfg = write_config(tmp_path, image={"method": "skip"},
                       venv={"kind": "venv", "python": sys.executable,
                             "requirements": [empty_requirements(tmp_path)]})
    venv = tmp_path / "install" / "venvs" / "pretrain_nemotron4"
    proc = subprocess.Popen(["bash", str(INSTALL_SH), "--config", str(cfg)],
                            env=install_env(tmp_path), stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.monotonic() + 120
    while not (venv / "bin" / "python").exists():
        assert proc.poll() is None and time.monotonic() < deadline, "no venv was started"
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    # what the disk holds now: a python, no pip, no marker (a rerun used to trust bin/python)
    assert not (venv / steps.VENV_MARKER).exists()
    pip = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "--version"],
                         capture_output=True, timeout=60)
    assert pip.returncode != 0, "the kill came after pip was installed: not midway"
    again = run_install(tmp_path, "--config", str(cfg))
    assert again.returncode == 0, again.stderr
    assert f"{venv} is incomplete" in again.stdout and "rebuilding it" in again.stdout
    assert (venv / steps.VENV_MARKER).is_file()
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "--version"], check=True,
                   capture_output=True, timeout=60)
    third = run_install(tmp_path, "--config", str(cfg))
    assert third.returncode == 0 and third.stdout.count("already done, kept") == 5


def test_rerun_follows_the_disk_not_a_record(tmp_path):
    """A changed token is written; a deleted llmb-run or cluster_config.yaml, a broken image
    are made again; a changed requirement reruns setup; the rest is kept."""
    tok = tmp_path / "tok"
    tok.write_text("hf_first_token_value\n")
    tok.chmod(0o600)
    req = empty_requirements(tmp_path)
    cfg = write_config(tmp_path, workloads=["pretrain_llama3.1"], hf_token_file=str(tok),
                       venv={"reuse": str(DEV_VENV), "requirements": [req]})
    assert run_install(tmp_path, "--config", str(cfg)).returncode == 0
    root = tmp_path / "install"
    tok.write_text("hf_second_token_value\n")
    (root / "llmb-run").unlink()
    (root / "cluster_config.yaml").unlink()
    (root / "images" / "nvidia+nemo+25.04.01.sqsh").write_text("truncated")
    (REPO / req).write_text("# changed\n")
    again = run_install(tmp_path, "--config", str(cfg))
    assert again.returncode == 0, again.stderr
    redone = [line.split(":")[0].split("] ")[1] for line in again.stdout.splitlines()
              if line.startswith("[") and "already done" not in line]
    assert redone == ["hf_token", "setup", "image", "cluster_config", "llmb_run"], again.stdout
    assert (root / ".hf_token").read_text() == "hf_second_token_value\n"
    assert (root / "llmb-run").exists() and (root / "cluster_config.yaml").exists()
    assert (root / "images" / "nvidia+nemo+25.04.01.sqsh").read_bytes()[:4] == b"hsqs"
    assert "Installed." in again.stdout


def test_files_holding_values_are_private(tmp_path):
    cfg = write_config(tmp_path, env={"NCCL_DEBUG": "WARN"})
    assert run_install(tmp_path, "--config", str(cfg)).returncode == 0
    root = tmp_path / "install"
    for name, mode in (("cluster_config.yaml", 0o600), (INSTALL_STATE_FILE, 0o600),
                       ("llmb-run", 0o700)):
        assert stat.S_IMODE((root / name).stat().st_mode) == mode, name


def test_the_llmb_run_wrapper_quotes_what_it_embeds(tmp_path):
    """Written for a path no installer would accept (`$(...)`, quotes, a space): the wrapper
    still hands it over as it is and runs nothing (the target is a stand-in that prints)."""
    odd = "/x/y $(touch pwned) \"d\" 'q' `id` $HOME"
    plan = cli.Plan(install_path=odd, cluster_type="slurm", gpu_type="h100",
                          workloads=["pretrain_nemotron4"])
    text = steps.llmb_run_text(plan, "/opt/py $(touch pwned)/python")
    text = text.replace(shlex.quote(str(REPO / "installer" / "llmb-run")),
                        "printf '%s\\n' \"$LLMB_INSTALL\" \"$LLMB_PYTHON\"")
    wrapper = tmp_path / "llmb-run"
    wrapper.write_text(text)
    env = {k: v for k, v in os.environ.items() if k not in ("LLMB_INSTALL", "LLMB_PYTHON")}
    out = subprocess.run(["bash", str(wrapper)], capture_output=True, text=True, cwd=tmp_path,
                         env=env, check=True).stdout
    assert out == f"{odd}\n/opt/py $(touch pwned)/python\n"
    assert not (tmp_path / "pwned").exists()


@pytest.mark.parametrize(("env", "message"), [
    ({"MY_PASSWD": "x"}, "env.MY_PASSWD looks like a secret (by its name)"),
    ({"NGC_CREDENTIAL": "x"}, "env.NGC_CREDENTIAL looks like a secret (by its name)"),
    ({"WANDB_API_KEY": "x"}, "env.WANDB_API_KEY looks like a secret"),
    ({"SOME_SETTING": "--token=hf_token_value_123"}, "env.SOME_SETTING holds the value of a "
     "secret"),
    ({"1BAD": "x"}, "env: 1BAD is not a variable name"),
    ({"LIST": [1, 2]}, "env LIST=[1, 2] must be a text or number value"),
    ({"NL": "a\nb"}, "env NL=a\\nb contains control character(s)"),
])
def test_no_secret_reaches_cluster_config(tmp_path, env, message):
    proc = run_install(tmp_path, "--config", str(write_config(tmp_path, env=env)),
                       env={**install_env(tmp_path), "HF_TOKEN": "hf_token_value_123"})
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]
    assert message in proc.stderr and "hf_token_value_123" not in proc.stderr
    assert not (tmp_path / "install").exists()


def test_a_config_that_is_not_utf8(tmp_path):
    bad = tmp_path / "latin1.yaml"
    bad.write_bytes("install_path: /tmp/caf\xe9\n".encode("latin-1"))
    proc = run_install(tmp_path, "--config", str(bad))
    assert proc.returncode == 1
    assert proc.stderr == (f"llmb-install: --config {bad} is not UTF-8 text (byte 0xe9 at "
                           "offset 22); save it as UTF-8\n")


def test_an_install_path_that_cannot_be_created(tmp_path):
    """Caught by the dry run too, before anything is written."""
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    for path, problem in ((a_file / "llmb", f"{a_file} is a file, not a directory"),
                          (a_file, f"{a_file} is a file, not a directory")):
        for extra in ((), ("--dry-run",)):
            proc = run_install(tmp_path, "--config",
                               str(write_config(tmp_path, install_path=str(path))), *extra)
            assert proc.returncode == 1, proc.stdout
            assert proc.stderr == (f"llmb-install: install_path={path} cannot be used: "
                                   f"{problem}\n")


def test_an_install_path_this_user_cannot_write(tmp_path):
    """A directory where creating fails though the mode bits allow it (root under /proc):
    the probe says so, in one line, also for --dry-run."""
    for extra in ((), ("--dry-run",)):
        proc = run_install(tmp_path, "--config",
                           str(write_config(tmp_path, install_path="/proc/llmb")), *extra)
        assert proc.returncode == 1, proc.stdout
        assert proc.stderr.startswith("llmb-install: install_path=/proc/llmb cannot be used: "
                                      "/proc is not writable by ")
        assert proc.stderr.count("\n") == 1
    assert not [p for p in os.listdir("/proc") if p.startswith(".llmb")]


def test_end_of_input_at_the_token_prompt(tmp_path):
    """stdin ends where the (not echoed) token is asked: one line, no traceback."""
    input_fn, _ = answers(str(tmp_path / "i"), "slurm", "h100", "pretrain_llama3.1", "acct",
                          "batch", "none", "local", "venv")

    def eof(_prompt: str) -> str:
        raise EOFError

    with pytest.raises(cli.InstallError) as info:
        cli.interactive_plan(input_fn, eof, {}, {"partitions": None, "accounts": None})
    assert str(info.value) == ("no answer to 'HuggingFace token for Llama 3.1 (HF_TOKEN, not "
                               "echoed)' (input ended)")
    assert not (tmp_path / "i").exists()


def test_a_token_that_cannot_be_one_is_asked_again(capsys):
    typed = iter(["true", "hf_x", "hf_a_real_looking_token"])
    token = prompts.ask_secret(lambda _p: next(typed), "token", "the token")
    assert token == "hf_a_real_looking_token"
    out = capsys.readouterr().out
    assert "the token is a yes/no word" in out and "the token is 4 characters long" in out
    assert "true" not in out.replace("yes/no", "")


BAD_FIELDS = [
    ({"venv": {"reuse": str(DEV_VENV), "pip_args": "--no-index"}},
     "venv.pip_args must be a list, e.g. [--no-index, --find-links, /wheels]; got a string "
     "--no-index"),
    ({"venv": {"reuse": str(DEV_VENV), "pip_args": ["--find-links /wheels"]}},
     "venv.pip_args[0]=--find-links /wheels contains a space"),
    ({"venv": {"reuse": str(DEV_VENV), "requirements": "common/requirements/launch.txt"}},
     "venv.requirements must be a list, e.g. [common/requirements/launch.txt]; got a string"),
    ({"venv": {"reuse": str(DEV_VENV), "system_site_packages": "sometimes"}},
     "venv.system_site_packages=sometimes is not a boolean"),
    ({"venv": {"kind": "venv", "python": "/no/such/python3"}},
     "venv.python=/no/such/python3 is not an executable Python"),
    ({"image": {"method": "srun", "time_limit": "forever"}},
     "image.time_limit=forever is not a Slurm time"),
    ({"slurm": {"account": "acct\n#SBATCH --x", "partition": "batch"}},
     "slurm.account=acct\\n#SBATCH --x contains control character(s) \\n"),
    ({"slurm": {"account": "a$(id)", "partition": "batch"}},
     "slurm.account=a$(id) contains $ ( ), which a Slurm account name cannot hold"),
    ({"slurm": {"account": "a", "partition": "b", "gres": "8"}},
     "slurm.gres=8 is not a GPU GRES request"),
    ({"install_path": "/tmp/x $(touch pwned)"},
     "install_path=/tmp/x $(touch pwned) contains a space $ ( ), which a job path cannot hold"),
    ({"workloads": "pretrain_nemotron4"}, "workloads must be a list, e.g. [pretrain_nemotron4] "
     "or all; got a string"),
    ({"gpu_type": ["h100"]}, "gpu_type must be a string; got a list"),
    ({"slurm": "acct"}, "slurm must be a mapping of settings; it holds text of 4 characters "
     "(not shown)"),
]


@pytest.mark.parametrize(("over", "message"), BAD_FIELDS, ids=[m[:40] for _, m in BAD_FIELDS])
def test_every_field_is_checked_up_front(tmp_path, over, message):
    for extra in ((), ("--dry-run",)):
        proc = run_install(tmp_path, "--config", str(write_config(tmp_path, **over)), *extra)
        assert proc.returncode == 1
        assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("llmb-install: ")
        assert message in proc.stderr, proc.stderr
        assert not (tmp_path / "install").exists() and not (tmp_path / "enroot.log").exists()
        assert not list(tmp_path.rglob("pwned"))


# --- the installer refuses what llmb-run would then refuse ---------------------------------------

ACCEPTED_BEFORE = [
    ({"env": {"MODEL_SIZE": "70b"}}, "env MODEL_SIZE=70b: llmb-run sets MODEL_SIZE itself"),
    ({"env": {"DRY_RUN": "true"}}, "env DRY_RUN=true: llmb-run sets DRY_RUN itself"),
    ({"env": {"SBATCH_RESERVATION": "r"}}, "SBATCH_RESERVATION=r is set"),
    ({"env": {"BASH_ENV": "/tmp/x"}}, "env BASH_ENV cannot be set for a run"),
    ({"env": {"NOTE": "hf_" + "A1b2" * 9}}, "env.NOTE holds a token-shaped string"),
    ({"env": {"URL": "https://user:hunter2pass@host/x"}},
     "env.URL holds a password in a URL"),
    ({"venv": {"reuse": str(DEV_VENV), "requirements": ["/etc/hostname"]}},
     "venv.requirements[0]=/etc/hostname is outside the repository"),
    ({"venv": {"reuse": str(DEV_VENV), "requirements": ["../../etc/hostname"]}},
     "venv.requirements[0]=../../etc/hostname is outside the repository"),
    ({"venv": {"reuse": str(DEV_VENV), "requirements": ["common/requirements"]}},
     "venv.requirements[0]=common/requirements cannot be read (Is a directory)"),
]


@pytest.mark.parametrize(("over", "message"), ACCEPTED_BEFORE,
                         ids=[m.split()[0] for _, m in ACCEPTED_BEFORE])
def test_refuses_what_llmb_run_refuses(tmp_path, over, message):
    proc = run_install(tmp_path, "--config", str(write_config(tmp_path, **over)), "--dry-run")
    assert proc.returncode == 1, proc.stdout
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]
    assert message in proc.stderr
    assert not (tmp_path / "install").exists()


def test_a_key_given_twice_is_refused(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text(write_config(tmp_path).read_text() + "gpu_type: b200\n")
    proc = run_install(tmp_path, "--config", str(config), "--dry-run")
    assert proc.returncode == 1
    assert proc.stderr.startswith(f"llmb-install: --config {config}: the key gpu_type is given "
                                  "twice (lines ")


# --- a SIGTERM stops what the installer started -----------------------------------------------

def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat_file = Path(f"/proc/{pid}/stat")  # a zombie counts as gone
    return not (stat_file.exists() and stat_file.read_text().split(") ")[-1].startswith("Z"))


def test_sigterm_stops_pip_and_what_it_started(tmp_path):
    """SIGTERM to install.sh while setup.sh's pip runs: pip (here a test double whose
    grandchild keeps writing, as a building pip does) is stopped with it, not left writing
    into the venv the next run rebuilds."""
    venv = tmp_path / "fakevenv"
    (venv / "bin").mkdir(parents=True)
    pidfile = tmp_path / "grandchild.pid"
    python = venv / "bin" / "python"
    python.write_text(
        "#!/usr/bin/env bash\n"
        "# pip double: `-m pip install` starts a grandchild that writes on; the rest is python\n"
        f'if [[ "$1 $2 $3" == "-m pip install" ]]; then\n'
        f"    (while :; do date >> {shlex.quote(str(tmp_path / 'written'))}; sleep 0.2; done) &\n"
        f"    echo $! > {shlex.quote(str(pidfile))}\n"
        "    wait\n"
        "fi\n"
        f'exec {shlex.quote(sys.executable)} "$@"\n')
    python.chmod(0o755)
    cfg = write_config(tmp_path, image={"method": "skip"},
                       venv={"reuse": str(venv), "requirements": [empty_requirements(tmp_path)]})
    proc = subprocess.Popen(["bash", str(INSTALL_SH), "--config", str(cfg)],
                            env=install_env(tmp_path), stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not pidfile.exists() or not pidfile.read_text().strip():
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
        time.sleep(0.05)
    grandchild = int(pidfile.read_text())
    os.kill(proc.pid, signal.SIGTERM)  # install.sh execs the installer's python: this is it
    _, err = proc.communicate(timeout=60)
    try:
        assert proc.returncode != 0
        assert "Traceback" not in err
        time.sleep(0.5)
        assert not alive(grandchild), "pip's grandchild outlived the installer"
        size = (tmp_path / "written").stat().st_size
        time.sleep(1)
        assert (tmp_path / "written").stat().st_size == size
    finally:
        if alive(grandchild):
            os.kill(grandchild, signal.SIGKILL)


def test_a_reader_that_went_away_is_141_and_silent(tmp_path):
    """`install.sh --config FILE --dry-run | head`: 141 and no traceback."""
    cfg = write_config(tmp_path)
    proc = into_closed_pipe(["bash", str(INSTALL_SH), "--config", str(cfg), "--dry-run"],
                            env=install_env(tmp_path))
    assert (proc.returncode, proc.stderr) == (141, "")


def test_an_error_keeps_its_own_status(tmp_path):
    """Any LlmbError ends the installer with its own status (not 1 whatever it says)."""
    proc = failing_front("llmb.install.cli", "plan_from_config", 7,
                         ["--config", str(tmp_path / "config.yaml")])
    assert (proc.returncode, proc.stderr) == (7, f"llmb-install: {PROBE_MESSAGE}\n")
