"""The installer's fields, each checked before anything is written: type, characters, secrets.

Each check takes the field's dotted name (`venv.pip_args`) and the raw YAML value and returns
the value to use, or raises values.BadValue with one line naming the field, the value and what
would work. A YAML file says `pip_args: --no-index` as easily as `pip_args: [--no-index]`;
the string would be read one character at a time, so it is refused, not guessed at.
"""

from __future__ import annotations

import getpass
import os
import re
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from llmb.launch import overrides, slurmjob
from llmb.recipes import catalog
from llmb.recipes.catalog import GpuType
from llmb.shared import redact, shellsafe, values
from llmb.shared.errors import LlmbError
from llmb.shared.files import MAX_TOKEN_BYTES, FileRefused, open_regular, read_bounded
from llmb.shared.values import BadValue, shown

MAX_REQUIREMENTS_BYTES = 1 << 20  # a requirements file: a few lines
MAX_FIELD = 4096  # characters of one field's text (a path at most PATH_MAX)
ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class InstallError(LlmbError):
    """A bad input or a failed step of the installer: one line for the user."""


def _type(value: object) -> str:
    return {str: "a string", bool: "a boolean", int: "a number", float: "a number",
            list: "a list", dict: "a mapping", type(None): "empty"}.get(type(value),
                                                                      type(value).__name__)


