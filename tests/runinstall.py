"""A minimal install for llmb-run's tests: cluster_config.yaml as the installer writes it (the
dev venv as every workload's venv, no image), and a way to run installer/llmb-run in it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
LLMB_RUN = REPO / "installer" / "llmb-run"
FIXTURE_RUNS = REPO / "tests" / "fixtures" / "logs" / "verdicts"


def make_install(root: Path, gpu_type: str = "h100", image: str | None = None,
                 env: dict[str, str] | None = None) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    token = root / ".hf_token"
    token.write_text("hf_from_file_abcdefgh\n")
    token.chmod(0o600)
    conf = {
        "schema": 1,
        "llmb": {"repo": str(REPO), "install_path": str(root)},
        "launcher": {"cluster_type": "slurm", "gpu_type": gpu_type,
                     "slurm": {"account": "acct", "partition": "batch", "gres": "gpu:8"},
                     "hf_token_file": str(token), "env": env or {}},
        "workloads": {w: {"venv": sys.prefix, "venv_kind": "venv", "image": image}
                      for w in ("pretrain_llama3.1", "pretrain_nemotron4")},
    }
    (root / "cluster_config.yaml").write_text(yaml.safe_dump(conf))
    return root


def fixture_run(job: str) -> Path:
    """The run directory (<exp>_<timestamp>) of a fixture log of this job id."""
    (log,) = FIXTURE_RUNS.glob(f"*/*/*/log-*_{job}_0.out")
    return log.parent.parent


def run(args: list[str], cwd: Path, path: str | None = None,
        **env: str) -> subprocess.CompletedProcess[str]:
    """installer/llmb-run ARGS from cwd; `path` replaces PATH (e.g. a directory of shims)."""
    full = {k: v for k, v in os.environ.items()
            if k not in ("LLMB_INSTALL", "HF_TOKEN") and not k.startswith(("SBATCH_", "SLURM_"))}
    full.update(LLMB_PYTHON=sys.executable, **env)
    if path is not None:
        full["PATH"] = path
    return subprocess.run(["bash", str(LLMB_RUN), *args], cwd=cwd, env=full,
                          capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)
