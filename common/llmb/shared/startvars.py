"""Environment variables that make a shell, the dynamic loader or Python run code, or change how
they start: never taken from a value people give for a run.

A run's environment is assembled from llmb-run's `--env`, a bulk file's `env`,
cluster_config.yaml's `launcher.env`, a history record that `rerun` replays and the installer's
`env:`. Every program of the run starts with it: launch.sh (bash), the Python launcher, sbatch,
the job's batch script and each task (bash, then Python). A variable those programs read when
they start can name code to run, so a value meant as a setting would run a command:

- bash (bash(1), INVOCATION and Shell Variables): BASH_ENV names a file every non-interactive
  bash sources before its script, `--dry-run` included; ENV the same for sh and POSIX mode;
  SHELLOPTS and BASHOPTS switch options on at start (xtrace floods the output), PS4 is expanded,
  command substitutions included, before each traced command; exported functions
  (BASH_FUNC_<name>%%) replace commands; IFS, CDPATH, GLOBIGNORE, EXECIGNORE change how words
  split, where `cd` goes (and make it print) and what globs and command searches find;
  POSIXLY_CORRECT switches to POSIX mode; the BASH_* variables are bash's own.
- the dynamic loader (ld.so(8), ENVIRONMENT): every LD_* variable (LD_PRELOAD and LD_AUDIT load
  a library into every program, LD_LIBRARY_PATH picks where libraries come from,
  LD_TRACE_LOADED_OBJECTS makes programs list their libraries instead of running, ...) and
  GLIBC_TUNABLES.
- Python (Python's "Command line and environment" documentation): PYTHONPATH (a
  sitecustomize.py there runs in every Python), PYTHONHOME, PYTHONSTARTUP, PYTHONINSPECT (a
  prompt after the program: a launch that waits forever), PYTHONUSERBASE, PYTHONEXECUTABLE,
  PYTHONWARNINGS and PYTHONBREAKPOINT (they name modules Python imports),
  PYTHONPYCACHEPREFIX (where compiled code is read from), ...: every PYTHON* variable
  (the group that `python -E` ignores) except the few that only change output or encoding.
- Slurm (sbatch(1), srun(1), salloc(1), INPUT ENVIRONMENT VARIABLES; SchedMD/slurm
  doc/man/man1): the job's srun reads its options from SLURM_* variables, and some of those
  name a program it runs or change how it starts the tasks: SLURM_TASK_PROLOG and
  SLURM_TASK_EPILOG (--task-prolog/--task-epilog: a program run before and after every task),
  SLURM_PROLOG and SLURM_EPILOG (--prolog/--epilog: a program srun runs before and after the
  step), SLURM_BCAST, SLURM_BCAST_EXCLUDE and SLURM_SEND_LIBS (--bcast, --send-libs: the
  program and its libraries copied to the nodes and run from there), SLURM_TEST_EXEC,
  SLURM_EXPORT_ENV (--export: the environment the tasks start with), SLURM_MPI_TYPE (--mpi: the
  plugin that starts them), SRUN_INPUT/SRUN_OUTPUT/SRUN_ERROR (where the tasks' input and output
  go), SLURM_CONF (the slurm.conf every Slurm command reads: its plugins and prologs), and the
  container variables SBATCH_CONTAINER, SALLOC_CONTAINER (an OCI bundle whose runtime runs the
  job). SPANK plugins such as pyxis take their options from variables named
  `_SLURM_SPANK_OPTION_<plugin>_<option>` (slurm src/common/spank.h, SPANK_OPTION_ENV_PREFIX;
  spank(8)): the container image and mounts every task runs in.
- NCCL (its user guide, docs/userguide/source/env.rst): NCCL_NET_PLUGIN, NCCL_TUNER_PLUGIN,
  NCCL_PROFILER_PLUGIN, NCCL_ENV_PLUGIN, and in newer releases NCCL_GIN_PLUGIN and
  NCCL_RMA_PLUGIN (src/plugin) name a shared object NCCL loads into every rank: a name (`foo`,
  loaded as foo or libnccl-net-foo.so from the system's library path) is the site's choice and
  may be given, a path is refused; NCCL_CONF_FILE names a file of NCCL settings (which could
  name such a path) and is refused.
- CUDA (CUPTI's documentation, "Injection"; NVTX's nvtx3 headers): CUDA_INJECTION64_PATH and
  CUDA_INJECTION32_PATH name a library the CUDA driver loads into every process that starts
  CUDA, NVTX_INJECTION64_PATH and NVTX_INJECTION32_PATH one NVTX loads at the first range.

`problem(name, value)` says in words why a variable is refused (None when it may be set); every
place a run's environment comes from refuses with it, in one line naming the variable and why.
Standard library only; no import of the rest of llmb.
"""

from __future__ import annotations

import re