def string(name: str, value: object, example: str = "") -> str:
    """A non-empty string without control characters (YAML numbers are taken as written)."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        hint = f", e.g. {example}" if example else ""
        raise BadValue(f"{name} must be a string{hint}; got {_type(value)} "
                       f"{values.brief(value)}")
    try:
        text = str(value).strip()
    except ValueError:  # an integer of more digits than Python converts to text
        raise BadValue(f"{name} is a number of more digits than a field can hold") from None
    if not text:
        raise BadValue(f"{name} is empty")
    if len(text) > MAX_FIELD:
        raise BadValue(f"{name}={values.brief(text)} is longer than the {MAX_FIELD} characters "
                       "a field can be")
    return shellsafe.printable(name, text)


def screen_only_gpu_types() -> list[str]:
    """The GPU types gpus.yaml knows that no recipe publishes a row for: an install for one
    has no workload and serves llmb-run screen, preflight and the analyzer."""
    published = {g for r in catalog.all_recipes() for g in r.gpu_types}
    return [g for g in catalog.gpu_types() if g not in published]


SCREEN_ONLY = "no recipe publishes it: llmb-run screen and the analyzer only"


def string_list(name: str, value: object, example: str) -> list[str]:
    """A YAML list of strings; a bare string is refused (it is not a list of one)."""
    if not isinstance(value, list):
        raise BadValue(f"{name} must be a list, e.g. {example}; got {_type(value)} "
                       f"{shown(value)}")
    return [string(f"{name}[{i}]", item) for i, item in enumerate(value)]


def boolean(name: str, value: object) -> bool:
    return values.parse_bool(name, value, empty=None)


def pip_args(name: str, value: object) -> list[str]:
    """Extra pip arguments, one word each (setup.sh splits LLMB_PIP_ARGS on blanks)."""
    args = string_list(name, value, "[--no-index, --find-links, /wheels]")
    for i, arg in enumerate(args):
        if any(c.isspace() for c in arg):
            raise BadValue(f"{name}[{i}]={shown(arg)} contains a space; give each pip "
                           "argument as its own list item, e.g. [--find-links, /wheels]")
    return args


def requirements(name: str, value: object, repo: Path) -> list[str]:
    """Requirement files relative to the repository (setup.sh joins them with ':')."""
    files = string_list(name, value, "[common/requirements/launch.txt]")
    for i, req in enumerate(files):
        if ":" in req:
            raise BadValue(f"{name}[{i}]={shown(req)} contains ':', which separates the files "
                           "handed to setup.sh; rename the file")
        path = (repo / req).resolve()
        if Path(req).is_absolute() or not path.is_relative_to(repo.resolve()):
            raise BadValue(f"{name}[{i}]={shown(req)} is outside the repository; give a "
                           "file under it, e.g. common/requirements/launch.txt")
        try:
            read_bounded(path, MAX_REQUIREMENTS_BYTES)
        except FileRefused as exc:
            if exc.missing:
                raise BadValue(f"{name}: {shown(req)} does not exist under {repo}") from None
            raise BadValue(f"{name}[{i}]={shown(req)} {exc.reason}") from None
    return files


def gres(name: str, value: object, gpu: GpuType | None = None) -> str | None:
    """A GPU GRES request by llmb.launch.slurmjob's rule (its count the GPU type's GPUs per
    node, where `gpu` is given); None for none."""
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "none")):
        return None
    text = string(name, value, "gpu:8")
    try:
        return str(slurmjob.parse_gres(text, gpu))
    except slurmjob.GresError as exc:
        raise BadValue(f"{name}={shown(text)} {exc}, or null when the cluster needs "
                       "none") from None


def install_path(name: str, value: str, cluster_type: str) -> str:
    """The install root, absolute. On Slurm and Run:ai every launch puts run directories
    under it, which nemo-run hands to a shell: shellsafe.job_path's characters only. It must
    be creatable by this user; a dry run says so too."""
    path = Path(os.path.expanduser(shellsafe.printable(name, value))).absolute()
    if cluster_type != "local":
        shellsafe.job_path(name, str(path))
    problem = creatable_problem(path)
    if problem:
        raise BadValue(f"{name}={shown(path)} cannot be used: {problem}")
    return str(path)


def creatable_problem(path: Path) -> str | None:
    """Why this user cannot create (or write into) directory `path`, or None. The first
    existing ancestor gets a probe (an empty directory, removed at once)."""
    existing = next((p for p in (path, *path.parents) if os.path.lexists(p)), None)
    if existing is None:
        return "no part of it exists"
    if not existing.is_dir():
        if existing.is_symlink() and not existing.exists():
            return f"{existing} is a link that leads nowhere (broken, or a loop)"
        return f"{existing} is a file, not a directory"
    try:
        name_max = os.pathconf(existing, "PC_NAME_MAX")
    except (OSError, ValueError):
        name_max = 255
    if any(len(os.fsencode(part)) > name_max for part in path.relative_to(existing).parts):
        return f"a name in it is longer than the file system allows ({name_max} bytes)"
    try:
        readonly = bool(os.statvfs(existing).f_flag & os.ST_RDONLY)
    except OSError:
        readonly = False
    if readonly:
        return f"{existing} is on a read-only file system"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{existing} is not writable by {getpass.getuser()}"
    try:  # access() trusts the mode bits: root on /proc, NFS root squash, ACLs say otherwise
        os.rmdir(tempfile.mkdtemp(prefix=".llmb-write-test-", dir=existing))
    except OSError as exc:
        return f"{existing} is not writable by {getpass.getuser()} ({exc.strerror})"
    return None


def env(name: str, value: object, known_secrets: Iterable[str]) -> dict[str, str]:
    """Variables passed to every launch, stored in cluster_config.yaml: what llmb-run accepts
    in launcher.env (llmb.launch.overrides: no variable llmb-run sets itself, no sbatch input
    variable, none that makes a shell, the loader or Python run code), and never a secret: by
    name (redact.is_secret_name), by value (a known secret value inside it) or by its shape (a
    Hugging Face, NGC, GitHub, AWS or Slack token, a password in a URL)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise BadValue(f"{name} must be a mapping of variable names to values, e.g. "
                       f"{{NCCL_DEBUG: WARN}}; got {_type(value)} {shown(value)}")
    secrets = set(known_secrets)
    out: dict[str, str] = {}
    for key, raw in value.items():
        key_s = key if isinstance(key, str) else overrides.brief(key)
        if isinstance(key, str) and ENV_NAME_RE.fullmatch(key) and redact.is_secret_name(key):
            raise BadValue(f"{name}.{key_s} looks like a secret (by its name) and "
                           "cluster_config.yaml is no place for one; export "
                           f"{key_s} in the shell that runs llmb-run instead")
        try:
            text = overrides.check(name, key, raw)
        except overrides.Refused as exc:
            raise BadValue(str(exc)) from None
        if redact.redact(text, secrets) != text:
            raise BadValue(f"{name}.{key_s} holds the value of a secret (HF_TOKEN or a "
                           "*TOKEN*/*SECRET*/*PASSWORD* variable of this shell); it is not "
                           f"stored in cluster_config.yaml: export {key_s} in the shell that "
                           "runs llmb-run instead")
        if redact.clear_secrets(text):
            raise BadValue(f"{name}.{key_s} holds {redact.clear_secrets(text)[0]} (a "
                           "credential); it is not stored in cluster_config.yaml: export "
                           f"{key_s} in the shell that runs llmb-run instead")
        out[key] = text
    return out


