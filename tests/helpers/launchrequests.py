"""Launch requests for the tests of llmb.launch: launch.sh's variables for a dry run."""

from __future__ import annotations

from pathlib import Path

from llmb.launch import request
from llmb.recipes import catalog

INSTALL = Path("/llmb-install")  # never touched: dry runs write nothing
RUNAI_ENV = dict(CLUSTER_TYPE="runai", CUSTOM_MOUNT="workspace:/workspace:llmb-claim",
                 BASE_URL="https://runai.example.com/api/v1", APP_ID="llmb-app",
                 APP_SECRET="app-secret-value", PROJECT_NAME="bench",
                 PVC_DIR="/workspace/nemo-run")


def env_for(**extra: str) -> dict[str, str]:
    env = {"LLMB_INSTALL": str(INSTALL), "SBATCH_ACCOUNT": "acct", "SBATCH_PARTITION": "batch",
           "HF_TOKEN": "hf_do_not_print", "DRY_RUN": "true"}
    env.update(extra)
    return env


def make_request(recipe: str, **extra: str) -> request.Request:
    return request.from_env(catalog.find_recipe(recipe), env_for(**extra))
