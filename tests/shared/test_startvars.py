"""llmb.shared.startvars: the variables that make bash, the dynamic loader or Python run code or
change how they start are refused, each with its reason; settings a benchmark uses are not.
The loader's list is checked against the ld.so(8) manual page of this machine."""

from __future__ import annotations

import gzip
import re
import subprocess
import sys
from pathlib import Path

import pytest
from llmb.shared import startvars
from paths import REPO

REFUSED = [
    ("BASH_ENV", "bash runs the file it names"),
    ("ENV", "runs the file it names"),
    ("SHELLOPTS", "xtrace"),
    ("BASHOPTS", "shopt"),
    ("PS4", "command substitutions"),
    ("PS1", "expands it"),
    ("PROMPT_COMMAND", "runs it as a command"),
    ("BASH_FUNC_echo%%", "shell function"),
    ("BASH_XTRACEFD", "BASH_* variables"),
    ("BASH_COMPAT", "BASH_* variables"),
    ("BASH_LOADABLES_PATH", "BASH_* variables"),
    ("IFS", "split words"),
    ("CDPATH", "makes cd print"),
    ("GLOBIGNORE", "glob"),
    ("EXECIGNORE", "commands bash finds"),
    ("POSIXLY_CORRECT", "POSIX mode"),
    ("INPUTRC", "key bindings"),
    ("LD_PRELOAD", "loads the libraries it names"),
    ("LD_AUDIT", "audit libraries"),
    ("LD_LIBRARY_PATH", "directories it lists first"),
    ("LD_TRACE_LOADED_OBJECTS", "instead of running"),
    ("LD_BIND_NOW", "ld.so(8)"),
    ("LD_DEBUG_OUTPUT", "ld.so(8)"),
    ("LD_SOMETHING_NEW", "ld.so(8)"),
    ("GLIBC_TUNABLES", "how every program starts"),
    ("PYTHONPATH", "sitecustomize.py"),
    ("PYTHONHOME", "standard library"),
    ("PYTHONSTARTUP", "runs the file it names"),
    ("PYTHONINSPECT", "wait forever"),
    ("PYTHONUSERBASE", "usercustomize.py"),
    ("PYTHONEXECUTABLE", "reports the program"),
    ("PYTHONWARNINGS", "names a module"),
    ("PYTHONBREAKPOINT", "imports and calls"),
    ("PYTHONPYCACHEPREFIX", "compiled code"),
    ("PYTHONVERBOSE", "Python reads it when it starts"),
    ("PYTHON_PRESITE", "Python reads it when it starts"),
    ("SLURM_TASK_PROLOG", "before every task (--task-prolog)"),
    ("SLURM_TASK_EPILOG", "after every task (--task-epilog)"),
    ("SLURM_PROLOG", "before the step starts (--prolog)"),
    ("SLURM_EPILOG", "after the step ends (--epilog)"),
    ("SLURM_BCAST", "(--bcast)"),
    ("SLURM_BCAST_EXCLUDE", "copies with the program"),
    ("SLURM_SEND_LIBS", "(--send-libs)"),
    ("SLURM_TEST_EXEC", "looks for the program"),
    ("SLURM_EXPORT_ENV", "(--export)"),
    ("SLURM_MPI_TYPE", "(--mpi)"),
    ("SRUN_INPUT", "(--input)"),
    ("SRUN_OUTPUT", "(--output)"),
    ("SRUN_ERROR", "(--error)"),
    ("SLURM_CONF", "slurm.conf"),
    ("SBATCH_CONTAINER", "OCI bundle"),
    ("SALLOC_CONTAINER", "OCI bundle"),
    ("SALLOC_CONTAINER_ID", "OCI container"),
    ("_SLURM_SPANK_OPTION_pyxis_container_image", "SPANK plugin"),
    ("SPANK__SLURM_SPANK_OPTION_pyxis_container_mounts", "SPANK plugin"),
    ("NCCL_CONF_FILE", "NCCL reads its settings"),
    ("CUDA_INJECTION64_PATH", "CUDA driver loads"),
    ("CUDA_INJECTION32_PATH", "CUDA driver loads"),
    ("NVTX_INJECTION64_PATH", "NVTX loads"),
    ("NVTX_INJECTION32_PATH", "NVTX loads"),
]
ALLOWED = ["NCCL_DEBUG", "MAX_STEPS", "TIME_LIMIT", "SMOKE_TEST", "PYTHONUNBUFFERED",
           "PYTHONIOENCODING", "PYTHONFAULTHANDLER", "PYTHONHASHSEED", "TOKENIZERS_PARALLELISM",
           "HOME", "LANG", "CUDA_VISIBLE_DEVICES", "BASHFUL", "LDX", "ENVIRONMENT",
           "SLURM_CPU_BIND", "NCCL_IB_HCA", "NCCL_SOCKET_IFNAME", "NCCL_NET"]
