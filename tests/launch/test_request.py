"""llmb.launch.request: every validation of the launch environment, its message, and the
defaults."""

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
    runai_env,
)
from llmb.launch import request


@pytest.fixture
def install(tmp_path: Path) -> Path:
    return make_install(tmp_path)




def test_defaults(install: Path) -> None:
    req = request.from_env(recipe("llama3.1"), env_for(install))
    cfg = req.config
    assert (cfg.model_size, cfg.dtype, cfg.gpu_type, cfg.scaling) == ("8b", "fp8", "h100", "weak")
    assert cfg.gpus_per_node == 8 and cfg.nodes == 2
    assert req.cluster_type == "slurm" and req.max_steps == 50
    assert (req.profile_start_step, req.profile_stop_step) == (20, 25)  # seed 003's
    assert req.time_limit == "00:30:00"
    assert req.llmb_workload == install / "workloads" / "pretrain_llama3.1"
    assert req.image == str(install / "images" / "nvidia+nemo+25.04.01.sqsh")
    assert req.warnings == ()


def test_values_are_case_insensitive(install: Path) -> None:
    req = request.from_env(recipe("nemotron"), env_for(
        install, MODEL_SIZE="340B", DTYPE="BF16", GPU_TYPE="GB200", STRONG_SCALING="Yes",
        JOB_TOTAL_GPUS="256", ENABLE_PROFILE="ON", DRY_RUN="1"))
    assert (req.config.model_size, req.config.dtype, req.config.gpu_type) == ("340b", "bf16",
                                                                              "gb200")
    assert req.config.scaling == "strong" and req.profile and req.dry_run


