"""The installer's steps: each does its work and says, from the disk, whether it is done.

A rerun after an interruption, a changed config, a deleted file or a changed token does exactly
what the disk still lacks; nothing is counted as done because a record says so:

    layout            the directories exist
    hf_token          $LLMB_INSTALL/.hf_token holds this token, mode 0600
    venv:<w>          the venv's completion marker (written last, after its pip answered)
                      exists: a creation killed midway is detected and rebuilt
    setup:<w>         <recipe>/setup.sh installed these requirements into THIS venv (its
                      identity and the requirements' digest, recorded 0600 in
                      $LLMB_INSTALL/.llmb_install_state.json), and its sources step left the
                      recipe's pinned checkouts and Hugging Face configs on disk
                      (llmb.install.sources.present)
    image:<file>      a squashfs image (magic "hsqs") is at its final name
    cluster_config    cluster_config.yaml holds exactly this plan, mode 0600
    llmb_run          $LLMB_INSTALL/llmb-run is exactly this wrapper, mode 0700

Files that hold a user's values are owner-only (0600; the wrapper 0700).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

import yaml

from llmb import layout
from llmb.install import sources
from llmb.recipes import catalog, images
from llmb.shared import clock, files, progress, records
from llmb.shared.errors import LlmbError


@dataclass
class Plan:
    """What to install, as the config file or the questions gave it (validated by installer)."""

    install_path: str
    cluster_type: str
    gpu_type: str
    workloads: list[str]
    slurm: dict[str, str | None] = field(default_factory=dict)
    venv: dict[str, Any] = field(default_factory=dict)
    image: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    hf_token: str | None = field(default=None, repr=False)
    token_source: str = "HF_TOKEN"  # where the token came from, for messages

    @property
    def root(self) -> Path:
        return Path(self.install_path)

    @property
    def tree(self) -> layout.Install:
        return layout.Install(self.install_path)

    def venv_path(self, workload: str) -> Path:
        reuse = self.venv.get("reuse")
        return Path(reuse) if reuse else self.tree.venv(workload)


REPO = catalog.REPO_ROOT
STATE_SCHEMA = 2
VENV_MARKER = ".llmb_venv_complete"
WRAPPER_MODE = 0o700


class StepError(LlmbError):
    """A step failed; str(error) is one line for the user."""


@dataclass
class Step:
    name: str
    describe: str
    run: Callable[[], None]
    done: Callable[[], bool]


# --- helpers ---------------------------------------------------------------------------------

def _check_call(argv: list[str], env: Mapping[str, str] | None, what: str,
                quiet: bool = False) -> None:
    if quiet:
        returncode = subprocess.run(argv, env=env, check=False, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL).returncode
    else:  # a live progress line on a terminal, the command's own lines otherwise
        returncode = progress.run_command(argv, env, what)
    if returncode != 0:
        raise StepError(f"{what} failed (exit {returncode}): {shlex.join(argv)}")


MAX_OWN_FILE_BYTES = 1 << 20  # the files the installer writes: a few KB each


def _same_file(path: Path, text: str, mode: int) -> bool:
    """Whether path is a regular file holding exactly `text` with `mode` (a FIFO or a device
    planted at the name is not, and is never waited on)."""
    try:
        return (files.read_bounded(path, MAX_OWN_FILE_BYTES) == text.encode()
                and (path.stat().st_mode & 0o777) == mode)
    except (OSError, files.FileRefused):
        return False


def _recipe_dir(workload: str) -> Path:
    return catalog.find_recipe(workload).directory


def workload_image(plan: Plan, workload: str) -> images.Image:
    """The image the workload runs on the plan's GPU type (a recipe's gpu_overrides)."""
    return sources.resolve(_recipe_dir(workload), plan.gpu_type).image


def valid_image(path: Path) -> bool:
    """A non-empty squashfs file (setup.sh keeps such an image and imports nothing)."""
    try:
        return files.read_head(path, 4) == b"hsqs"
    except files.FileRefused:
        return False


# --- venvs -------------------------------------------------------------------------------------

def venv_complete(venv: Path) -> bool:
    return (venv / VENV_MARKER).is_file() and (venv / "bin" / "python").exists()


def venv_identity(venv: Path) -> str:
    """What a setup step was done for: the marker of a venv llmb built (a rebuilt venv gets a
    new one), or for a reused venv its path and its python's inode and change time."""
    try:
        return files.read_text(venv / VENV_MARKER, MAX_OWN_FILE_BYTES).strip()
    except files.FileRefused:
        pass
    try:
        st = (venv / "bin" / "python").stat()
    except OSError:
        return f"missing:{venv}"
    return f"external:{venv.resolve()}:{st.st_ino}:{st.st_ctime_ns}"


