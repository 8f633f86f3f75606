"""`install.sh --record FILE`: the interactive installer, driven through a real pseudo-terminal
(the pty module), writes a commented config file that `--config FILE --dry-run` plans exactly as
the questions did, with the Hugging Face token nowhere in it; every bad --record value is one
line before a question is asked. sinfo and sacctmgr are test doubles that answer the discovery
questions as a cluster with a GPU and a CPU partition would (discovery against the real test
cluster: tests/install/test_cli.py)."""

from __future__ import annotations

import os
import select
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from llmb.install import prompts, record, steps
from llmb.install.cli import plan_from_config, recorded_answers, validate_plan
from llmb.install.fields import InstallError
from paths import REPO

INSTALL_SH = REPO / "installer" / "install.sh"
TOKEN = "hf_RecordedNowhere0123456789abcdef"


def discovery(tmp_path: Path) -> Path:
    """sinfo and sacctmgr doubles: partitions batch (default, 8 H100 per node) and cpu."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, lines in (("sinfo", ("batch*|gpu:h100:8|up", "cpu|(null)|up")),
                        ("sacctmgr", ("bench", "other"))):
        quoted = " ".join(f"'{line}'" for line in lines)
        (bin_dir / name).write_text(f"#!/bin/sh\nprintf '%s\\n' {quoted}\n")
        (bin_dir / name).chmod(0o755)
    return bin_dir


def environ(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("HF_TOKEN", "LLMB_INSTALL", "VIRTUAL_ENV", "STAGE_PATH")
           and not k.startswith(("SBATCH_", "SLURM_"))}
    env.update(PATH=f"{discovery(tmp_path)}:{Path(sys.executable).parent}:/usr/bin:/bin",
               LLMB_PYTHON=sys.executable, TERM="dumb", HOME=str(tmp_path), **extra)
    return env


class Terminal:
    """A command on a new pseudo-terminal, answered prompt by prompt."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.main, child = os.openpty()
        self.proc = subprocess.Popen(argv, stdin=child, stdout=child, stderr=child, env=env,
                                     start_new_session=True)
        os.close(child)
        self.text = ""
        self.seen = 0

    def _read(self, timeout: float) -> bool:
        ready, _, _ = select.select([self.main], [], [], timeout)
        if not ready:
            return True
        try:
            chunk = os.read(self.main, 65536)
        except OSError:  # EIO: the command closed the terminal
            return False
        self.text += chunk.decode(errors="replace").replace("\r\n", "\n")
        return bool(chunk)

    def answer(self, prompt: str, reply: str, timeout: float = 60) -> None:
        """Wait for `prompt` (after what was answered already), then type `reply` + Enter."""
        deadline = time.monotonic() + timeout
        while prompt not in self.text[self.seen:]:
            assert time.monotonic() < deadline and self._read(0.2), (
                f"no prompt {prompt!r}; the terminal shows:\n{self.text[-3000:]}")
        self.seen = self.text.index(prompt, self.seen) + len(prompt)
        os.write(self.main, reply.encode() + b"\n")

    def finish(self, timeout: float = 120) -> int:
        deadline = time.monotonic() + timeout
        while self._read(0.2) and time.monotonic() < deadline:
            if self.proc.poll() is not None and not select.select([self.main], [], [], 0)[0]:
                break
        os.close(self.main)
        return self.proc.wait(timeout=10)


def plan_block(text: str, header: str) -> list[str]:
    return text.split(header, 1)[1].strip().splitlines()