def secret_values(environ: Mapping[str, str], token: str | None) -> set[str]:
    """The secret values this installer knows: the token, and secret-named variables."""
    return redact.secret_values(environ, [token])


def _size(data: object) -> str:
    if isinstance(data, str):
        return f"text of {len(data)} characters"
    if isinstance(data, (list, dict)):
        return f"{_type(data)} of {len(data)} item(s)"
    return _type(data)


def check_map(name: str, data: object) -> dict[str, Any]:
    """A mapping, or BadValue that names what it is and never shows it: a token file or
    /etc/shadow given as --config by mistake is not printed back."""
    if data is None:
        return {}
    if not isinstance(data, dict):
        hint = ": is it the config file you meant?" if name.startswith("--config") else ""
        raise BadValue(f"{name} must be a mapping of settings; it holds {_size(data)} (not "
                       f"shown){hint}")
    return data


KEY_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}")


def unknown_keys(name: str, data: Mapping[str, object], allowed: set[str]) -> None:
    """BadValue naming the keys that are not allowed: only those shaped like a setting's name
    are shown (a file that is not a config has lines for keys: they are counted, not shown)."""
    unknown = set(data) - allowed
    if not unknown:
        return
    named = sorted(k for k in unknown if isinstance(k, str) and KEY_NAME.fullmatch(k)
                   and not redact.looks_like_token(k))
    hidden = len(unknown) - len(named)
    if hidden and not set(data) & allowed:
        raise BadValue(f"{name} is not an installer config: none of its {len(data)} key(s) is "
                       f"a setting (its content is not shown); allowed: "
                       f"{', '.join(sorted(allowed))}")
    rest = hidden + max(0, len(named) - 5)
    listed = ", ".join(values.brief(k) for k in named[:5])
    what = (f"unknown key(s) {listed}" + (f" and {rest} more (not shown)" if rest else "")
            if named else f"{hidden} unknown key(s) (not shown: not the name of a setting)")
    raise BadValue(f"{name} has {what}; allowed: {', '.join(sorted(allowed))}")


def token_file(name: str, value: object) -> tuple[str, str]:
    """(the absolute path, the token) of a file holding a Hugging Face token: one rule for the
    question --record asks (`name` empty: the answer is the path) and for replaying
    hf_token_file. A regular UTF-8 file of at most MAX_TOKEN_BYTES that only its owner can read
    (as ssh holds a private key to: group or others reading it is refused, with the chmod that
    mends it), holding a token. Never shows the token, nor an answer shaped like one."""
    text = string(name or "the token file", value)
    if redact.looks_like_token(text):
        raise BadValue(f"{name + ': ' if name else ''}that looks like a token, not a file: put "
                       "it in a file only you can read (chmod 600 FILE) and give that file's "
                       "path")
    path = os.path.abspath(os.path.expanduser(text))
    where = f"{name}={shown(path)}" if name else shown(path)
    try:
        fd = open_regular(path)
    except FileRefused as exc:
        raise BadValue(f"{where} {exc.reason}; it must be a file holding the token only") \
            from None
    try:
        mode = os.fstat(fd).st_mode & 0o777
        raw = os.read(fd, MAX_TOKEN_BYTES + 1)
    except OSError as exc:
        raise BadValue(f"{where} cannot be read ({exc.strerror})") from None
    finally:
        os.close(fd)
    if mode & 0o077:
        raise BadValue(f"{where} can be read by others (mode {mode:04o}); a token file must be "
                       f"private: chmod 600 {shown(path)}")
    if len(raw) > MAX_TOKEN_BYTES:
        raise BadValue(f"{where} is larger than {MAX_TOKEN_BYTES} bytes; it must hold the "
                       "token only")
    try:
        token = raw.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise BadValue(f"{where} is not text (not UTF-8); it must hold the token only") \
            from None
    return path, shellsafe.hf_token(f"the token in {name or 'that file'}", token)
