"""llmb-run's view of an install: cluster_config.yaml found, read and checked field by field.

The installer writes the file (schema 1, installer/README.md); people edit it by hand. Every
field llmb-run uses is checked when it is read, so a hand-edited variant (a missing section, a
list where a mapping belongs, an unknown GPU type, a newline in an account, a file that is not
UTF-8) stops with one line naming the file, the field and the value, never with a traceback
later on. Also here: RunError (the one-line error of every llmb-run command) and the names
llmb-run itself sets in a launch environment, which nothing else may override.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmb import layout
from llmb.launch import overrides
from llmb.llmbrun.history import History
from llmb.recipes import catalog
from llmb.shared import files, values
from llmb.shared.errors import LlmbError

PROG = "llmb-run"
CONFIG_FILE = layout.CONFIG_FILE
SCHEMA = 1
VENV_KINDS = ("venv", "conda")
# Variables llmb-run sets itself; a run's environment takes them from nowhere else
# (llmb.launch.overrides holds the one rule for every place env entries come from).
RESERVED_ENV = overrides.RESERVED


class RunError(LlmbError):
    """A llmb-run operation that cannot be done: one line for the user (printed as
    `llmb-run: <message>`); exit status 1. A bad flag value is a shared.errors.UsageError."""


@dataclass(frozen=True)
class ClusterConfig:
    path: Path
    data: Mapping[str, Any]

    @property
    def install(self) -> Path:
        return Path(self.data["llmb"]["install_path"])

    @property
    def repo(self) -> Path:
        return Path(self.data["llmb"]["repo"])

    @property
    def launcher(self) -> Mapping[str, Any]:
        return self.data["launcher"]

    @property
    def cluster_type(self) -> str:
        return str(self.launcher.get("cluster_type") or "slurm")

    @property
    def gpu_type(self) -> str:
        return str(self.launcher["gpu_type"])

    @property
    def gpus_per_node(self) -> int:
        return catalog.get_gpu_type(self.gpu_type).gpus_per_node

    @property
    def slurm(self) -> Mapping[str, Any]:
        return self.launcher.get("slurm") or {}

    @property
    def env(self) -> Mapping[str, str]:
        return self.launcher.get("env") or {}

    @property
    def workloads(self) -> Mapping[str, Mapping[str, Any]]:
        return self.data.get("workloads") or {}

    @property
    def history(self) -> History:
        return History(self.tree.history)

    @property
    def tree(self) -> layout.Install:
        """The install tree this configuration describes."""
        return layout.Install(self.install)

    @property
    def workloads_dir(self) -> Path:
        return self.tree.workloads


def find_config(explicit: str | None, environ: Mapping[str, str]) -> ClusterConfig:
    candidates = [Path(explicit)] if explicit else [Path.cwd() / CONFIG_FILE]
    if not explicit and environ.get("LLMB_INSTALL"):
        candidates.append(Path(environ["LLMB_INSTALL"]) / CONFIG_FILE)
    for path in candidates:
        problem = files.path_problem(path, "file")  # never raises (a name too long, ...)
        if problem is None and path.is_file():
            data = files.read_yaml(path, str(path), RunError)
            return ClusterConfig(path, check_config(data, path))
        if explicit and problem and problem.startswith("cannot be read"):
            raise RunError(f"--config {values.shown(path)} {problem}")
    where = " or ".join(values.shown(p) for p in candidates)
    raise RunError(f"no {CONFIG_FILE} found ({where}); cd to your install directory, set "
                   "LLMB_INSTALL, or run installer/install.sh")


# --- checking a (possibly hand-edited) cluster_config.yaml -------------------------------------

def _bad(path: Path, field: str, value: Any, what: str) -> RunError:
    return RunError(f"{path}: {field}={values.shown(overrides.brief(value))} {what}; fix the "
                    "file or rerun the installer")


def _section(path: Path, data: Mapping[str, Any], key: str, where: str,
             required: bool = True) -> dict[str, Any]:
    value = data.get(key)
    if value is None and not required:
        return {}
    if not isinstance(value, dict):
        if value is None:
            raise RunError(f"{path}: {where}{key} is missing; rerun the installer")
        raise _bad(path, f"{where}{key}", value, "must be a mapping")
    return value


def _text(path: Path, data: Mapping[str, Any], key: str, where: str,
          required: bool = True) -> str | None:
    value = data.get(key)
    if value is None:
        if required:
            raise RunError(f"{path}: {where}{key} is missing; rerun the installer")
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int, float)) or \
            str(value).strip() == "":
        raise _bad(path, f"{where}{key}", value, "must be a non-empty text value")
    text = str(value).strip()
    if values.control_characters(text):
        raise _bad(path, f"{where}{key}", text, "contains control characters")
    return text


def check_config(data: Any, path: Path) -> dict[str, Any]:
    """The config with each field llmb-run uses checked (and defaults filled in)."""
    if not isinstance(data, dict):
        raise _bad(path, "the file", data, "must be a mapping with llmb, launcher, workloads")
    schema = data.get("schema", SCHEMA)
    if isinstance(schema, str) and schema.strip() == str(SCHEMA):
        raise RunError(f"{path}: schema={values.shown(repr(schema))} is a string; write "
                       f"schema: {SCHEMA} (a number, no quotes)")
    if schema != SCHEMA or isinstance(schema, bool):
        raise _bad(path, "schema", schema, f"is not supported; this llmb-run reads schema "
                   f"{SCHEMA}")
    llmb = _section(path, data, "llmb", "")
    launcher = _section(path, data, "launcher", "")
    workloads = _section(path, data, "workloads", "")
    for key in ("install_path", "repo"):
        text = _text(path, llmb, key, "llmb.")
        if not str(text).startswith("/"):
            raise _bad(path, f"llmb.{key}", text, "must be an absolute path")
        llmb[key] = text
    ctype = (_text(path, launcher, "cluster_type", "launcher.", False) or "slurm").lower()
    if ctype not in catalog.INSTALL_CLUSTER_TYPES:
        raise _bad(path, "launcher.cluster_type", ctype, f"is not supported; allowed: "
                   f"{', '.join(catalog.INSTALL_CLUSTER_TYPES)}")
    launcher["cluster_type"] = ctype
    gpu = str(_text(path, launcher, "gpu_type", "launcher.")).lower()
    if gpu not in catalog.gpu_types():
        raise _bad(path, "launcher.gpu_type", gpu, f"is not a GPU type; allowed: "
                   f"{', '.join(catalog.gpu_types())}")
    launcher["gpu_type"] = gpu
    if ctype == "slurm":
        slurm = _section(path, launcher, "slurm", "launcher.")
        for key in ("account", "partition"):
            slurm[key] = _text(path, slurm, key, "launcher.slurm.")
        gres = _text(path, slurm, "gres", "launcher.slurm.", False)
        if gres is not None and not re.fullmatch(r"gpu(:[A-Za-z0-9_.-]+)?:\d+", gres):
            raise _bad(path, "launcher.slurm.gres", gres, "is not a GPU GRES; e.g. gpu:8, or "
                       "null when the cluster needs none")
        slurm["gres"] = gres
    token = _text(path, launcher, "hf_token_file", "launcher.", False)
    launcher["hf_token_file"] = token
    env = _section(path, launcher, "env", "launcher.", False)
    launcher["env"] = {name: check_env_value(f"{path}: launcher.env", name, value)
                       for name, value in env.items()}
    for name, entry in workloads.items():
        where = f"workloads.{name}."
        if not isinstance(entry, dict):
            raise _bad(path, f"workloads.{name}", entry, "must be a mapping with venv, "
                       "venv_kind, image")
        entry["venv"] = _text(path, entry, "venv", where)
        if not str(entry["venv"]).startswith("/"):
            raise _bad(path, f"{where}venv", entry["venv"], "must be an absolute path (the "
                       "workload's venv, as the installer writes it)")
        kind = (_text(path, entry, "venv_kind", where, False) or "venv").lower()
        if kind not in VENV_KINDS:
            raise _bad(path, f"{where}venv_kind", kind, f"is not supported; allowed: "
                       f"{', '.join(VENV_KINDS)}")
        entry["venv_kind"] = kind
        entry["image"] = _text(path, entry, "image", where, False)
    return data


def check_env_value(prefix: str, name: Any, value: Any) -> str:
    """One entry of an env mapping (cluster config, bulk file, --env, a history record): the
    rule of llmb.launch.overrides, as this module's RunError. `prefix` says where it was given
    (e.g. `--env`, `sweep.yaml: task 2: env`)."""
    try:
        return overrides.check(prefix, name, value)
    except overrides.Refused as exc:
        raise RunError(str(exc)) from None