@pytest.mark.parametrize(("name", "extra", "message"), [
    ("llama3.1", {"DTYPE": "fp16"}, "DTYPE=fp16 is not supported by llama3.1; allowed: bf16, fp8"),
    ("nemotronh", {"DTYPE": "bf16", "JOB_TOTAL_GPUS": "32"},
     "DTYPE=bf16 is not supported by nemotronh; allowed: fp8"),
    ("nemotronh", {"DTYPE": "fp16"}, "DTYPE=fp16 is not supported by nemotronh; allowed: fp8"),
    ("llama3.1", {"MODEL_SIZE": "13b"},
     "MODEL_SIZE=13b is not supported by llama3.1; allowed: 8b, 70b, 405b"),
    ("llama3.1", {"GPU_TYPE": "a100"}, "GPU_TYPE=a100 is not supported by llama3.1; allowed: h100"),
    ("llama3.1", {"GPU_TYPE": "gb200"},
     "GPU_TYPE=gb200 is not supported by llama3.1; allowed: h100"),
    ("nemotron", {"GPU_TYPE": "gb200"},
     "GPU_TYPE=gb200 is not supported by nemotron 15b fp8; allowed: h100"),
    ("nemotron", {"STRONG_SCALING": "true"},
     "STRONG_SCALING=true is not published for nemotron 15b fp8 on h100; published: weak scaling"),
    ("llama3.1", {"CLUSTER_TYPE": "k8s"},
     "CLUSTER_TYPE=k8s is not known; allowed: slurm, runai, local"),
    ("llama3.1", {"CLUSTER_TYPE": "runai"},
     "CLUSTER_TYPE=runai is not supported by llama3.1; allowed: slurm, local"),
    ("llama3.1", {"JOB_TOTAL_GPUS": None}, "JOB_TOTAL_GPUS is not set; set it to a positive "
     "integer (the total number of GPUs for the job)"),
    ("llama3.1", {"JOB_TOTAL_GPUS": "abc"}, "JOB_TOTAL_GPUS=abc is not a positive integer"),
    ("llama3.1", {"JOB_TOTAL_GPUS": "0"}, "JOB_TOTAL_GPUS=0 is not a positive integer"),
    ("llama3.1", {"JOB_TOTAL_GPUS": "-8"}, "JOB_TOTAL_GPUS=-8 is not a positive integer"),
    ("llama3.1", {"JOB_TOTAL_GPUS": "24"}, "JOB_TOTAL_GPUS=24 is not a published scale for "
     "llama3.1 8b fp8 on h100; published: 8, 16, 32, 64, 128"),
    ("llama3.1", {"JOB_TOTAL_GPUS": "12"},
     "JOB_TOTAL_GPUS=12 is not a multiple of GPUS_PER_NODE=8 for h100"),
    ("nemotron", {"JOB_TOTAL_GPUS": "64", "MODEL_SIZE": "340b", "GPU_TYPE": "gb200",
                  "STRONG_SCALING": "true"},
     "JOB_TOTAL_GPUS=64 is not a published scale for nemotron 340b fp8 on gb200 with strong "
     "scaling; published: 128, 256, 512"),
    ("llama3.1", {"GPUS_PER_NODE": "x"}, "GPUS_PER_NODE=x is not a positive integer"),
    ("llama3.1", {"HF_TOKEN": None}, "HF_TOKEN is not set"),
    ("llama3.1", {"ENABLE_PROFILE": "true", "ENABLE_NCCLTRACE": "true"},
     "ENABLE_PROFILE=true and ENABLE_NCCLTRACE=true cannot be combined"),
    ("llama3.1", {"ENABLE_GPU_METRICS": "true"},
     "ENABLE_GPU_METRICS=true needs ENABLE_PROFILE=true"),
    ("llama3.1", {"ENABLE_PROFILE": "maybe"}, "ENABLE_PROFILE=maybe is not a boolean"),
    ("llama3.1", {"PROFILE_START_STEP": "25"},
     "PROFILE_START_STEP=25 must be less than PROFILE_STOP_STEP=25"),
    ("llama3.1", {"PROFILE_STOP_STEP": "ten"}, "PROFILE_STOP_STEP=ten is not a positive integer"),
    ("llama3.1", {"PROFILE_START_STEP": "4.5"}, "PROFILE_START_STEP=4.5 is not a positive integer"),
    ("llama3.1", {"MAX_STEPS": "0"}, "MAX_STEPS=0 is not a positive integer"),
    ("llama3.1", {"MAX_STEPS": "1e3"}, "MAX_STEPS=1e3 is not a positive integer"),
    ("llama3.1", {"TIME_LIMIT": "30m"}, "TIME_LIMIT=30m is not a Slurm time"),
    ("llama3.1", {"TIME_LIMIT": "00:61:00"}, "TIME_LIMIT=00:61:00 is not a Slurm time"),
    ("llama3.1", {"STAGE_PATH": "/old"}, "STAGE_PATH=/old is no longer used"),
    ("llama3.1", {"LLMB_INSTALL": None}, "LLMB_INSTALL is not set"),
    ("llama3.1", {"LOAD_CHECKPOINT_PATH": "/nonexistent/ckpt"},
     "LOAD_CHECKPOINT_PATH=/nonexistent/ckpt does not exist"),
    ("llama3.1", {"CLUSTER_TYPE": "local", "GPUS_PER_NODE": "4"},
     "GPUS_PER_NODE=4 does not apply to CLUSTER_TYPE=local"),
])
def test_validation(install: Path, name: str, extra: dict[str, str | None],
                    message: str) -> None:
    assert_refused(install, name, extra, message)


