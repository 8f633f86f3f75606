"""The end-to-end tier's shared fixture: an install with the workload venv active."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from paths import E2E_BIN


@pytest.fixture(scope="module")
def install(tmp_path_factory, slurm_cluster) -> dict[str, str]:
    """A fresh LLMB_INSTALL and the environment of a user with the workload venv active."""
    root = tmp_path_factory.mktemp("llmb-install")
    images = root / "images"
    images.mkdir()
    # setup.sh imports the container here; the test cluster runs no container, so an empty
    # placeholder at that path stands in for it.
    (images / "nvidia+nemo+25.04.01.sqsh").write_bytes(b"")
    venv_bin = Path(sys.executable).parent
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_"))}
    env.update(slurm_cluster)
    env.update({
        "LLMB_INSTALL": str(root),
        "VIRTUAL_ENV": str(venv_bin.parent),
        "PATH": f"{E2E_BIN}:{venv_bin}:{env.get('PATH', '/usr/bin:/bin')}",
        "SBATCH_ACCOUNT": "testacct",
        "SBATCH_PARTITION": "batch",
        "SMOKE_TEST": "true",
        "TIME_LIMIT": "00:15:00",
    })
    env.pop("STAGE_PATH", None)
    env.pop("HF_TOKEN", None)
    return env
