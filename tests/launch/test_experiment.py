"""llmb.launch.experiment: job building for every published row, golden job scripts, real
submission.

Golden files (tests/golden/launch/*.txt) hold the DRY_RUN output (manifest + sbatch script or
Run:ai spec) with the repository path, the install path, the run timestamp, the creation time,
the git commit and the Python version masked. UPDATE_GOLDEN=1 rewrites them.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import sys
from pathlib import Path

import pytest
from launchrequests import INSTALL, RUNAI_ENV, env_for, make_request
from llmb import manifest as run_manifest
from llmb.launch import job, jobenv, request, slurm
from llmb.launch.experiment import dry_run, launch
from llmb.recipes import catalog
from paths import REPO, SHIMS

GOLDEN = REPO / "tests" / "golden" / "launch"

pytestmark = pytest.mark.filterwarnings("ignore")


def mask(text: str) -> str:
    text = text.replace(str(REPO), "<REPO>").replace(str(INSTALL), "<INSTALL>")
    text = re.sub(r"_\d{19}\b", "_<STAMP>", text)
    text = re.sub(r'"created": "[^"]+"', '"created": "<CREATED>"', text)
    text = re.sub(r'"git_commit": ("[0-9a-f]+"|null)', '"git_commit": "<COMMIT>"', text)
    return re.sub(r'"python": "[^"]+"', '"python": "<PYTHON>"', text)


GOLDEN_CASES = {
    "llama3.1_8b_fp8_h100_16": ("llama3.1", dict(JOB_TOTAL_GPUS="16")),
    "llama3.1_70b_bf16_h100_64_profile": (
        "llama3.1", dict(MODEL_SIZE="70b", DTYPE="bf16", JOB_TOTAL_GPUS="64",
                         ENABLE_PROFILE="true")),
    "llama3.1_405b_fp8_h100_128_proxy_gres": (
        "llama3.1", dict(MODEL_SIZE="405b", JOB_TOTAL_GPUS="128", SBATCH_GPUS_PER_NODE="8")),
    "nemotron_15b_bf16_h100_16_nccltrace": (
        "nemotron", dict(DTYPE="bf16", JOB_TOTAL_GPUS="16", ENABLE_NCCLTRACE="true")),
    "nemotron_340b_fp8_gb200_256_strong_profile_gpumetrics": (
        "nemotron", dict(MODEL_SIZE="340b", GPU_TYPE="gb200", JOB_TOTAL_GPUS="256",
                         STRONG_SCALING="true", ENABLE_PROFILE="true",
                         ENABLE_GPU_METRICS="true")),
    "nemotron_340b_bf16_b200_128_weak_checkpoint_save": (
        "nemotron", dict(MODEL_SIZE="340b", DTYPE="bf16", GPU_TYPE="b200", JOB_TOTAL_GPUS="128",
                         ENABLE_CHECKPOINT="true", TIME_LIMIT="02:00:00")),
    "nemotron_15b_fp8_h100_64_checkpoint_load": (
        "nemotron", dict(JOB_TOTAL_GPUS="64", LOAD_CHECKPOINT_PATH="<CKPT>")),
    "nemotronh_56b_fp8_h100_32": ("nemotronh", dict(JOB_TOTAL_GPUS="32", MAX_STEPS="100")),
    "llama3.1_8b_fp8_h100_32_placement": (  # LLMB_* placement -> #SBATCH lines + manifest
        "llama3.1", dict(JOB_TOTAL_GPUS="32", LLMB_NODELIST="gpu[01-03]",
                         LLMB_EXCLUDE="gpu07", LLMB_RESERVATION="acceptance",
                         LLMB_QOS="high", LLMB_SEGMENT="2",
                         LLMB_SLURM_ARGS="--constraint=h100 --comment=llmb-acceptance "
                                         "--spread-job")),
    "nemotron_340b_fp8_h100_256_runai": (
        "nemotron", dict(MODEL_SIZE="340b", JOB_TOTAL_GPUS="256", **RUNAI_ENV)),
}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    ckpt = tmp_path_factory.mktemp("ckpt") / "default--None=0.0000-epoch=0"
    (ckpt / "weights").mkdir(parents=True)
    (ckpt / "weights" / "__0_0.distcp").touch()
    return ckpt


@pytest.mark.parametrize("name", sorted(GOLDEN_CASES))
def test_golden(name: str, checkpoint: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    recipe, extra = GOLDEN_CASES[name]
    extra = {k: (str(checkpoint) if v == "<CKPT>" else v) for k, v in extra.items()}
    for secret in ("HF_TOKEN", "APP_SECRET"):
        monkeypatch.setenv(secret, env_for(**extra).get(secret, ""))
    req = make_request(recipe, **extra)
    out = io.StringIO()
    assert dry_run(req, out) == 0
    text = mask(out.getvalue().replace(str(checkpoint), "<CKPT>"))
    assert "hf_do_not_print" not in text and "app-secret-value" not in text
    path = GOLDEN / f"{name}.txt"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"{path} missing: run UPDATE_GOLDEN=1 pytest {__file__}"
    assert text == path.read_text()


def test_dry_run_writes_nothing(tmp_path: Path) -> None:
    req = request.from_env(catalog.find_recipe("nemotron"),
                           env_for(LLMB_INSTALL=str(tmp_path), JOB_TOTAL_GPUS="16"))
    dry_run(req, io.StringIO())
    assert list(tmp_path.iterdir()) == []


ROWS = [(r.name, c) for r in catalog.all_recipes()
        if not r.is_bridge for c in r.rows()]  # bridge/*: tests/launch/test_bridgejob.py


def test_every_published_row_builds() -> None:
    """Every row of every recipe, in-process, checked against the launch variables and the
    published jobs."""
    for recipe_name, cfg in ROWS:
        recipe = catalog.find_recipe(recipe_name)
        extra = dict(MODEL_SIZE=cfg.model_size, DTYPE=cfg.dtype, GPU_TYPE=cfg.gpu_type,
                     JOB_TOTAL_GPUS=str(cfg.num_gpus),
                     STRONG_SCALING=str(cfg.scaling == "strong").lower())
        req = request.from_env(recipe, env_for(**extra))
        assert req.config == cfg
        paths = job.JobPaths.new(req, stamp=1)
        exp = (f"{recipe.workload}_{cfg.model_size}_{cfg.dtype}_gpus{cfg.num_gpus}_tp{cfg.tp}"
               f"_pp{cfg.pp}_cp{cfg.cp}_vp{cfg.vp}_mbs{cfg.mbs}_gbs{cfg.gbs}")
        assert paths.experiment == exp
        script = slurm.render(req, paths)
        per_node = catalog.get_gpu_type(cfg.gpu_type).gpus_per_node
        nodes = cfg.num_gpus // per_node
        where = f"{recipe_name} {exp}"
        assert f"#SBATCH --nodes={nodes}\n" in script, where
        assert f"#SBATCH --ntasks-per-node={per_node}\n" in script, where
        assert f"#SBATCH --gpus-per-node={per_node}\n" in script, where
        assert "#SBATCH --exclusive\n" in script and "#SBATCH --mem=0\n" in script
        time_limit = recipe.size(cfg.model_size)["time_limit"]
        assert f"#SBATCH --time={time_limit}\n" in script, where
        segment = re.search(r"#SBATCH --segment=(\d+)", script)
        if cfg.gpu_type == "gb200" and nodes > 18:
            assert segment and nodes % int(segment.group(1)) == 0 and int(segment.group(1)) <= 18
        else:
            assert segment is None, where
        image = INSTALL / "images" / "nvidia+nemo+25.04.01.sqsh"
        assert f"--container-image {image} " in script
        workload = INSTALL / "workloads" / recipe.workload
        assert f"--container-mounts {workload}:{workload},{REPO}:{REPO}," in script
        for key, value in jobenv.job_env(recipe, cfg).items():
            assert f"\nexport {key}={value}\n" in script, (where, key)
        assert "--mpi=pmix" in script and "boost-slider --vboost 1 || true" in script
        half = max(1, per_node // 2)
        assert f"numactl --cpunodebind=$((SLURM_LOCALID/{half}))" in script
        entry = recipe.directory / recipe.data["entrypoint"]
        assert f"python {entry} train --manifest {paths.manifest}'" in script
        assert f"log-acct-acct.{exp}_%j_${{SLURM_RESTART_COUNT:-0}}.out" in script
        manifest = job.build_manifest(req, paths)
        assert manifest["nodes"] == nodes and manifest["parallelism"]["dp"] == cfg.dp
        assert manifest["options"]["max_steps"] == 50
        assert "HF_TOKEN" not in json.dumps(manifest) and "hf_do_not_print" not in script


@pytest.fixture
def slurm_shims(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    log = tmp_path / "shim.log"
    monkeypatch.setenv("PATH", f"{SHIMS}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("SHIM_LOG", str(log))
    from nemo_run.run.torchx_backend.schedulers import slurm as nemo_slurm

    monkeypatch.setattr(nemo_slurm, "SLURM_JOB_DIRS", str(tmp_path / "slurm_jobs"))
    monkeypatch.setattr(sys, "stdin", io.StringIO())  # invoke (sbatch runner) reads stdin
    return log


def test_submission_matches_dry_run(tmp_path: Path, slurm_shims: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    """Through nemo-run to the sbatch shim: the script it submits is the one DRY_RUN prints."""
    install = tmp_path / "install"
    (install / "images").mkdir(parents=True)
    (install / "images" / "nvidia+nemo+25.04.01.sqsh").touch()
    req = request.from_env(catalog.find_recipe("nemotron"), env_for(
        LLMB_INSTALL=str(install), DRY_RUN="false", MODEL_SIZE="340b", GPU_TYPE="gb200",
        JOB_TOTAL_GPUS="128", ENABLE_PROFILE="true"))
    assert launch(req) == 0
    out = capsys.readouterr().out
    assert "submitted pretrain_nemotron4_340b_fp8_gpus128" in out and "as job 12345" in out
    (run_dir,) = (install / "workloads" / "pretrain_nemotron4" / "experiments"
                  / req.experiment_name).iterdir()
    paths = job.JobPaths(req.experiment_name, run_dir.name, run_dir,
                            run_dir / req.experiment_name)
    submitted = (run_dir / f"{req.experiment_name}_sbatch.sh").read_text()
    assert submitted == slurm.render(req, paths)
    manifest = json.loads(paths.manifest.read_text())
    assert manifest["job_dir"] == str(paths.job_dir) and manifest["options"]["max_steps"] == 50
    assert paths.manifest.stat().st_mode & 0o777 == 0o600  # the user's values: owner-only
    assert (paths.job_dir / "nsys_profile").is_dir() and (paths.job_dir / "code").is_dir()
    log = slurm_shims.read_text()
    assert log.startswith(f"sbatch --requeue --parsable {run_dir}/")
    assert "#SBATCH --nodes=32" in log


def test_submission_failure_is_reported(tmp_path: Path, slurm_shims: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHIM_SBATCH_FAIL", "1")
    install = tmp_path / "install"
    (install / "images").mkdir(parents=True)
    (install / "images" / "nvidia+nemo+25.04.01.sqsh").touch()
    req = request.from_env(catalog.find_recipe("nemotronh"), env_for(
        LLMB_INSTALL=str(install), DRY_RUN="false", JOB_TOTAL_GPUS="32"))
    with pytest.raises(Exception, match="Invalid account"):
        launch(req)


@pytest.mark.skipif(not (REPO / "common" / "llmb" / "container" / "smoke.py").exists()
                    or shutil.which("torchrun", path=os.path.dirname(sys.executable)) is None,
                    reason="smoke workload or torch not installed")
def test_local_smoke_run_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """CLUSTER_TYPE=local, SMOKE_TEST=true: torchrun runs 2 real ranks on this CPU machine."""
    monkeypatch.setenv("PATH", f"{os.path.dirname(sys.executable)}{os.pathsep}"
                       f"{os.environ['PATH']}")
    req = request.from_env(catalog.find_recipe("nemotron"), env_for(
        LLMB_INSTALL=str(tmp_path), DRY_RUN="false", CLUSTER_TYPE="local", SMOKE_TEST="true",
        JOB_TOTAL_GPUS="2", MAX_STEPS="3"))
    assert launch(req) == 0
    assert "finished: SUCCEEDED" in capsys.readouterr().out
    (log,) = tmp_path.glob("workloads/pretrain_nemotron4/experiments/*/*/*/log-*_local_0.out")
    assert "Training epoch 0, iteration 2/2" in log.read_text()
    assert run_manifest.path_in(log.parent.parent).exists()