def test_checkpoint_load_needs_distcp(install: Path, tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    (ckpt / "weights").mkdir(parents=True)
    env = env_for(install, LOAD_CHECKPOINT_PATH=str(ckpt))
    assert "holds no weights/*.distcp" in error("llama3.1", env)
    (ckpt / "weights" / "__0_0.distcp").touch()
    req = request.from_env(recipe("llama3.1"), env)
    assert req.checkpoint_load_path == ckpt and req.max_steps == 1
    env["ENABLE_PROFILE"] = "true"
    assert "cannot be combined with ENABLE_PROFILE" in error("llama3.1", env)


def test_checkpoint_below_tested_scale_is_a_warning(install: Path) -> None:
    req = request.from_env(recipe("llama3.1"), env_for(install, ENABLE_CHECKPOINT="true",
                                                         JOB_TOTAL_GPUS="8"))
    assert req.checkpoint_save
    assert any("below the smallest tested scale" in w and "(16 GPUs)" in w for w in req.warnings)
    req = request.from_env(recipe("llama3.1"), env_for(install, ENABLE_CHECKPOINT="true"))
    assert req.warnings == ()


@pytest.mark.parametrize(("extra", "steps"), [
    ({}, 50), ({"MAX_STEPS": "20"}, 20), ({"ENABLE_NCCLTRACE": "true"}, 5),
    ({"ENABLE_PROFILE": "true", "PROFILE_START_STEP": "10", "PROFILE_STOP_STEP": "15"}, 15),
])
def test_effective_steps(install: Path, extra: dict[str, str], steps: int) -> None:
    assert request.from_env(recipe("llama3.1"), env_for(install, **extra)).max_steps == steps


def test_nccltrace_names_the_experiment(install: Path) -> None:
    req = request.from_env(recipe("llama3.1"), env_for(install, ENABLE_NCCLTRACE="yes"))
    assert req.experiment_name.endswith("_gbs256_nccltrace")


def test_smoke_test_allows_unpublished_scale_without_hf_token(install: Path) -> None:
    env = env_for(install, SMOKE_TEST="true", JOB_TOTAL_GPUS="2", CLUSTER_TYPE="local")
    env.pop("HF_TOKEN")
    req = request.from_env(recipe("llama3.1"), env)
    assert req.smoke_test and not req.config.published and req.config.gpus_per_node == 2
    assert any("not a published scale" in w for w in req.warnings)
    # every other validation stays
    env["DTYPE"] = "fp16"
    assert error("llama3.1", env).startswith("DTYPE=fp16")


@pytest.mark.parametrize("gpus", ["100000", "4096"])
def test_a_local_dry_run_refuses_what_the_local_run_refuses(install: Path, gpus: str) -> None:
    for dry in ("false", "true"):
        message = error("llama3.1", env_for(install, CLUSTER_TYPE="local", DRY_RUN=dry,
                                             SMOKE_TEST="true", JOB_TOTAL_GPUS=gpus))
        assert message.startswith(f"JOB_TOTAL_GPUS={gpus} is more processes than this machine "
                                  "can run"), message


# --- hostile values: one line naming the variable, refused before anything runs ----

HOSTILE = [
    ({"LLMB_INSTALL": "/x/y$(touch pwned)"},
     "LLMB_INSTALL=/x/y$(touch pwned) contains $ ( a space ), which a job path cannot hold"),
    ({"LLMB_INSTALL": "/x/my dir"}, "LLMB_INSTALL=/x/my dir contains a space"),
    ({"LLMB_INSTALL": "/x/it's"}, "LLMB_INSTALL=/x/it's contains '"),
    ({"LLMB_WORKLOAD": "/w/a;b"}, "LLMB_WORKLOAD=/w/a;b contains ;"),
    ({"SBATCH_ACCOUNT": "acct\n#SBATCH --wrap=id"},
     "SBATCH_ACCOUNT=acct\\n#SBATCH --wrap=id contains control character(s) \\n"),
    ({"SBATCH_PARTITION": "batch\r"}, "SBATCH_PARTITION=batch\\r contains control character(s)"),
    ({"DTYPE": "fp8\x1b[31m"}, "DTYPE=fp8\\x1b[31m contains control character(s) \\x1b"),
    ({"HF_TOKEN": "hf_secret\nvalue"}, "HF_TOKEN contains control character(s) \\n"),
    ({"HF_TOKEN": "true"}, "HF_TOKEN is a yes/no word, which is not a Hugging Face"),
    ({"JOB_TOTAL_GPUS": "016"}, "JOB_TOTAL_GPUS=016 is not a positive integer (the total "
     "number of GPUs for the job); write it as 16"),
    ({"JOB_TOTAL_GPUS": "+16"}, "JOB_TOTAL_GPUS=+16 is not a positive integer"),
    ({"JOB_TOTAL_GPUS": "\u0661\u0666"}, "JOB_TOTAL_GPUS=\u0661\u0666 is not a positive integer"),
    ({"MAX_STEPS": "12345678901234567890123"},
     "MAX_STEPS=12345678901234567890123 is too large; at most 1000000"),
    ({"MAX_STEPS": "-1"}, "MAX_STEPS=-1 is not a positive integer"),
    ({"GPUS_PER_NODE": "1000"}, "GPUS_PER_NODE=1000 is too large; at most 64"),
    ({"TIME_LIMIT": "forever"}, "TIME_LIMIT=forever is not a Slurm time"),
    ({"TIME_LIMIT": "\u0660\u0660:30:00"}, "TIME_LIMIT=\u0660\u0660:30:00 is not a Slurm time"),
    ({"RUN_CONF_IMAGE": "nvcr.io/nvidia/nemo:25.04.01; id"},
     "RUN_CONF_IMAGE=nvcr.io/nvidia/nemo:25.04.01; id is neither an image file"),
    ({"LOAD_CHECKPOINT_PATH": "/ck,pt"}, "LOAD_CHECKPOINT_PATH=/ck,pt contains ,, which pyxis "
     "cannot mount"),
    ({"LOAD_CHECKPOINT_PATH": "/a:b"}, "LOAD_CHECKPOINT_PATH=/a:b contains :"),
    ({"CLUSTER_TYPE": "local", "SMOKE_TEST": "true", "JOB_TOTAL_GPUS": "1000000"},
     "JOB_TOTAL_GPUS=1000000 is more processes than this machine can run: CLUSTER_TYPE=local "
     "starts one per GPU, at most"),
]


@pytest.mark.parametrize(("extra", "message"), HOSTILE, ids=[m[:40] for _, m in HOSTILE])
def test_hostile_values_are_refused_in_one_line(install: Path, extra: dict[str, str],
                                                message: str) -> None:
    assert_hostile_refused(install, extra, message)


def test_paths_that_are_not_directories(install: Path, tmp_path: Path) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    assert error("nemotron", env_for(install, LLMB_INSTALL=str(a_file))) == (
        f"LLMB_INSTALL={a_file} is a file, not a directory; set it to a directory")
    assert error("nemotron", env_for(install, LOAD_CHECKPOINT_PATH=str(a_file))).startswith(
        f"LOAD_CHECKPOINT_PATH={a_file} is a file, not a directory; point it at a checkpoint")
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    assert "is a symbolic link loop" in error("nemotron", env_for(
        install, LOAD_CHECKPOINT_PATH=str(loop)))
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "gone")
    assert "is a dangling symbolic link" in error("nemotron", env_for(
        install, LOAD_CHECKPOINT_PATH=str(dangling)))
    image_dir = tmp_path / "img.sqsh"
    image_dir.mkdir()
    assert error("nemotron", env_for(install, RUN_CONF_IMAGE=str(image_dir))).startswith(
        f"RUN_CONF_IMAGE={image_dir} is a directory, not a file")