PLUGINS = ["NCCL_NET_PLUGIN", "NCCL_TUNER_PLUGIN", "NCCL_PROFILER_PLUGIN", "NCCL_ENV_PLUGIN",
           "NCCL_GIN_PLUGIN", "NCCL_RMA_PLUGIN"]


@pytest.mark.parametrize("name", PLUGINS)
def test_an_nccl_plugin_is_named_never_given_by_path(name: str) -> None:
    """NCCL dlopens the value as given, then libnccl-<kind>-<value>.so: a name is looked up in
    the site's library path, a path loads the caller's file into every rank."""
    for value in ("aws-ofi", "libnccl-net.so", "STATIC_PLUGIN", "none", "ofi,ib"):
        assert startvars.problem(name, value) is None
    for value in ("/tmp/x.so", "./x.so", "../lib/x.so", "a b", "x;id"):
        line = startvars.refusal(name, "bulk.yaml: task 1: env", value)
        assert line == (f"bulk.yaml: task 1: env {name} cannot be a path: NCCL loads the shared "
                        "object it names into every rank: give the plugin's name (e.g. aws-ofi, "
                        "loaded from the system's library path), not a path")


@pytest.mark.parametrize(("name", "why"), REFUSED)
def test_refused_with_its_reason(name: str, why: str) -> None:
    problem = startvars.problem(name)
    assert problem is not None and why in problem
    line = startvars.refusal(name, "--env")
    assert line is not None and line.startswith(f"--env {name} cannot be set for a run: ")
    assert "\n" not in line


@pytest.mark.parametrize("name", ALLOWED)
def test_settings_a_run_uses_are_allowed(name: str) -> None:
    assert startvars.problem(name) is None
    assert startvars.refusal(name) is None


def test_every_variable_of_the_loader_manual_page_is_refused() -> None:
    page = Path("/usr/share/man/man8/ld.so.8.gz")
    if not page.is_file():
        pytest.skip("no ld.so(8) manual page on this machine")
    text = gzip.decompress(page.read_bytes()).decode(errors="replace")
    names = set(re.findall(r"\b(LD_[A-Z0-9_]+|GLIBC_TUNABLES)\b", text))
    assert {"LD_PRELOAD", "LD_AUDIT", "LD_LIBRARY_PATH"} <= names
    assert [n for n in sorted(names) if startvars.problem(n) is None] == []


def test_every_variable_bash_ignores_in_privileged_mode_is_refused() -> None:
    """bash(1) names, for privileged mode, what it would otherwise take from the environment:
    shell functions, SHELLOPTS, BASHOPTS, CDPATH and GLOBIGNORE (and BASH_ENV, ENV)."""
    for name in ("BASH_FUNC_ls%%", "SHELLOPTS", "BASHOPTS", "CDPATH", "GLOBIGNORE",
                 "BASH_ENV", "ENV"):
        assert startvars.problem(name) is not None, name


SCRIPT = REPO / "common" / "llmb" / "shared" / "startvars.py"


@pytest.mark.parametrize("name", startvars.INHERITED)
def test_launch_sh_check_of_its_own_environment(name: str) -> None:
    """`python3 -E -S startvars.py inherited` (common/lib.sh runs it): exit 2 and one line."""
    proc = subprocess.run([sys.executable, "-E", "-S", str(SCRIPT), "inherited"],
                          env={"PATH": "/usr/bin:/bin", name: "1"}, capture_output=True,
                          text=True, timeout=30, stdin=subprocess.DEVNULL)
    assert proc.returncode == 2
    assert proc.stdout.startswith(f"{name} is set in the environment: ")
    assert proc.stdout.count("\n") == 1


def test_a_site_setup_in_the_environment_is_launch_sh_s_to_keep() -> None:
    """Lmod's BASH_ENV and module functions, LD_LIBRARY_PATH, PYTHONPATH: the user's own
    environment, which sbatch hands on to the job as it is."""
    env = {"PATH": "/usr/bin:/bin", "BASH_ENV": "/usr/share/lmod/lmod/init/bash",
           "BASH_FUNC_module%%": "() { :; }", "LD_LIBRARY_PATH": "/opt/cuda/lib64",
           "PYTHONPATH": "/opt/site"}
    proc = subprocess.run([sys.executable, "-E", "-S", str(SCRIPT), "inherited"], env=env,
                          capture_output=True, text=True, timeout=30,
                          stdin=subprocess.DEVNULL)
    assert (proc.returncode, proc.stdout) == (0, "")
