"""`install.sh --record FILE`: the interactive answers written as a commented `--config` file.

The file holds the keys a config file has (docs/installer.md), each with a comment saying what
it is, so that `install.sh --config FILE` replays the same install on another cluster or
another day, and `--config FILE --dry-run` plans exactly what the questions planned. The
Hugging Face token is never written into it: the file says where the install will read it
from (`hf_token_file`, or HF_TOKEN in the installer's environment). Values are written as JSON
scalars and lists, which YAML reads back unchanged whatever characters they hold. The file is
created 0600 (it names your account and paths) and never replaces an existing one.
"""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path

from llmb.install.fields import InstallError, creatable_problem
from llmb.install.prompts import Answers
from llmb.recipes import catalog
from llmb.shared import files, values

COMMENT_COLUMN = 40


def check_path(value: str) -> Path:
    """Where --record may write: a new file in an existing, writable directory."""
    if not value.strip():
        raise InstallError("--record needs a file name, e.g. --record my-cluster.yaml")
    try:
        values.require_printable("--record", value)
    except values.BadValue as err:
        raise InstallError(str(err)) from None
    path = Path(os.path.expanduser(value)).absolute()
    problem = files.path_problem(path, "file")
    if problem is None:
        raise InstallError(f"--record {values.shown(path)} already exists; give a new file name "
                           "(recording never replaces a file)")
    if problem != "does not exist":
        raise InstallError(f"--record {values.shown(path)} {problem}")
    parent_problem = files.path_problem(path.parent, "directory")
    if parent_problem:
        raise InstallError(f"--record {values.shown(path)}: its folder {parent_problem}")
    writable = creatable_problem(path.parent)  # a probe: root on /proc, a read-only mount
    if writable:
        raise InstallError(f"--record {values.shown(path)}: its folder cannot be written "
                           f"({writable})")
    return path


def _line(key: str, value: object, comment: str, indent: str = "") -> str:
    text = f"{indent}{key}: {json.dumps(value)}"
    return f"{text.ljust(COMMENT_COLUMN)} # {comment}" if comment else text


def text(answers: Answers) -> str:
    """The config file for these answers, with its comments."""
    plan = answers.plan
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    token = ("hf_token_file below" if answers.token_file else
             "HF_TOKEN, exported in the shell that runs the installer")
    needs_token = any(catalog.find_recipe(w).data["requires_hf_token"] for w in plan.workloads)
    lines = [
        f"# llmb installer answers, recorded by install.sh --record on {platform.node()}, "
        f"{stamp}.",
        "# Replay: installer/install.sh --config THIS_FILE [--dry-run]; the keys are in "
        "docs/installer.md.",
        f"# The Hugging Face token is not in this file: the install reads it from {token}."
        if needs_token else "# No installed workload needs a Hugging Face token.",
        _line("install_path", plan.install_path, "LLMB_INSTALL: images/, venvs/, workloads/"),
        _line("cluster_type", plan.cluster_type,
              " | ".join(catalog.INSTALL_CLUSTER_TYPES)),
        _line("gpu_type", plan.gpu_type, " | ".join(catalog.gpu_types())),
        _line("workloads", plan.workloads, "or: all"),
    ]
    if plan.cluster_type == "slurm":
        s = plan.slurm
        lines += ["slurm:",
                  _line("account", s["account"], "sbatch --account", "  "),
                  _line("partition", s["partition"], "GPU partition of the benchmark jobs",
                        "  "),
                  _line("cpu_partition", s["cpu_partition"], "where image.method srun imports",
                        "  "),
                  _line("gres", s.get("gres"), "null: the jobs request no GPU GRES", "  ")]
    lines += ["venv:", _line("kind", plan.venv["kind"], "venv | conda: one per workload", "  "),
              "image:", _line("method", plan.image["method"], "local | srun | skip", "  ")]
    if answers.token_file:
        lines.append(_line("hf_token_file", answers.token_file,
                           "the token is read from this file (not recorded)"))
    lines.append(_line("env", plan.env or {}, "variables passed to every launch (no secrets)"))
    return "\n".join(lines) + "\n"


def write(answers: Answers, path: Path) -> None:
    """The file, 0600; never over an existing one (InstallError when one appeared meanwhile)."""
    content = text(answers)
    if answers.plan.hf_token and answers.plan.hf_token in content:
        raise InstallError("the recorded answers would hold the Hugging Face token; nothing "
                           "was written")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, files.PRIVATE)
    except OSError as exc:
        raise InstallError(f"--record {values.shown(path)}: cannot create it "
                           f"({exc.strerror})") from None
    with os.fdopen(fd, "w") as fh:
        fh.write(content)
