"""The installer (install.sh --config, --record, the questions) against what a careless colleague
or a mistyped answer gives it: aliases that expand without bound, a token where a file is asked,
a token file or /etc/shadow given as the config, a token file others can read, fields of
megabytes, a workload named twice, a number-looking account, a --record folder that cannot be
written. Each is one line that names the field and shows at most a prefix of the value and its
length, never a token or a file's content, before anything is written."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from deadline import deadline
from llmb.install import prompts
from paths import REPO
from runinstall import llmb_run_env

INSTALL_SH = REPO / "installer" / "install.sh"
TOKEN = "hf_" + "Q" * 34


def config(tmp_path: Path, **over: Any) -> dict[str, Any]:
    return {"install_path": str(tmp_path / "install"), "gpu_type": "h100",
            "workloads": ["pretrain_nemotron4"], "slurm": {"account": "acct", "partition": "b"},
            "venv": {"reuse": sys.prefix}, "image": {"method": "skip"}, **over}


def install(tmp_path: Path, *args: str, limit_mb: int = 1024) -> subprocess.CompletedProcess[str]:
    """install.sh ARGS under a memory cap, in a clean environment."""
    cmd = f"ulimit -v {limit_mb << 10}; exec bash {INSTALL_SH} \"$@\""
    return subprocess.run(["bash", "-c", cmd, "install", *args], env=llmb_run_env(),
                          capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)


def refused(proc: subprocess.CompletedProcess[str], message: str) -> None:
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert len(proc.stderr.splitlines()) == 1 and len(proc.stderr) < 600, proc.stderr[:600]
    assert message in proc.stderr, proc.stderr[:600]
    assert TOKEN not in proc.stdout + proc.stderr


def token_file(tmp_path: Path, mode: int = 0o600, text: str = TOKEN + "\n") -> Path:
    path = tmp_path / "hf-token"
    path.write_text(text)
    path.chmod(mode)
    return path


LAUGHS = "".join(f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]\n" for i in range(1, 8))

HOSTILE = [
    # aliases that expand without bound (the "billion laughs"), where a value is read
    ("laughs-env", lambda t: "l0: &l0 [x, x, x, x, x, x, x, x, x, x]\n" + LAUGHS
     + yaml.safe_dump(config(t))[:-1] + "\nenv: {A: *l7}\n",
     "expands, its aliases followed, to more than 1000000 values"),
    ("laughs-cluster-type", lambda t: "l0: &l0 [x, x, x, x, x, x, x, x, x, x]\n" + LAUGHS
     + yaml.safe_dump({**config(t)}) + "cluster_type: *l7\n",
     "expands, its aliases followed, to more than 1000000 values"),
    # fields of megabytes: bounded where they enter, a prefix and the length in the message
    ("gpu-type-3MB", lambda t: yaml.safe_dump(config(t, gpu_type="h" * 3_000_000)),
     "gpu_type=" + "h" * 60 + "... (3000000 characters) is longer than the 4096 characters"),
    ("account-1MB", lambda t: yaml.safe_dump(config(t, slurm={"account": "a" * 1_000_000,
                                                               "partition": "b"})),
     "slurm.account=" + "a" * 60 + "... (1000000 characters) is longer than the 4096"),
    ("env-300KB", lambda t: yaml.safe_dump(config(t, env={"NCCL_DEBUG": "W" * 300_000})),
     "env NCCL_DEBUG=" + "W" * 80 + "... (300000 characters) is longer than the 4096"),
    # programs Slurm runs and libraries NCCL loads, named by a setting
    ("task-prolog", lambda t: yaml.safe_dump(config(t, env={"SLURM_TASK_PROLOG": "/tmp/x"})),
     "env SLURM_TASK_PROLOG cannot be set for a run: srun runs the program it names"),
    ("nccl-plugin-path", lambda t: yaml.safe_dump(config(t, env={"NCCL_NET_PLUGIN": "/t/x.so"})),
     "env NCCL_NET_PLUGIN cannot be a path"),
    # secrets: a token where its file is asked, never printed back
    ("token-as-file", lambda t: yaml.safe_dump(config(t, workloads=["pretrain_llama3.1"],
                                                      hf_token_file=TOKEN)),
     "hf_token_file: that looks like a token, not a file: put it in a file only you can read"),
]


@pytest.mark.parametrize(("make", "message"), [(m, msg) for _, m, msg in HOSTILE],
                         ids=[k for k, _, _ in HOSTILE])
def test_a_hostile_config_is_one_short_line(tmp_path, make, message):
    path = tmp_path / "config.yaml"
    path.write_text(make(tmp_path))
    with deadline(60):
        proc = install(tmp_path, "--config", str(path), "--dry-run")
    refused(proc, message)
    assert not (tmp_path / "install").exists()


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604])
def test_a_token_file_others_can_read_is_refused_with_the_chmod_that_mends_it(tmp_path, mode):
    """As ssh refuses a private key group or others can read; replayed or recorded alike."""
    tok = token_file(tmp_path, mode)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config(tmp_path, workloads=["pretrain_llama3.1"],
                                          hf_token_file=str(tok))))
    refused(install(tmp_path, "--config", str(path), "--dry-run"),
            f"hf_token_file={tok} can be read by others (mode {mode:04o}); a token file must be "
            f"private: chmod 600 {tok}")
    assert prompts.token_file_check(str(tok)) == (
        f"{tok} can be read by others (mode {mode:04o}); a token file must be private: "
        f"chmod 600 {tok}")


def test_record_and_replay_hold_a_token_file_to_one_rule(tmp_path):
    """--record accepted a 5 KB token file that replay then refused."""
    tok = token_file(tmp_path, text=TOKEN + "\n" + "#" * 5000 + "\n")
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config(tmp_path, workloads=["pretrain_llama3.1"],
                                          hf_token_file=str(tok))))
    refused(install(tmp_path, "--config", str(path), "--dry-run"),
            f"hf_token_file={tok} is larger than 4096 bytes")
    assert prompts.token_file_check(str(tok)) == (
        f"{tok} is larger than 4096 bytes; it must hold the token only")


def test_a_token_typed_where_its_file_is_asked_is_never_printed_back(tmp_path):
    good = token_file(tmp_path)
    replies = iter([TOKEN, f"  {TOKEN}  ", str(good)])
    out = io.StringIO()
    answer = prompts.ask(lambda _q: next(replies), "File holding the Hugging Face token",
                         check=prompts.token_file_check, out=out)
    assert answer == str(good)
    assert TOKEN not in out.getvalue()
    assert out.getvalue().count("that looks like a token, not a file: put it in a file only you "
                                "can read (chmod 600 FILE)") == 2


def test_a_token_file_or_etc_shadow_given_as_the_config_is_never_printed(tmp_path):
    tok = token_file(tmp_path)
    refused(install(tmp_path, "--config", str(tok)),
            f"--config {tok} must be a mapping of settings; it holds text of 37 characters (not "
            "shown): is it the config file you meant?")
    shadow = tmp_path / "shadow"
    shadow.write_text("root:$y$j9T$Qx0S0nF3Rj9Pq1$V0dQkq3B6r0yJmK2xQm9VdH0fL4k5c6b7n8m9p0:19000:"
                      "0:99999:7:::\ndaemon:*:19000:0:99999:7:::\n")
    proc = install(tmp_path, "--config", str(shadow))
    refused(proc, f"--config {shadow} is not an installer config: none of its 2 key(s) is a "
            "setting (its content is not shown)")
    assert "root:" not in proc.stderr and "$y$" not in proc.stderr


def test_a_workload_named_twice_is_one_workload_and_a_hex_looking_account_is_text(tmp_path):
    text = yaml.safe_dump(config(tmp_path, workloads=["pretrain_nemotron4"] * 2))
    path = tmp_path / "config.yaml"
    path.write_text(text.replace("account: acct", "account: 0x10"))
    proc = install(tmp_path, "--config", str(path), "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert "Slurm             : account 0x10, partition b" in proc.stdout
    assert proc.stdout.count("setup:pretrain_nemotron4") == 1
    assert "Workloads         : pretrain_nemotron4\n" in proc.stdout


def test_record_into_a_folder_that_cannot_be_written_is_refused_before_the_first_question(
        tmp_path):
    """As root every access() check passes: the folder is probed by writing into it."""
    proc = install(tmp_path, "--record", "/proc/llmb-answers.yaml")
    refused(proc, "--record /proc/llmb-answers.yaml: its folder cannot be written")
    assert proc.stdout == "" and not os.path.exists("/proc/llmb-answers.yaml")


def test_what_sinfo_says_of_a_partition_is_shown_escaped():
    """A partition name sinfo prints with ANSI or OSC sequences (a retitled terminal, a forged
    line) is listed with its control characters escaped."""
    from llmb.shared import slurmquery

    out = io.StringIO()
    parts = [slurmquery.Partition("gpu\x1b]0;owned\x07", True, "gpu:h100:8"),
             slurmquery.Partition("cpu\nllmb-install: ok", False, "", True)]
    chosen = prompts.choose(lambda _q: "1", "GPU partition", prompts.partition_choices(parts),
                            None, out=out)
    assert chosen == ["gpu\x1b]0;owned\x07"]  # refused later by the Slurm name check
    assert "\x1b" not in out.getvalue() and "\x07" not in out.getvalue()
    assert "gpu\\x1b]0;owned\\x07" in out.getvalue() and "cpu\\nllmb-install: ok" in out.getvalue()
