"""What a run's environment may take from people: one rule for every place it comes from.

llmb-run's `--env NAME=VALUE`, a bulk file's `env`, cluster_config.yaml's `launcher.env`, a
history record that `rerun` replays and the installer's `env:` (which it writes into
launcher.env) all add variables to the environment launch.sh runs with. Each entry is checked
here, so the installer never stores what llmb-run would then refuse:

- a variable name (letters, digits, _; not starting with a digit);
- a single text, number or boolean value without control characters;
- not a variable llmb-run sets itself (RESERVED: the message names the flag or field to use),
  not one of sbatch's own input variables (they would apply over the job script, unrecorded);
- not a variable that makes a shell, the dynamic loader, Python, Slurm's srun, NCCL or CUDA run
  code of the caller's choosing or change how they start (llmb.shared.startvars: BASH_ENV,
  LD_PRELOAD, PYTHONPATH, SLURM_TASK_PROLOG, a path in NCCL_NET_PLUGIN, ...);
- at most MAX_VALUE characters: every value goes on a command line and into the job's
  environment, where a 300 KB one ended the submission in "Argument list too long".

`check(where, name, value)` returns the value as text or raises Refused, one line that starts
with `where` and names the variable and why.
"""

from __future__ import annotations

import re

from llmb.launch import placement
from llmb.shared import startvars, values
from llmb.shared.errors import UsageError

NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
MAX_NAME = 128  # characters of a variable's name
MAX_VALUE = 4096  # characters of its value (Linux takes 128 KiB per string, 2 MiB in all)

# Variables llmb-run sets (or validates) for every launch: an override would run something other
# than what was validated and recorded (the history said 15b fp8 x16 while 340b bf16 x128 ran).
RESERVED = {
    "MODEL_SIZE": "-s/--size (bulk: size or sizes)",
    "DTYPE": "--dtype (bulk: dtype or dtypes)",
    "JOB_TOTAL_GPUS": "--scale (bulk: scale or scales)",
    "GPU_TYPE": "cluster_config.yaml launcher.gpu_type",
    "GPUS_PER_NODE": "the GPU type's own count (llmb-run validates scales with it)",
    "CLUSTER_TYPE": "cluster_config.yaml launcher.cluster_type",
    "STRONG_SCALING": "launch.sh directly (llmb-run runs the weak-scaling matrix)",
    "ENABLE_PROFILE": "-p/--profile (bulk: profile: true)",
    "DRY_RUN": "--dry-run",
    "LLMB_ALLOW_UNVALIDATED_SCALE": "nothing: llmb-run sets it from the scale rules",
    "LLMB_INSTALL": "the install of this cluster_config.yaml",
    "LLMB_WORKLOAD": "the install of this cluster_config.yaml",
    "STAGE_PATH": "nothing: it is no longer used",
    "SBATCH_ACCOUNT": "cluster_config.yaml launcher.slurm.account",
    "SBATCH_PARTITION": "cluster_config.yaml launcher.slurm.partition",
    "SBATCH_GPUS_PER_NODE": "cluster_config.yaml launcher.slurm.gres",
    "VIRTUAL_ENV": "the workload's venv in cluster_config.yaml",
    "CONDA_PREFIX": "the workload's venv in cluster_config.yaml",
    "LLMB_PYTHON": "the workload's venv in cluster_config.yaml",
    "PATH": "the workload's venv in cluster_config.yaml",
    "LLMB_NODELIST": "--nodelist", "LLMB_EXCLUDE": "--exclude",
    "LLMB_RESERVATION": "--reservation", "LLMB_QOS": "--qos", "LLMB_SEGMENT": "--segment",
    "LLMB_SLURM_ARGS": "--slurm-arg",
}


class Refused(UsageError):
    """An env entry a run cannot take; str() is one line starting with where it was given."""


def brief(value: object) -> str:
    """A value for a message: a short prefix of it and its length (llmb.shared.values.brief)."""
    return values.brief(value if isinstance(value, str) else _text_repr(value), 80)


def _text_repr(value: object) -> str:
    try:
        return repr(value)
    except ValueError:  # an integer of more digits than Python converts to text
        return f"<{type(value).__name__}>"


def text_of(where: str, name: str, value: object) -> str:
    """A single value as the environment holds it (booleans as true/false), or Refused."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None or not isinstance(value, (str, int, float)):
        raise Refused(f"{where} {name}={values.shown(brief(value))} must be a text or "
                      "number value")
    try:
        return str(value)
    except ValueError:
        raise Refused(f"{where} {name}: the number has more digits than a value can "
                      "hold") from None


def check(where: str, name: object, value: object) -> str:
    """One entry of an env mapping; its value as text. `where` says where it was given
    (`--env`, `sweep.yaml: task 2: env`, `cluster_config.yaml: launcher.env`, `env`)."""
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise Refused(f"{where}: {values.shown(brief(name))} is not a variable name (letters, "
                      "digits and _, not starting with a digit)")
    if len(name) > MAX_NAME:
        raise Refused(f"{where}: {brief(name)} is longer than the {MAX_NAME} characters a "
                      "variable's name can be")
    if (refused := startvars.refusal(name, where)) is not None:
        raise Refused(refused)
    text = text_of(where, name, value)
    if len(text) > MAX_VALUE:
        raise Refused(f"{where} {name}={brief(text)} is longer than the {MAX_VALUE} characters "
                      "a run's setting can hold; put long content in a file and give its path")
    if (refused := startvars.refusal(name, where, text)) is not None:
        raise Refused(refused)
    if name in RESERVED:
        raise Refused(f"{where} {name}={values.shown(brief(text))}: llmb-run sets {name} "
                      f"itself (and records it in the history); use {RESERVED[name]}")
    if name in placement.SBATCH_INPUT_VARS:
        raise Refused(f"{where}: {placement.sbatch_environment_problem({name: text})}")
    found = values.control_characters(text)
    if found:
        raise Refused(f"{where} {name}={values.shown(text)} contains control character(s) "
                      f"{' '.join(found)}; remove them")
    return text
