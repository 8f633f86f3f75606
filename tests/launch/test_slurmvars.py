"""llmb.launch.slurmvars: Slurm's variables (SBATCH_ACCOUNT, SBATCH_PARTITION,
SBATCH_GPUS_PER_NODE) and the image file pyxis reads, each refusal one line, through launch.sh's
request."""

from __future__ import annotations

from pathlib import Path

import pytest
from launchvalidation import (
    assert_hostile_refused,
    assert_refused,
    env_for,
    error,
    make_install,
    recipe,
)
from llmb.launch import request
from specialfiles import plant


@pytest.fixture
def install(tmp_path: Path) -> Path:
    return make_install(tmp_path)


@pytest.mark.parametrize(("name", "extra", "message"), [
    ("llama3.1", {"SBATCH_ACCOUNT": None}, "SBATCH_ACCOUNT is not set"),
    ("llama3.1", {"SBATCH_PARTITION": None}, "SBATCH_PARTITION is not set"),
    ("llama3.1", {"SBATCH_GPUS_PER_NODE": "eight"},
     "SBATCH_GPUS_PER_NODE=eight is not a GPU GRES request; use gpu:N or gpu:TYPE:N"),
    ("llama3.1", {"SBATCH_GPUS_PER_NODE": "gpu:h100:4"},
     "SBATCH_GPUS_PER_NODE=gpu:h100:4 asks for 4 GPUs per node, but a h100 job runs 8 tasks "
     "per node, each on one GPU: use gpu:h100:8 (GPUS_PER_NODE=8), or unset it"),
])
def test_validation(install: Path, name: str, extra: dict[str, str | None],
                    message: str) -> None:
    assert_refused(install, name, extra, message)


HOSTILE = [
    ({"SBATCH_ACCOUNT": "a$(id)"}, "SBATCH_ACCOUNT=a$(id) contains $ ( ), which a Slurm account"),
    ({"SBATCH_PARTITION": "a b"}, "SBATCH_PARTITION=a b contains a space"),
    ({"SBATCH_GPUS_PER_NODE": "3"}, "SBATCH_GPUS_PER_NODE=3 asks for 3 GPUs per node, but a h100 "
     "job runs 8 tasks per node, each on one GPU: use gpu:8"),
]


@pytest.mark.parametrize(("extra", "message"), HOSTILE, ids=[m[:40] for _, m in HOSTILE])
def test_hostile_values_are_refused_in_one_line(install: Path, extra: dict[str, str],
                                                message: str) -> None:
    assert_hostile_refused(install, extra, message)


@pytest.mark.parametrize(("value", "gres"), [
    ("8", "gpu:8"), ("gpu:8", "gpu:8"), ("gpu:h100:8", "gpu:h100:8"), (None, None)])
def test_the_gres_request_takes_every_form_of_the_rule(install: Path, value: str | None,
                                                      gres: str | None) -> None:
    req = request.from_env(recipe("nemotron"), env_for(install, SBATCH_GPUS_PER_NODE=value))
    assert req.slurm is not None
    assert (str(req.slurm.gres) if req.slurm.gres else None) == gres


def test_missing_image_is_an_error_and_a_dry_run_says_so(install: Path) -> None:
    (install / "images" / "nvidia+nemo+25.04.01.sqsh").unlink()
    assert "does not exist; run ./setup.sh" in error("nemotron", env_for(install))
    req = request.from_env(recipe("nemotron"), env_for(install, DRY_RUN="true"))
    assert any("does not exist; run ./setup.sh" in w and w.endswith("(the real run refuses it)")
               for w in req.warnings)
    # an image named on purpose is a value: refused by the dry run as by the real run
    assert error("nemotron", env_for(install, DRY_RUN="true", RUN_CONF_IMAGE="/no/x.sqsh")) \
        .startswith("RUN_CONF_IMAGE=/no/x.sqsh does not exist")


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
@pytest.mark.parametrize("dry_run", ["true", "false"])
def test_an_image_that_is_not_a_regular_file_is_refused(install: Path, tmp_path: Path,
                                                        kind: str, dry_run: str) -> None:
    """pyxis reads the image as a squashfs file: a FIFO or a device there is no image."""
    image = tmp_path / "img.sqsh"
    plant(image, kind)
    assert error("nemotron", env_for(install, DRY_RUN=dry_run, RUN_CONF_IMAGE=str(image))) == (
        f"RUN_CONF_IMAGE={image} is not a regular file (a FIFO or a device); run ./setup.sh "
        "(it imports nvcr.io/nvidia/nemo:25.04.01) or set RUN_CONF_IMAGE")