def test_recorded_answers_replay_to_the_same_plan_without_the_token(tmp_path):
    token_file = tmp_path / "hf-token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)
    recorded = tmp_path / "cluster-a.yaml"
    env = environ(tmp_path)
    term = Terminal(["bash", str(INSTALL_SH), "--record", str(recorded)], env)
    term.answer("Install directory (LLMB_INSTALL, on a shared file system) (default: ",
                str(tmp_path / "llmb"))
    term.answer("Cluster type (a number or a name) (default: slurm): ", "1")
    term.answer("GPU type (a number or a name) (default: h100): ", "")
    offered = [c.name for c in prompts.workload_choices("h100", "slurm")]
    term.answer("Workloads to install (numbers or names, or all) (default: all): ",
                str(len(offered) + 1))
    term.answer(f"  {len(offered) + 1} is not one of: {', '.join(offered)} (or their numbers "
                f"1-{len(offered)}, or all)", "1, pretrain_nemotron4")
    term.answer("Slurm account (a number or a name) (default: bench): ", "2")
    term.answer("GPU partition (a number or a name) (default: batch): ", "")
    term.answer("GPU GRES request per node (none: the cluster needs none) (default: gpu:8): ",
                "")
    term.answer("Where to import the image (a number or a name) (default: srun): ", "2")
    term.answer("Partition for the image import (CPU nodes are fine) (a number or a name) "
                "(default: cpu): ", "cpu")
    term.answer("Python environment kind (a number or a name) (default: venv): ", "1")
    term.answer("File holding the Hugging Face token (default: ", str(token_file))
    assert term.finish() == 0, term.text
    shown = term.text
    # the numbered lists and their descriptions, from the data
    assert "   1) h100   8 GPUs per node, x86_64, 989/1979 dense TFLOPS per GPU (BF16/FP8)" \
        in shown
    width = max(map(len, offered))  # the names' column
    assert (f"   1) {'pretrain_llama3.1':<{width}}  Llama 3.1 8b, 70b, 405b on h100; needs a "
            "Hugging Face token") in shown
    assert "   1) batch  the default, 8 GPUs per node (gpu:h100:8)" in shown
    assert "   2) srun   enroot on a compute node" in shown
    assert f"Recorded the answers in {recorded}" in shown

    content = recorded.read_text()
    assert TOKEN not in content and TOKEN not in shown
    assert stat.S_IMODE(recorded.stat().st_mode) == 0o600
    assert "# The Hugging Face token is not in this file: the install reads it from " \
           "hf_token_file below." in content
    data = yaml.safe_load(content)
    assert data == {
        "install_path": str(tmp_path / "llmb"), "cluster_type": "slurm", "gpu_type": "h100",
        "workloads": ["pretrain_llama3.1", "pretrain_nemotron4"],
        "slurm": {"account": "other", "partition": "batch", "cpu_partition": "cpu",
                  "gres": "gpu:8"},
        "venv": {"kind": "venv"}, "image": {"method": "srun"},
        "hf_token_file": str(token_file), "env": {}}
    assert not (tmp_path / "llmb").exists()  # nothing installed

    replay = subprocess.run(["bash", str(INSTALL_SH), "--config", str(recorded), "--dry-run"],
                            env=env, capture_output=True, text=True, timeout=120,
                            stdin=subprocess.DEVNULL)
    assert replay.returncode == 0, replay.stderr
    assert plan_block(replay.stdout, "The plan:") == plan_block(shown, "The plan it replays:")
    assert "HF_TOKEN          : provided (stored 0600)" in replay.stdout
    assert TOKEN not in replay.stdout + replay.stderr


def test_a_token_in_the_environment_is_named_not_written(tmp_path):
    """HF_TOKEN exported: not asked; the file says the replay reads HF_TOKEN."""
    replies = iter([str(tmp_path / "llmb"), "slurm", "h100", "pretrain_llama3.1", "acct",
                    "batch", "none", "local", "venv"])
    answers = recorded_answers(lambda _q: next(replies), {"HF_TOKEN": TOKEN},
                               {"partitions": None, "accounts": None})
    content = record.text(answers)
    assert TOKEN not in content and "hf_token_file" not in content
    assert "the install reads it from HF_TOKEN, exported in the shell that runs the " \
           "installer" in content
    path = tmp_path / "a.yaml"
    record.write(answers, path)
    replayed = plan_from_config(path, {"HF_TOKEN": TOKEN})
    assert replayed == answers.plan
    with pytest.raises(InstallError, match=r"HF_TOKEN is required for pretrain_llama3\.1"):
        plan_from_config(path, {})


@pytest.mark.parametrize(("args", "message"), [
    (["--record", ""], "--record needs a file name"),
    (["--record", "{existing}"], "--record {existing} already exists; give a new file name"),
    (["--record", "{tmp}"], "--record {tmp} is a directory, not a file"),
    (["--record", "{tmp}/no/such/a.yaml"], "--record {tmp}/no/such/a.yaml: its folder does not "
     "exist"),
    (["--record", "{tmp}/a\nb.yaml"], "--record={tmp}/a\\nb.yaml contains control character"),
    (["--record", "{tmp}/a.yaml", "--dry-run"], "--record asks the questions and writes FILE; "
     "it does not go with --config or --dry-run"),
    (["--record"], "argument --record: expected one argument; see install.sh --help"),
    (["--record", "{tmp}/a.yaml", "--colour"], "unrecognized arguments: --colour"),
    (["--record", "{tmp}/a.yaml"], "stdin is not a terminal, so there is no one to answer the "
     "prompts; run it in a terminal or record answers there and replay them with --config"),
])
def test_a_bad_record_value_is_one_line_before_any_question(tmp_path, args, message):
    existing = tmp_path / "existing.yaml"
    existing.write_text("keep me\n")
    fill = {"tmp": str(tmp_path), "existing": str(existing)}
    proc = subprocess.run(["bash", str(INSTALL_SH), *(a.format(**fill) for a in args)],
                          env=environ(tmp_path), capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode in (1, 2) and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("llmb-install: ")
    assert message.format(**fill) in proc.stderr
    assert existing.read_text() == "keep me\n"
    assert not (tmp_path / "a.yaml").exists()


def test_the_recorded_file_reads_back_whatever_characters_a_value_holds(tmp_path):
    plan = steps.Plan(install_path=str(tmp_path / "@x=y+z"), cluster_type="slurm",
                      gpu_type="h100", workloads=["pretrain_nemotron4"],
                      slurm={"account": "a-b", "partition": "p.q", "gres": None},
                      venv={"kind": "venv"}, image={"method": "local"})
    plan = validate_plan(plan, {})
    data = yaml.safe_load(record.text(prompts.Answers(plan)))
    assert data["install_path"] == str(tmp_path / "@x=y+z")  # `@` cannot start a YAML word
    assert data["slurm"]["gres"] is None
