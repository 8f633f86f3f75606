"""llmb-run's view of an install: cluster_config.yaml found, read and checked field by field.

The installer writes the file (schema 1, docs/installer.md); people edit it by hand. Every
field llmb-run uses is checked when it is read, so a hand-edited variant (a missing section, a
list where a mapping belongs, an unknown GPU type, a newline in an account, a file that is not
UTF-8) stops with one line naming the file, the field and the value, never with a traceback
later on. What the checks pass becomes a typed ClusterConfig: the rest of llmb-run reads its
fields, never the YAML.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmb import layout
from llmb.launch import overrides
from llmb.llmbrun.errors import RunError
from llmb.llmbrun.history import History
from llmb.recipes import catalog
from llmb.shared import files, values, yamlfile

CONFIG_FILE = layout.CONFIG_FILE
SCHEMA = 1
VENV_KINDS = ("venv", "conda")
MAX_TEXT = 4096  # characters of one field (a path at most PATH_MAX)


@dataclass(frozen=True)
class SlurmSettings:
    """launcher.slurm: where every job of the install goes, and its GPU request."""

    account: str
    partition: str
    gres: str | None  # e.g. gpu:8 where the cluster needs --gres, else None (--gpus-per-node)


@dataclass(frozen=True)
class Workload:
    """workloads.<name>: an installed workload's venv and image."""

    venv: Path
    venv_kind: str  # venv | conda
    image: str | None  # the .sqsh file (or a reference), None when the installer skipped it

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"


@dataclass(frozen=True)
class ClusterConfig:
    """One install, as cluster_config.yaml describes it (checked by `check_config`)."""

    path: Path
    install: Path
    repo: Path
    cluster_type: str  # slurm | runai | local
    gpu_type: str
    slurm: SlurmSettings | None  # None unless cluster_type is slurm
    hf_token_file: str | None
    env: Mapping[str, str]  # launcher.env: every run's extra variables
    workloads: Mapping[str, Workload]

    @property
    def gpus_per_node(self) -> int:
        return catalog.get_gpu_type(self.gpu_type).gpus_per_node

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

    def images(self) -> list[str]:
        """The installed workloads' images, each once, in the order of the file."""
        return list(dict.fromkeys(w.image for w in self.workloads.values() if w.image))

    def require_slurm(self, what: str) -> SlurmSettings:
        """The Slurm settings, or RunError for an install of another cluster type: `what`
        (e.g. "screen") says which command needs Slurm (one rule, one wording for all)."""
        if self.slurm is None:
            raise RunError(f"{what} runs on Slurm clusters only; this install's cluster_type is "
                           f"{self.cluster_type} ({self.path})")
        return self.slurm


def from_data(path: Path, data: Any) -> ClusterConfig:
    """The typed configuration of a file's parsed content (checked here)."""
    checked = check_config(data, path)
    llmb, launcher = checked["llmb"], checked["launcher"]
    slurm = launcher.get("slurm") if launcher["cluster_type"] == "slurm" else None
    return ClusterConfig(
        path=path, install=Path(llmb["install_path"]), repo=Path(llmb["repo"]),
        cluster_type=launcher["cluster_type"], gpu_type=launcher["gpu_type"],
        slurm=SlurmSettings(slurm["account"], slurm["partition"], slurm["gres"])
        if slurm else None,
        hf_token_file=launcher["hf_token_file"], env=dict(launcher["env"]),
        workloads={name: Workload(Path(w["venv"]), w["venv_kind"], w["image"])
                   for name, w in checked["workloads"].items()})


def find_config(explicit: str | None, environ: Mapping[str, str]) -> ClusterConfig:
    candidates = [Path(explicit)] if explicit else [Path.cwd() / CONFIG_FILE]
    if not explicit and environ.get("LLMB_INSTALL"):
        candidates.append(Path(environ["LLMB_INSTALL"]) / CONFIG_FILE)
    for path in candidates:
        problem = files.path_problem(path, "file")  # never raises (a name too long, ...)
        if problem is None and path.is_file():
            return from_data(path, yamlfile.read_yaml(path, str(path), RunError))
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
    if len(text) > MAX_TEXT:
        raise _bad(path, f"{where}{key}", text, f"is longer than the {MAX_TEXT} characters a "
                   "field can be")
    if values.control_characters(text):
        raise _bad(path, f"{where}{key}", text, "contains control characters")
    return text


def check_config(data: Any, path: Path) -> dict[str, Any]:
    """The config with each field llmb-run uses checked (and defaults filled in)."""
    if not isinstance(data, dict):  # described, never printed: it may be any file at all
        what = f"text of {len(data)} characters" if isinstance(data, str) else \
            f"a list of {len(data)} item(s)" if isinstance(data, list) else type(data).__name__
        raise RunError(f"{path}: the file is {what}, not a mapping with llmb, launcher, "
                       "workloads; give the install's cluster_config.yaml or rerun the installer")
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