def test_image_values(install: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    image = tmp_path / "images" / "custom.sqsh"
    image.parent.mkdir()
    image.touch()
    monkeypatch.chdir(tmp_path)
    # relative: made absolute from the launch directory (pyxis would read it as a registry name)
    req = request.from_env(recipe("nemotron"),
                           env_for(install, RUN_CONF_IMAGE="images/custom.sqsh"))
    assert req.image == str(image)
    # a Docker-style reference with a registry reaches pyxis in its own form
    req = request.from_env(recipe("nemotron"), env_for(
        install, RUN_CONF_IMAGE="nvcr.io/nvidia/nemo:25.04.01"))
    assert req.image == "nvcr.io#nvidia/nemo:25.04.01"
    req = request.from_env(recipe("nemotron"), runai_env(
        install, RUN_CONF_IMAGE="nvcr.io#nvidia/nemo:25.04.01"))
    assert req.image == "nvcr.io/nvidia/nemo:25.04.01"
    assert "Run:ai pulls the image from a registry" in error(
        "nemotron", runai_env(install, RUN_CONF_IMAGE=str(image)))
    # allowed, but only ever quoted: a $ in an existing image file name
    odd = tmp_path / "x $(touch pwned).sqsh"
    odd.touch()
    assert request.from_env(recipe("nemotron"), env_for(install, RUN_CONF_IMAGE=str(odd))).image \
        == str(odd)


def test_local_runs_take_any_printable_path(tmp_path: Path) -> None:
    """Nothing of a local run goes through a shell: a space in the install path is fine."""
    install = tmp_path / "my install"
    env = env_for(install, CLUSTER_TYPE="local", SMOKE_TEST="true", JOB_TOTAL_GPUS="2")
    assert request.from_env(recipe("nemotron"), env).llmb_install == install
