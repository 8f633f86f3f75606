"""llmb-run's view of an install: cluster_config.yaml found, read and checked field by field.

The installer writes the file (schema 1, docs/installer.md); people edit it by hand. Every
field llmb-run uses is checked when it is read: its shape against the ConfigFile TypedDict
(llmb.shared.records), then what a type cannot say (absolute paths, a known GPU type, the GRES
rule of llmb.launch.slurmjob, no control character). A hand-edited variant (a missing section,
a list where a mapping belongs, an unknown GPU type, a newline in an account, a file that is
not UTF-8) stops with one line naming the file, the field and the value, never with a traceback
later on. What the checks pass becomes a typed ClusterConfig (its GPU type resolved once, its
GRES parsed): the rest of llmb-run reads its fields, never the YAML.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict, TypeVar, cast

from llmb import layout
from llmb.launch import overrides, slurmjob
from llmb.launch.slurmjob import SlurmSettings
from llmb.llmbrun.errors import RunError
from llmb.llmbrun.history import History
from llmb.recipes import catalog
from llmb.shared import files, records, values, yamlfile

CONFIG_FILE = layout.CONFIG_FILE
SCHEMA = 1
VENV_KINDS = ("venv", "conda")
MAX_TEXT = 4096  # characters of one field (a path at most PATH_MAX)
K = TypeVar("K")


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
    gpu: catalog.GpuType
    slurm: SlurmSettings | None  # None unless cluster_type is slurm
    hf_token_file: str | None
    env: Mapping[str, str]  # launcher.env: every run's extra variables
    workloads: Mapping[str, Workload]

    @property
    def gpu_type(self) -> str:
        return self.gpu.name

    @property
    def gpus_per_node(self) -> int:
        return self.gpu.gpus_per_node

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


def from_data(path: Path, data: object) -> ClusterConfig:
    """The typed configuration of a file's parsed content (checked here)."""
    checked = check_config(data, path)
    llmb, launcher = checked["llmb"], checked["launcher"]
    slurm = launcher.get("slurm") if launcher["cluster_type"] == "slurm" else None
    gpu = catalog.get_gpu_type(launcher["gpu_type"])
    return ClusterConfig(
        path=path, install=Path(llmb["install_path"]), repo=Path(llmb["repo"]),
        cluster_type=launcher["cluster_type"], gpu=gpu,
        slurm=SlurmSettings(slurm["account"], slurm["partition"], slurmjob.parse_gres(
            slurm["gres"], gpu) if slurm["gres"] else None) if slurm else None,
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

# A text field as YAML may read it: a number (an account 12345) is its text.
Text = str | int | float


class LlmbSection(TypedDict):
    install_path: Text
    repo: Text


class _SlurmRequired(TypedDict):
    account: Text
    partition: Text


class SlurmSection(_SlurmRequired, total=False):
    gres: Text | None


class _LauncherRequired(TypedDict):
    gpu_type: Text


class LauncherSection(_LauncherRequired, total=False):
    """launcher: `slurm` (checked as SlurmSection where cluster_type is slurm) and `env`
    (llmb.launch.overrides' rule) are held to their own checks."""

    cluster_type: Text | None
    hf_token_file: Text | None


class _WorkloadRequired(TypedDict):
    venv: Text


class WorkloadSection(_WorkloadRequired, total=False):
    venv_kind: Text | None
    image: Text | None


class ConfigFile(TypedDict):
    """cluster_config.yaml, schema 1, as llmb-run reads it (keys it does not use may be there)."""

    llmb: LlmbSection
    launcher: LauncherSection
    workloads: dict[str, WorkloadSection]


def _bad(path: Path, field: str, value: object, what: str) -> RunError:
    return RunError(f"{path}: {field}={values.shown(overrides.brief(value))} {what}; fix the "
                    "file or rerun the installer")


def _checked(path: Path, kind: type[K], data: object, where: str = "") -> K:
    """data held to a TypedDict by llmb.shared.records, as this file's one-line RunError."""
    try:
        return records.check(kind, data)
    except records.BadRecord as exc:
        field = f"{where}{exc.field}"
        if exc.problem.endswith(f" has no {exc.field.rpartition('.')[2]}") or \
                exc.problem.startswith(f"{exc.field} is null, "):  # a required field
            raise RunError(f"{path}: {field} is missing; rerun the installer") from None
        what = exc.problem.replace("the record is ", "is ", 1)
        raise RunError(f"{path}: {where}{what}; fix the file or rerun the installer") from None


def _text(path: Path, field: str, value: Text | None) -> str | None:
    """A text field, stripped; RunError when it is blank, too long or holds a control
    character."""
    if value is None:
        return None
    text = str(value).strip()
    if isinstance(value, bool) or text == "":
        raise _bad(path, field, value, "must be a non-empty text value")
    if len(text) > MAX_TEXT:
        raise _bad(path, field, text, f"is longer than the {MAX_TEXT} characters a field can be")
    if values.control_characters(text):
        raise _bad(path, field, text, "contains control characters")
    return text


def _choice(path: Path, field: str, value: Text | None, default: str,
            allowed: Sequence[str], what: str = "is not supported") -> str:
    """A text field that names one of `allowed` (lower case), `default` when left out."""
    text = (_text(path, field, value) or default).lower()
    if text not in allowed:
        raise _bad(path, field, text, f"{what}; allowed: {', '.join(allowed)}")
    return text


def _path(path: Path, field: str, value: Text, what: str = "") -> str:
    """A required absolute path."""
    text = str(_text(path, field, value))
    if not text.startswith("/"):
        raise _bad(path, field, text, "must be an absolute path" + what)
    return text


def _schema(path: Path, data: object) -> dict[str, object]:
    """The file's top mapping, its schema the one this llmb-run reads."""
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
    return data


def _slurm(path: Path, data: object, gpu: str) -> dict[str, str | None]:
    """launcher.slurm: account and partition, and the GRES by llmb.launch.slurmjob's rule."""
    slurm = _checked(path, SlurmSection, data, "launcher.slurm.")
    out = {key: _text(path, f"launcher.slurm.{key}", slurm[key])
           for key in ("account", "partition")}
    gres = _text(path, "launcher.slurm.gres", slurm.get("gres"))
    if gres is not None and gres.lower() != "none":
        try:
            gres = str(slurmjob.parse_gres(gres, catalog.get_gpu_type(gpu)))
        except slurmjob.GresError as exc:
            raise _bad(path, "launcher.slurm.gres", gres, f"{exc}, or null when the cluster "
                       "needs none") from None
    out["gres"] = None if gres is None or gres.lower() == "none" else gres
    return out


def _workload(path: Path, name: str, entry: WorkloadSection) -> dict[str, str | None]:
    where = f"workloads.{name}."
    return {"venv": _path(path, f"{where}venv", entry["venv"], " (the workload's venv, as the "
                          "installer writes it)"),
            "venv_kind": _choice(path, f"{where}venv_kind", entry.get("venv_kind"), "venv",
                                 VENV_KINDS),
            "image": _text(path, f"{where}image", entry.get("image"))}


def check_config(data: object, path: Path) -> dict[str, Any]:
    """The config with each field llmb-run uses checked (and defaults filled in)."""
    top = _schema(path, data)
    for key in ("llmb", "launcher", "workloads"):  # a section's own shape, named as such
        if key in top and top[key] is not None and not isinstance(top[key], dict):
            raise _bad(path, key, top[key], "must be a mapping")
    workloads = top.get("workloads")
    for name, entry in (workloads.items() if isinstance(workloads, dict) else ()):
        if not isinstance(entry, dict):
            raise _bad(path, f"workloads.{name}", entry, "must be a mapping with venv, "
                       "venv_kind, image")
    checked = _checked(path, ConfigFile, {k: v for k, v in top.items() if v is not None})
    llmb, launcher = checked["llmb"], checked["launcher"]
    raw_launcher = cast("dict[str, object]", top["launcher"])  # a mapping: checked above
    ctype = _choice(path, "launcher.cluster_type", launcher.get("cluster_type"), "slurm",
                    catalog.INSTALL_CLUSTER_TYPES)
    gpu = _choice(path, "launcher.gpu_type", launcher["gpu_type"], "", catalog.gpu_types(),
                  "is not a GPU type")
    env = raw_launcher.get("env") or {}
    if not isinstance(env, dict):
        raise _bad(path, "launcher.env", env, "must be a mapping")
    out_launcher: dict[str, object] = {
        **raw_launcher, "cluster_type": ctype, "gpu_type": gpu,
        "hf_token_file": _text(path, "launcher.hf_token_file", launcher.get("hf_token_file")),
        "env": {name: check_env_value(f"{path}: launcher.env", name, value)
                for name, value in env.items()}}
    if ctype == "slurm":
        if raw_launcher.get("slurm") is None:
            raise RunError(f"{path}: launcher.slurm is missing; rerun the installer")
        out_launcher["slurm"] = _slurm(path, raw_launcher["slurm"], gpu)
    return {**top, "launcher": out_launcher,
            "llmb": {**llmb, **{key: _path(path, f"llmb.{key}", llmb[key])
                                for key in ("install_path", "repo")}},
            "workloads": {name: {**entry, **_workload(path, name, entry)}
                          for name, entry in checked["workloads"].items()}}


def check_env_value(prefix: str, name: object, value: object) -> str:
    """One entry of an env mapping (cluster config, bulk file, --env, a history record): the
    rule of llmb.launch.overrides, as this module's RunError. `prefix` says where it was given
    (e.g. `--env`, `sweep.yaml: task 2: env`)."""
    try:
        return overrides.check(prefix, name, value)
    except overrides.Refused as exc:
        raise RunError(str(exc)) from None
