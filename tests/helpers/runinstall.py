"""An llmb install for llmb-run's tests, as the installer writes it, and installer/llmb-run run
in it.

`make_install(root, ...)` writes the 0600 token file and cluster_config.yaml (schema 1, the
installer's keys; the dev venv as every workload's venv); `cluster_config(...)` is that file's
content, for tests that write a second one. `llmb_run_env()` is a clean environment for
running llmb-run as a user would (nothing of this shell's install, Slurm job or secrets);
`run(...)` runs it. tests/helpers/fakeinstall.py adds images and runs; tests/e2e use the real
cluster.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from llmb.recipes import catalog
from paths import REPO

LLMB_RUN = REPO / "installer" / "llmb-run"
FIXTURE_RUNS = REPO / "tests" / "fixtures" / "logs" / "verdicts"
WORKLOADS = ("pretrain_llama3.1", "pretrain_nemotron4")
TOKEN = "hf_from_file_abcdefgh"


def cluster_config(root: Path, gpu_type: str = "h100", image: str | None = None,
                   env: dict[str, Any] | None = None, gres: str | None = "gpu:N",
                   workloads: tuple[str, ...] = WORKLOADS, account: str = "acct"
                   ) -> dict[str, Any]:
    """`gres` "gpu:N": every GPU of a node of the GPU type (gpu:8 on H100, gpu:4 on GB200)."""
    if gres == "gpu:N":
        gres = f"gpu:{catalog.get_gpu_type(gpu_type).gpus_per_node}"
    return {
        "schema": 1,
        "llmb": {"repo": str(REPO), "install_path": str(root)},
        "launcher": {"cluster_type": "slurm", "gpu_type": gpu_type,
                     "slurm": {"account": account, "partition": "batch",
                               "cpu_partition": "batch", "gres": gres},
                     "hf_token_file": str(root / ".hf_token"), "env": env or {}},
        "workloads": {w: {"recipe": catalog.find_recipe(w).name, "venv": sys.prefix,
                          "venv_kind": "venv", "image": image} for w in workloads},
    }


def make_install(root: Path, token: str = TOKEN, **config: Any) -> Path:
    """root with its token file and cluster_config.yaml (`config`: cluster_config's keywords)."""
    root.mkdir(parents=True, exist_ok=True)
    token_file = root / ".hf_token"
    token_file.write_text(token + "\n")
    token_file.chmod(0o600)
    (root / "cluster_config.yaml").write_text(yaml.safe_dump(cluster_config(root, **config)))
    return root


def fixture_run(job: str) -> Path:
    """The run directory (<exp>_<timestamp>) of a fixture log of this job id."""
    (log,) = FIXTURE_RUNS.glob(f"*/*/*/log-*_{job}_0.out")
    return log.parent.parent


def llmb_run_env(**extra: str) -> dict[str, str]:
    """This environment without an install, a Slurm job or a token of its own; `extra` added."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("LLMB_INSTALL", "HF_TOKEN", "STAGE_PATH")
           and not k.startswith(("SBATCH_", "SLURM_", "LLMB_"))}
    env.update({"LLMB_PYTHON": sys.executable, **extra})
    return env


def run(args: list[str], cwd: Path, path: str | None = None, timeout: float = 120,
        **env: str) -> subprocess.CompletedProcess[str]:
    """installer/llmb-run ARGS from cwd; `path` replaces PATH (e.g. a directory of shims)."""
    full = llmb_run_env(**env)
    if path is not None:
        full["PATH"] = path
    return subprocess.run(["bash", str(LLMB_RUN), *args], cwd=cwd, env=full,
                          capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def llmb_run(site: tuple[Path, dict[str, str]], *args: str, timeout: float = 300
             ) -> subprocess.CompletedProcess[str]:
    """installer/llmb-run ARGS in an install (site: its root and the environment to run in)."""
    root, env = site
    return subprocess.run(["bash", str(REPO / "installer" / "llmb-run"), *args], cwd=root,
                          env=env, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)
