"""llmb.launch.runaivars: Run:ai's variables (CUSTOM_MOUNT, BASE_URL, APP_ID, APP_SECRET,
PROJECT_NAME, PVC_DIR), each refusal one line, through launch.sh's request."""

from __future__ import annotations

from pathlib import Path

import pytest
from launchvalidation import error, make_install, recipe, runai_env
from llmb.launch import request, runaivars


@pytest.fixture
def install(tmp_path: Path) -> Path:
    return make_install(tmp_path)


@pytest.mark.parametrize("missing", runaivars.RUNAI_VARS)
def test_runai_variables_required(install: Path, missing: str) -> None:
    env = runai_env(install)
    env.pop(missing)
    assert error("nemotron", env).startswith(f"{missing} is not set; CLUSTER_TYPE=runai needs")


def test_runai_validation(install: Path) -> None:
    req = request.from_env(recipe("nemotron"), runai_env(install))
    assert req.runai is not None and req.image == "nvcr.io/nvidia/nemo:25.04.01"
    assert "s3cret" not in repr(req)
    assert "is not name:path:claimName" in error("nemotron",
                                                 runai_env(install, CUSTOM_MOUNT="ws:/x"))
    assert "is not under the CUSTOM_MOUNT path" in error("nemotron",
                                                         runai_env(install, PVC_DIR="/elsewhere"))
    assert "is not an http(s) URL" in error("nemotron", runai_env(install, BASE_URL="runai"))


def test_runai_hostile_values(install: Path) -> None:
    assert error("nemotron", runai_env(install, PVC_DIR="/workspace/a b")).startswith(
        "PVC_DIR=/workspace/a b contains a space")
    assert error("nemotron", runai_env(install, PVC_DIR="nemo-run")).startswith(
        "PVC_DIR=nemo-run is not an absolute path")
    assert "is not a Kubernetes name" in error("nemotron", runai_env(
        install, CUSTOM_MOUNT="WS:/workspace:claim"))
    assert error("nemotron", runai_env(install, APP_SECRET="s3\ncret")) == (
        "APP_SECRET contains control character(s) \\n, which would end or garble a line of the "
        "job script; remove them")