def create_venv(plan: Plan, workload: str) -> None:
    """Build the workload's venv; the marker written last says it is whole. A venv without
    the marker is what a killed creation leaves (bin/python and no pip): removed, rebuilt."""
    venv = plan.venv_path(workload)
    if venv.is_symlink() or venv.is_file():
        venv.unlink()
    elif venv.exists():
        print(f"  {venv} is incomplete (no {VENV_MARKER}: its creation was interrupted); "
              "rebuilding it", flush=True)
        shutil.rmtree(venv)
    if plan.venv["kind"] == "conda":
        _check_call(["conda", "create", "-y", "-q", "-p", str(venv),
                     f"python={sys.version_info.major}.{sys.version_info.minor}", "pip"],
                    None, "conda create")
    else:
        argv = [plan.venv["python"], "-m", "venv"]
        if plan.venv["system_site_packages"]:
            argv.append("--system-site-packages")
        _check_call([*argv, str(venv)], None, "python -m venv")
    python = venv / "bin" / "python"
    _check_call([str(python), "-m", "pip", "--version"], None, f"{python} -m pip", quiet=True)
    files.atomic_write(venv / VENV_MARKER, json.dumps(
        {"id": uuid.uuid4().hex, "created": clock.iso()}) + "\n")


def venv_env(plan: Plan, workload: str) -> dict[str, str]:
    """The environment of `<recipe>/setup.sh` with the workload's venv active."""
    env = dict(os.environ)
    venv = plan.venv_path(workload)
    env.pop("CONDA_PREFIX" if plan.venv["kind"] == "venv" else "VIRTUAL_ENV", None)
    env["VIRTUAL_ENV" if plan.venv["kind"] == "venv" else "CONDA_PREFIX"] = str(venv)
    env["PATH"] = f"{venv}/bin{os.pathsep}{env.get('PATH', '')}"
    env.pop("PYTHONHOME", None)
    env.pop("STAGE_PATH", None)
    env.update(LLMB_INSTALL=plan.install_path, LLMB_REPO=str(REPO), GPU_TYPE=plan.gpu_type,
               CLUSTER_TYPE=plan.cluster_type)
    return env


def requirements_digest(plan: Plan) -> str:
    """What the setup step installs: the requirement files' contents and the pip arguments."""
    h = hashlib.sha256()
    for req in plan.venv["requirements"]:
        h.update(req.encode() + b"\0" + files.read_bounded(REPO / req, MAX_OWN_FILE_BYTES)
                 + b"\0")
    h.update(json.dumps(plan.venv["pip_args"]).encode())
    return h.hexdigest()[:16]


# --- the state file: setup fingerprints only --------------------------------------------------

class InstallState(TypedDict, total=False):
    """.llmb_install_state.json: which venv each setup installed into (a cache: the disk
    decides whether a step is done, and a state that is not of this type is no state)."""

    schema: int
    setup: dict[str, str]  # workload -> setup_fingerprint


def load_state(root: Path) -> InstallState:
    try:
        state = json.loads(files.read_bounded(layout.Install(root).install_state,
                                              MAX_OWN_FILE_BYTES))
    except (files.FileRefused, ValueError, RecursionError):
        return {}
    try:
        checked = records.check(InstallState, state)
    except records.BadRecord:
        return {}  # hand-edited or damaged: every setup is checked again, as with none
    return checked if checked.get("schema") == STATE_SCHEMA else {}