# bash: the variables it reads when it starts, or that change how a script's words, `cd`,
# globs and command lookup behave (bash(1): INVOCATION, Shell Variables).
_BASH = {
    "BASH_ENV": "bash runs the file it names before every script it starts (launch.sh, the "
                "job's batch script, each task), a dry run included",
    "ENV": "sh, and bash as sh or in POSIX mode, runs the file it names when it starts",
    "SHELLOPTS": "bash turns on every option it lists when it starts (xtrace prints every "
                 "command of every script)",
    "BASHOPTS": "bash turns on every shopt option it lists when it starts",
    "PS4": "bash expands it, command substitutions included, before each traced command",
    "PS0": "an interactive bash expands it, command substitutions included",
    "PS1": "an interactive bash expands it, command substitutions included",
    "PS2": "an interactive bash expands it, command substitutions included",
    "PS3": "bash shows it for select, expanded",
    "PROMPT_COMMAND": "an interactive bash runs it as a command before each prompt",
    "IFS": "it changes how shells split words",
    "CDPATH": "it changes where cd goes and makes cd print the directory, which scripts read",
    "GLOBIGNORE": "it changes which files a glob finds (and turns on dotglob)",
    "EXECIGNORE": "it changes which commands bash finds on PATH",
    "FIGNORE": "it changes how bash completes file names",
    "POSIXLY_CORRECT": "bash switches to POSIX mode (and then runs the file ENV names)",
    "FUNCNEST": "it limits how deeply bash functions may call each other: scripts stop",
    "TMOUT": "bash times out reads and interactive shells with it",
    "INPUTRC": "readline reads key bindings (which can run commands) from the file it names",
}
# The dynamic loader: every LD_* variable it documents, and the tunables (ld.so(8)).
_LOADER_PREFIX = "LD_"
_LOADER = {
    "LD_PRELOAD": "the dynamic loader loads the libraries it names into every program",
    "LD_AUDIT": "the dynamic loader loads the audit libraries it names into every program",
    "LD_LIBRARY_PATH": "the dynamic loader takes every program's libraries from the "
                       "directories it lists first",
    "LD_TRACE_LOADED_OBJECTS": "every program lists its libraries instead of running",
    "GLIBC_TUNABLES": "the dynamic loader and the C library change how every program starts",
}
_LOADER_ANY = "the dynamic loader reads it when every program starts (ld.so(8))"
# Python: every PYTHON* variable changes how Python starts, except these, which only change
# output buffering, text encoding, hashing or where bytecode is not written.
_PYTHON_PREFIX = "PYTHON"
_PYTHON_HARMLESS = frozenset({
    "PYTHONUNBUFFERED", "PYTHONIOENCODING", "PYTHONFAULTHANDLER", "PYTHONDONTWRITEBYTECODE",
    "PYTHONHASHSEED", "PYTHONUTF8", "PYTHONCOERCECLOCALE", "PYTHONNODEBUGRANGES",
})
_PYTHON = {
    "PYTHONPATH": "Python imports from the directories it lists first (a sitecustomize.py "
                  "there runs in every Python)",
    "PYTHONHOME": "Python takes its whole standard library from the directory it names",
    "PYTHONSTARTUP": "Python runs the file it names when it starts interactively",
    "PYTHONINSPECT": "Python stops at a prompt after the program instead of exiting (a launch "
                     "would wait forever)",
    "PYTHONUSERBASE": "Python imports from the site-packages under it (a usercustomize.py "
                      "there runs in every Python)",
    "PYTHONEXECUTABLE": "Python reports the program it names as itself",
    "PYTHONWARNINGS": "a warning category in it names a module Python imports",
    "PYTHONBREAKPOINT": "it names a function Python imports and calls",
    "PYTHONPYCACHEPREFIX": "Python reads compiled code from the directory it names",
    "PYTHONPLATLIBDIR": "Python imports its compiled modules from the directory it names",
    "PYTHONSAFEPATH": "it changes where Python imports from",
    "PYTHONOPTIMIZE": "Python leaves out assert statements and docstrings",
}
_PYTHON_ANY = "Python reads it when it starts: it changes what Python imports or how it runs"
_BASH_FUNC = re.compile(r"BASH_FUNC_.*")
# Slurm: srun, sbatch and salloc read these when they start (their INPUT ENVIRONMENT VARIABLES).
_SLURM = {
    "SLURM_TASK_PROLOG": "srun runs the program it names before every task (--task-prolog)",
    "SLURM_TASK_EPILOG": "srun runs the program it names after every task (--task-epilog)",
    "SLURM_PROLOG": "srun runs the program it names before the step starts (--prolog)",
    "SLURM_EPILOG": "srun runs the program it names after the step ends (--epilog)",
    "SLURM_BCAST": "srun copies the program to the nodes and runs that copy (--bcast)",
    "SLURM_BCAST_EXCLUDE": "it changes which libraries srun copies with the program",
    "SLURM_SEND_LIBS": "srun copies the program's libraries to the nodes (--send-libs)",
    "SLURM_TEST_EXEC": "it changes how srun looks for the program before it starts it",
    "SLURM_EXPORT_ENV": "it changes the environment every task starts with (--export)",
    "SLURM_MPI_TYPE": "it changes the plugin that starts the tasks (--mpi)",
    "SRUN_INPUT": "it changes where the tasks' input comes from (--input)",
    "SRUN_OUTPUT": "it changes where the tasks' output goes (--output): the logs llmb reads",
    "SRUN_ERROR": "it changes where the tasks' errors go (--error)",
    "SLURM_CONF": "every Slurm command reads the slurm.conf it names: its plugins and prologs",
    "SBATCH_CONTAINER": "the job runs in the OCI bundle it names (--container)",
    "SBATCH_CONTAINER_ID": "the job runs in the OCI container it names (--container-id)",
    "SALLOC_CONTAINER": "the job runs in the OCI bundle it names (--container)",
    "SALLOC_CONTAINER_ID": "the job runs in the OCI container it names (--container-id)",
}
_SPANK_OPTION = "_SLURM_SPANK_OPTION_"
_SPANK = ("a SPANK plugin (pyxis: the container image and mounts) reads it as one of its "
          "options for every task")
