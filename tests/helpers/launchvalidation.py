"""launch.sh's variables for the validation tests of llmb.launch.request, slurmvars and
runaivars: an install with its image in place, and the refusal a request ends in."""

from __future__ import annotations

from pathlib import Path

import pytest
from llmb.launch import request
from llmb.recipes import catalog
from paths import REPO


def make_install(tmp_path: Path) -> Path:
    """An install directory whose default image exists (setup.sh has run)."""
    images = tmp_path / "install" / "images"
    images.mkdir(parents=True)
    (images / "nvidia+nemo+25.04.01.sqsh").touch()
    return tmp_path / "install"


def recipe(name: str) -> catalog.Recipe:
    return catalog.load_recipe(REPO / name)


def env_for(install: Path, **extra: str) -> dict[str, str]:
    env = {"LLMB_INSTALL": str(install), "SBATCH_ACCOUNT": "acct", "SBATCH_PARTITION": "batch",
           "HF_TOKEN": "hf_test_token", "JOB_TOTAL_GPUS": "16"}
    env.update(extra)
    return {k: v for k, v in env.items() if v is not None}


def runai_env(install: Path, **extra: str) -> dict[str, str]:
    env = env_for(install, CLUSTER_TYPE="runai", CUSTOM_MOUNT="ws:/workspace:claim-a",
                  BASE_URL="https://runai.example/api/v1", APP_ID="app", APP_SECRET="s3cret",
                  PROJECT_NAME="proj", PVC_DIR="/workspace/nemo-run")
    env.update(extra)
    return env


def error(name: str, env: dict[str, str]) -> str:
    """The one line a request for recipe `name` is refused with."""
    with pytest.raises(request.RequestError) as info:
        request.from_env(recipe(name), env)
    return str(info.value)


def assert_refused(install: Path, name: str, extra: dict[str, str | None], message: str) -> None:
    """launch.sh's request for recipe `name` with `extra` set (None: unset) is refused in one
    line that starts with `message`."""
    env = env_for(install)
    env.update({k: v for k, v in extra.items() if v is not None})
    for k, v in extra.items():
        if v is None:
            env.pop(k, None)
    text = error(name, env)
    assert text.startswith(message), text
    assert "\n" not in text


def assert_hostile_refused(install: Path, extra: dict[str, str], message: str) -> None:
    """A hostile value for Llama 3.1's launch.sh is refused in one line starting with
    `message` (no line break, no carriage return, never the token)."""
    text = error("llama3.1", env_for(install, **extra))
    assert text.startswith(message), text
    assert "\n" not in text and "\r" not in text
    assert "hf_secret" not in text