def record_setup(root: Path, workload: str, fingerprint: str) -> None:
    state = load_state(root) or {"schema": STATE_SCHEMA}
    state.setdefault("setup", {})[workload] = fingerprint
    files.write_private(layout.Install(root).install_state,
                        json.dumps(state, indent=1, sort_keys=True) + "\n")


def setup_done(plan: Plan, workload: str) -> bool:
    """Whether the state records this workload's setup with its current fingerprint."""
    return bool(load_state(plan.root).get("setup", {}).get(workload)
                == setup_fingerprint(plan, workload)) and sources.present(
        sources.resolve(_recipe_dir(workload), plan.gpu_type), plan.root)


def setup_fingerprint(plan: Plan, workload: str) -> str:
    return f"{venv_identity(plan.venv_path(workload))}|{requirements_digest(plan)}"


# --- the files the installer writes ------------------------------------------------------------

def cluster_config(plan: Plan) -> dict[str, object]:
    """cluster_config.yaml (schema 1) for this plan, as llmb-run reads it."""
    return {
        "schema": 1,
        "llmb": {"repo": str(REPO), "install_path": plan.install_path},
        "launcher": {
            "cluster_type": plan.cluster_type,
            "gpu_type": plan.gpu_type,
            "slurm": dict(plan.slurm) if plan.cluster_type == "slurm" else None,
            "hf_token_file": str(plan.tree.hf_token) if plan.hf_token else None,
            "env": dict(plan.env),
        },
        "workloads": {
            w: {"recipe": catalog.find_recipe(w).directory.name,
                "venv": str(plan.venv_path(w)), "venv_kind": plan.venv["kind"],
                "image": str(plan.tree.image(workload_image(plan, w).file_name))
                if plan.image["method"] != "skip" else None}
            for w in plan.workloads
        },
    }


def cluster_config_text(plan: Plan) -> str:
    return ("# Written by the llmb installer; read by llmb-run. See docs/installer.md.\n"
            + yaml.safe_dump(cluster_config(plan), sort_keys=False))


def llmb_run_text(plan: Plan, python: str) -> str:
    """The $LLMB_INSTALL/llmb-run wrapper: every embedded value is shell-quoted."""
    return ("#!/usr/bin/env bash\n"
            "# llmb-run for this install (written by the llmb installer).\n"
            f"install_path={shlex.quote(plan.install_path)}\n"
            f"python={shlex.quote(python)}\n"
            'export LLMB_INSTALL="${LLMB_INSTALL:-${install_path}}"\n'
            'export LLMB_PYTHON="${LLMB_PYTHON:-${python}}"\n'
            f"exec {shlex.quote(str(REPO / 'installer' / 'llmb-run'))} \"$@\"\n")


def write_secret(path: Path, secret: str) -> None:
    """Owner-only from the first byte: created 0600, never world-readable in between."""
    path.parent.mkdir(parents=True, exist_ok=True)
    files.write_private(path, secret + "\n")


# --- the steps --------------------------------------------------------------------------------

def _image_argv(plan: Plan, workload: str) -> list[str]:
    setup = str(_recipe_dir(workload) / "setup.sh")
    if plan.image["method"] == "srun":
        return ["srun", f"--account={plan.slurm['account']}",
                f"--partition={plan.slurm['cpu_partition']}", "--nodes=1", "--ntasks=1",
                f"--time={plan.image['time_limit']}", "--job-name=llmb-image-import",
                "bash", setup]
    return ["bash", setup]


def image_describe(plan: Plan, workload: str, image: images.Image) -> str:
    return (f"import {image.enroot_uri} -> {plan.tree.image(image.file_name)} via "
            f"{shlex.join(_image_argv(plan, workload))}")


