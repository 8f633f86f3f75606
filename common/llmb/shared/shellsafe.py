"""Values that reach a shell, a Slurm job script or a pyxis option: what each may hold.

People's values (launch variables, installer answers) travel into programs that split or
evaluate them. Where llmb writes the string itself it quotes (`shell_env`, the task command in
llmb.launch.experiment); where another program does, the value is refused up front with one line
that names the variable, the characters and why, before anything is written or submitted:

- a job script is read line by line (`#SBATCH` lines, `export` lines): no control characters in
  any value that lands in it (a newline in SBATCH_ACCOUNT would end the `#SBATCH` block);
- nemo-run 0.11.1 runs `mkdir -p <run dir>/code` and `sbatch ... <run dir>/<exp>_sbatch.sh`
  through a shell (invoke) without quoting, and writes the run directory unquoted into the job
  script's `srun --output`; the run directory lies under LLMB_WORKLOAD (by default
  $LLMB_INSTALL/workloads/<workload>), so those paths hold only SAFE_PATH characters;
- the job name nemo-run derives from SBATCH_ACCOUNT lands in that same unquoted `srun --output`;
- pyxis splits `--container-mounts` on ',' (entries) and ':' (source:target:flags);
- a Slurm time limit and an image reference have a grammar; anything else is refused.

Standard library only (it runs on the validation path and from setup.sh):
`python3 -m llmb.shared.shellsafe job-path NAME VALUE` prints the one-line error and exits 1.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

from llmb.shared import values
from llmb.shared.values import BadValue, shown

# Characters a path may hold when nemo-run hands it to a shell unquoted.
SAFE_PATH_PUNCT = "_./+-@="
SAFE_PATH_HINT = "use letters, digits and _ . / + - @ ="
# Slurm account and partition names as llmb passes them on.
SLURM_NAME_PUNCT = "_.-"
MAX_PATH = 4096  # characters of a path (PATH_MAX), an image file or reference
MAX_SLURM_NAME = 256  # characters of an account or partition name
MAX_SLURM_NAMES = 1024  # of several (comma separated): what fits an #SBATCH line
# The most of anything a person may count with (steps, GPUs, ...): no 23-digit step counts.
TIME_RE = re.compile(r"^(?:([0-9]{1,3})-)?([0-9]{1,3}):([0-5][0-9]):([0-5][0-9])$")
# An image reference as pyxis/enroot or Docker take it: [USER@][REGISTRY#|REGISTRY/]PATH[:TAG]
# [@sha256:DIGEST]; lower-case repository path, as registries require.
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
IMAGE_RE = re.compile(
    r"^(?:[A-Za-z0-9_.-]+@)?"                        # user@
    r"(?:[A-Za-z0-9.-]+(?::[0-9]{1,5})?[#/])?"       # registry# or registry/
    rf"{_COMPONENT}(?:/{_COMPONENT})*"              # repository path
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?"      # :tag
    r"(?:@sha256:[0-9a-f]{64})?$")                  # @digest
HF_TOKEN_MIN_LEN = 8


def _chars(found: Iterable[str]) -> str:
    """The offending characters for a message: `$ ( )`, a space named as such."""
    names = ["a space" if c == " " else shown(c) for c in dict.fromkeys(found)]
    return " ".join(names)


def printable(name: str, value: str, secret: bool = False) -> str:
    """value, or BadValue when it holds a control character; a secret is never shown."""
    found = values.control_characters(value)
    if found:
        what = name if secret else f"{name}={shown(value)}"
        raise BadValue(f"{what} contains control character(s) {' '.join(found)}, which "
                       "would end or garble a line of the job script; remove them")
    return value


def printable_env(env: Mapping[str, str], names: Iterable[str],
                  secret: Iterable[str] = ()) -> None:
    """printable() for each of `names` that is set in env."""
    hidden = set(secret)
    for name in names:
        value = env.get(name)
        if value is not None:
            printable(name, value, secret=name in hidden)


def bounded(name: str, value: str, limit: int, what: str) -> str:
    """value, or BadValue naming a prefix of it and its length when it is longer than limit."""
    if len(value) > limit:
        raise BadValue(f"{name}={values.brief(value)} is longer than the {limit} characters "
                       f"{what} can be")
    return value


def job_path(name: str, value: str) -> str:
    """A path nemo-run hands to a shell unquoted: SAFE_PATH characters only."""
    bounded(name, value, MAX_PATH, "a path")
    printable(name, value)
    bad = [c for c in value if not (c.isalnum() or c in SAFE_PATH_PUNCT)]
    if bad:
        raise BadValue(f"{name}={shown(value)} contains {_chars(bad)}, which a job path "
                       "cannot hold: nemo-run passes the run directory under it unquoted to "
                       f"a shell (mkdir, sbatch) and to the job script's srun --output; "
                       f"{SAFE_PATH_HINT}")
    return value


def mount_path(name: str, value: str, label: bool = False) -> str:
    """A host path that becomes a pyxis mount: no ',' or ':'. `label`: `name` is a
    description ("the llmb repository"), not a variable."""
    bounded(name, value, MAX_PATH, "a path")
    printable(name, value)
    bad = [c for c in value if c in ",:"]
    if bad:
        what = f"{name} {shown(value)}" if label else f"{name}={shown(value)}"
        raise BadValue(f"{what} contains {_chars(bad)}, which pyxis cannot "
                       "mount: --container-mounts splits entries on ',' and source:target on "
                       "':'; use a path (or a link to it) without them")
    return value


def slurm_name(name: str, value: str, what: str, lists: bool = False) -> str:
    """A Slurm account or partition name: letters, digits and _ . - (',' between several),
    at most MAX_SLURM_NAME characters (MAX_SLURM_NAMES for several)."""
    limit = MAX_SLURM_NAMES if lists else MAX_SLURM_NAME
    if len(value) > limit:
        raise BadValue(f"{name}={values.brief(value)} is longer than the {limit} characters a "
                       f"Slurm {what} name{'s' if lists else ''} can be here")
    printable(name, value)
    allowed = SLURM_NAME_PUNCT + ("," if lists else "")
    bad = [c for c in value if not ((c.isascii() and c.isalnum()) or c in allowed)]
    if bad or value.startswith("-"):
        why = ("it becomes part of the job name that nemo-run writes unquoted into the job "
               "script" if what == "account" else "Slurm names hold no such characters")
        hint = "letters, digits and _ . -" + (" (and , between partitions)" if lists else "")
        chars = _chars(bad) if bad else "a leading -"
        raise BadValue(f"{name}={shown(value)} contains {chars}, which a Slurm {what} name "
                       f"cannot hold here ({why}); use {hint}")
    return value


def slurm_time(name: str, value: str) -> str:
    """A Slurm time limit, HH:MM:SS or D-HH:MM:SS (ASCII digits, at most 999 days)."""
    if not TIME_RE.fullmatch(value):
        raise BadValue(f"{name}={shown(value)} is not a Slurm time; use HH:MM:SS or "
                       "D-HH:MM:SS, e.g. 00:45:00")
    return value


def looks_like_file(value: str) -> bool:
    """An image value that names a file rather than a registry reference."""
    return value.startswith(("/", ".", "~")) or value.endswith(".sqsh")


def container_image(name: str, value: str, cwd: Path | None = None) -> str:
    """An image override: a squashfs file (made absolute: pyxis reads any other value as a
    registry reference, and srun's working directory is not the launch directory) or a
    registry reference in the form pyxis takes."""
    bounded(name, value, MAX_PATH, "an image file or reference")
    printable(name, value)
    if looks_like_file(value):
        path = Path(os.path.expanduser(value))
        return str(path if path.is_absolute() else (cwd or Path.cwd()) / path)
    if not IMAGE_RE.fullmatch(value.removeprefix("docker://")):
        raise BadValue(f"{name}={shown(value)} is neither an image file (a path to a .sqsh) "
                       "nor an image reference such as nvcr.io#nvidia/nemo:25.04.01")
    return value


def hf_token(name: str, value: str) -> str:
    """A Hugging Face access token: never shown, never a boolean or a short word (a token
    shorter than redact.MIN_VALUE_LEN could not be masked wherever it appears)."""
    printable(name, value, secret=True)
    token = value.strip()
    problem = None
    if any(c.isspace() for c in token):
        problem = "contains a space"
    elif token.lower() in values.TRUE + values.FALSE:
        problem = "is a yes/no word"
    elif len(token) < HF_TOKEN_MIN_LEN:
        problem = f"is {len(token)} characters long"
    if problem:
        raise BadValue(f"{name} {problem}, which is not a Hugging Face access token (hf_ and "
                       "about 34 letters and digits, from huggingface.co/settings/tokens)")
    return token


def local_process_limit(smoke: bool, environ: Mapping[str, str] | None = None) -> tuple[int, str]:
    """How many local processes this machine can run, and what that number is.

    SMOKE_TEST ranks are CPU processes: one per CPU this process may use. Without it each
    rank drives a GPU: the GPUs visible here (CUDA_VISIBLE_DEVICES, else /dev/nvidiaN), or
    the CPUs when none can be seen."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    cpus = cpus or 1
    if smoke:
        return cpus, f"the {cpus} CPUs this process may use"
    environ = os.environ if environ is None else environ
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        gpus = len([d for d in visible.split(",") if d.strip() and d.strip() != "-1"])
    else:
        gpus = len([p for p in Path("/dev").glob("nvidia*") if re.fullmatch(r"nvidia\d+",
                                                                              p.name)])
    if gpus:
        return gpus, f"the {gpus} GPUs visible here"
    return cpus, f"no GPU is visible here; the {cpus} CPUs this process may use"


def shell_env(env: Mapping[str, str]) -> dict[str, str]:
    """env with each value quoted for the `export NAME=VALUE` lines nemo-run writes as is."""
    return {k: shlex.quote(str(v)) for k, v in env.items()}


def main(argv: list[str]) -> int:
    checks = {"job-path": job_path, "mount-path": mount_path}
    if len(argv) != 3 or argv[0] not in checks:
        print(f"usage: python3 -m llmb.shared.shellsafe {{{'|'.join(checks)}}} NAME VALUE",
              file=sys.stderr)
        return 2
    try:
        checks[argv[0]](argv[1], argv[2])
    except BadValue as err:
        print(f"llmb: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