# NCCL and the CUDA stack: a library of the caller's choosing loaded into every rank.
_NCCL_PLUGINS = ("NCCL_NET_PLUGIN", "NCCL_TUNER_PLUGIN", "NCCL_PROFILER_PLUGIN",
                 "NCCL_ENV_PLUGIN", "NCCL_GIN_PLUGIN", "NCCL_RMA_PLUGIN")
_PLUGIN_NAMES = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*(?:,[A-Za-z0-9_][A-Za-z0-9_.+-]*)*")
_CUDA = {
    "NCCL_CONF_FILE": "NCCL reads its settings from the file it names (a plugin's path among "
                      "them)",
    "CUDA_INJECTION64_PATH": "the CUDA driver loads the library it names into every process",
    "CUDA_INJECTION32_PATH": "the CUDA driver loads the library it names into every process",
    "NVTX_INJECTION64_PATH": "NVTX loads the library it names into every process",
    "NVTX_INJECTION32_PATH": "NVTX loads the library it names into every process",
}


def problem(name: str, value: str | None = None) -> str | None:
    """Why a run's environment may not take `name` (set to `value`, where the value decides)
    from people, in words; None when it may."""
    if name in _NCCL_PLUGINS:
        if value is None or _PLUGIN_NAMES.fullmatch(value):
            return None
        return ("NCCL loads the shared object it names into every rank: give the plugin's name "
                "(e.g. aws-ofi, loaded from the system's library path), not a path")
    return _by_name(name)


def _by_name(name: str) -> str | None:
    if name in _SLURM:
        return _SLURM[name]
    if _SPANK_OPTION in name:
        return _SPANK
    if name in _CUDA:
        return _CUDA[name]
    if name in _BASH:
        return _BASH[name]
    if _BASH_FUNC.fullmatch(name):
        return "bash imports it as a shell function, which replaces the command of that name"
    if name.startswith("BASH_"):
        return "bash sets or reads its BASH_* variables itself"
    if name in _LOADER:
        return _LOADER[name]
    if name.startswith(_LOADER_PREFIX):
        return _LOADER_ANY
    if name in _PYTHON:
        return _PYTHON[name]
    if name.startswith(_PYTHON_PREFIX) and name not in _PYTHON_HARMLESS:
        return _PYTHON_ANY
    return None


def refusal(name: str, where: str = "", value: str | None = None) -> str | None:
    """The one line that refuses `name` (prefixed by `where`, e.g. `--env`), or None."""
    why = problem(name, value)
    if why is None:
        return None
    prefix = f"{where} " if where else ""
    if name in _NCCL_PLUGINS:
        return f"{prefix}{name} cannot be a path: {why}"
    return (f"{prefix}{name} cannot be set for a run: {why}; leave it out (a launch never "
            "needs it)")


# What launch.sh refuses in its OWN environment (the shell that runs it, whose variables sbatch
# hands on to the job): options that make every bash of the job print or stop, and a prompt
# after the launcher. A site's own setup (Lmod's BASH_ENV and module functions, LD_LIBRARY_PATH,
# PYTHONPATH) is the user's environment, passed on as sbatch passes it, and stays allowed.
# (LD_TRACE_LOADED_OBJECTS stops bash itself before launch.sh's first line: nothing to check.)
INHERITED = ("SHELLOPTS", "BASHOPTS", "PYTHONINSPECT")


def inherited_refusal(environ: dict[str, str] | None = None) -> str | None:
    """The one line refusing the first INHERITED variable set (non-empty) in environ, or None."""
    import os

    env = os.environ if environ is None else environ
    for name in INHERITED:
        if env.get(name, "").strip():
            return (f"{name} is set in the environment: {problem(name)}; unset it before "
                    "launching")
    return None


def main(argv: list[str]) -> int:
    """`python3 -E -S startvars.py inherited`: launch.sh's check of its own environment; the
    refusal on stdout, exit 2 (with -E the check itself ignores every PYTHON* variable)."""
    import sys

    if argv != ["inherited"]:
        print("usage: python3 -E -S startvars.py inherited", file=sys.stderr)
        return 2
    refused = inherited_refusal()
    if refused:
        print(refused)
        return 2
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