def build_steps(plan: Plan, python: str) -> list[Step]:
    root, tree = plan.root, plan.tree
    dirs = tree.dirs(plan.workloads)

    def make_dirs() -> None:
        for d in dirs:
            d.mkdir(parents=True, exist_ok=True)

    steps = [Step("layout", f"create {root}/{{images,datasets,venvs,workloads/<w>}}", make_dirs,
                  lambda: all(d.is_dir() for d in dirs))]
    if plan.hf_token:
        token = plan.hf_token
        steps.append(Step("hf_token", f"write {tree.hf_token} (mode 0600)",
                          lambda: write_secret(tree.hf_token, token),
                          lambda: _same_file(tree.hf_token, token + "\n", files.PRIVATE)))
    for w in plan.workloads:
        venv = plan.venv_path(w)
        if plan.venv.get("reuse"):
            steps.append(Step(f"venv:{w}", f"reuse {venv}", lambda: None,
                              (venv / "bin" / "python").exists))
        else:
            steps.append(Step(f"venv:{w}", f"create {plan.venv['kind']} {venv}",
                              functools.partial(create_venv, plan, w),
                              functools.partial(venv_complete, venv)))
        recipe_dir = _recipe_dir(w)

        def setup_venv(w: str = w, recipe_dir: Path = recipe_dir) -> None:
            env = venv_env(plan, w)
            env["LLMB_SETUP_STEPS"] = "venv,sources"
            env["LLMB_REQUIREMENTS"] = ":".join(str(REPO / r) for r in plan.venv["requirements"])
            env["LLMB_PIP_ARGS"] = " ".join(plan.venv["pip_args"])
            _check_call(["bash", str(recipe_dir / "setup.sh")], env, f"{recipe_dir.name}/setup.sh")
            record_setup(root, w, setup_fingerprint(plan, w))

        steps.append(Step(f"setup:{w}", f"{recipe_dir.name}/setup.sh (requirements into {venv})",
                          setup_venv, functools.partial(setup_done, plan, w)))
    seen: set[str] = set()
    for w in plan.workloads:
        image = workload_image(plan, w)
        if plan.image["method"] == "skip" or image.file_name in seen:
            continue
        seen.add(image.file_name)

        def import_image(w: str = w) -> None:
            env = venv_env(plan, w)
            env["LLMB_SETUP_STEPS"] = "image"
            _check_call(_image_argv(plan, w), env, "image import")

        target = tree.image(image.file_name)
        steps.append(Step(f"image:{image.file_name}", image_describe(plan, w, image),
                          import_image, functools.partial(valid_image, target)))
    config_text = cluster_config_text(plan)
    steps.append(Step("cluster_config", f"write {tree.config} (mode 0600)",
                      lambda: files.write_private(tree.config, config_text),
                      lambda: _same_file(tree.config, config_text, files.PRIVATE)))
    wrapper = llmb_run_text(plan, python)
    steps.append(Step("llmb_run", f"install {tree.wrapper}",
                      lambda: files.atomic_write(tree.wrapper, wrapper, WRAPPER_MODE),
                      lambda: _same_file(tree.wrapper, wrapper, WRAPPER_MODE)))
    return steps


def execute(steps: list[Step], out=None) -> None:
    """Run every step the disk says is not done; each must leave its result on the disk."""
    out = out or sys.stdout
    done = [s.name for s in steps if s.done()]
    if done:
        print(f"Resuming: {len(done)} of {len(steps)} steps already done (checked on disk)",
              file=out)
    for i, step in enumerate(steps, 1):
        if step.done():  # asked again: an earlier step may have changed what this one needs
            print(f"[{i}/{len(steps)}] {step.name}: already done, kept", file=out)
            continue
        print(f"[{i}/{len(steps)}] {step.name}: {step.describe}", file=out, flush=True)
        step.run()
        if not step.done():
            raise StepError(f"step {step.name} ran but its result is not on disk "
                            f"({step.describe})")
    missing = [s.name for s in steps if not s.done()]
    if missing:
        raise StepError(f"not installed: {', '.join(missing)} changed on disk while installing;"
                        " run the same command again")
