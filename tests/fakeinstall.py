"""An llmb install on disk as the installer and real runs leave it, for llmb-run's tests.

`make_install(root)` writes cluster_config.yaml (schema 1, as the installer does), a token
file and an image file; `make_run(...)` writes one run directory in the experiments layout of
launch.py: the manifest built by llmb.launch from a real request, the sbatch script, a NeMo
training log (step lines from llmb.nemolog) and the batch output, plus what a real run also
leaves (an nsys report, a checkpoint, nemo-run's state) so that archive tests can check what
is left out; and `submit_record(...)` the history record llmb-run would append.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import yaml
from llmb import catalog, launch, nemolog, request

REPO = Path(__file__).resolve().parents[1]
HF_TOKEN = "hf_FakeTokenForTestsOnly0123456789abcd"
IMAGE = "nvidia+nemo+25.04.01.sqsh"


def make_install(root: Path, gres: str | None = "gpu:8",
                 workloads: tuple[str, ...] = ("pretrain_llama3.1", "pretrain_nemotron4"),
                 env: dict[str, Any] | None = None) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    token = root / ".hf_token"
    token.write_text(HF_TOKEN + "\n")
    token.chmod(0o600)
    (root / "images").mkdir(exist_ok=True)
    (root / "images" / IMAGE).write_bytes(b"hsqs" + b"\0" * 60)
    conf = {
        "schema": 1,
        "llmb": {"repo": str(REPO), "install_path": str(root)},
        "launcher": {"cluster_type": "slurm", "gpu_type": "h100",
                     "slurm": {"account": "acct", "partition": "batch",
                               "cpu_partition": "batch", "gres": gres},
                     "hf_token_file": str(token), "env": env or {}},
        "workloads": {w: {"recipe": catalog.find_recipe(w).name, "venv": sys.prefix,
                          "venv_kind": "venv", "image": str(root / "images" / IMAGE)}
                      for w in workloads},
    }
    (root / "cluster_config.yaml").write_text(yaml.safe_dump(conf))
    return root


def step_lines(last: int, upto: int, step_time: float) -> list[str]:
    return [nemolog.step_line(iteration=i, last_iteration=last, lr=1.5e-05,
                              global_batch_size=128, global_step=i,
                              reduced_train_loss=11.96 - i * 0.01,
                              train_step_timing=step_time if i >= 11 else 30.0,
                              tflops_per_gpu=610.2, consumed_samples=(i + 1) * 128)
            for i in range(upto + 1)]


def make_run(root: Path, job_id: str, workload: str = "pretrain_llama3.1", size: str = "8b",
             dtype: str = "fp8", scale: int = 8, complete: bool = True,
             step_time: float = 1.25, extra_log: list[str] | None = None,
             stamp: int | None = None, smoke: bool = False) -> Path:
    """One run directory; returns the run dir (what llmb-run records as experiment_dir)."""
    recipe = catalog.find_recipe(workload)
    env = {"LLMB_INSTALL": str(root), "SBATCH_ACCOUNT": "acct", "SBATCH_PARTITION": "batch",
           "JOB_TOTAL_GPUS": str(scale), "MODEL_SIZE": size, "DTYPE": dtype,
           "DRY_RUN": "true", "HF_TOKEN": HF_TOKEN, "SMOKE_TEST": str(smoke).lower()}
    req = request.from_env(recipe, env)
    paths = launch.JobPaths.new(req, stamp if stamp is not None else int(job_id) * 1000)
    manifest = launch.build_manifest(req, paths, created="2025-04-11T14:48:45Z", commit=None)
    manifest["options"]["dry_run"] = False
    launch.write_manifest(manifest, paths.manifest)
    job_name = f"acct-acct.{paths.experiment}"
    (paths.run_dir / f"{paths.experiment}_sbatch.sh").write_text(
        f"#!/bin/bash\n#SBATCH --account=acct\n#SBATCH --job-name={job_name}\n"
        "export TORCH_NCCL_AVOID_RECORD_STREAMS=1\nsrun python train.py\n")
    paths.job_dir.mkdir(parents=True, exist_ok=True)
    last = int(manifest["options"]["max_steps"]) - 1
    upto = last if complete else 30
    lines = [nemolog.log_line("Experiments will be logged at /results", "nemo_logging:393",
                              now=1744382925.0),
             *(extra_log or []), *step_lines(last, upto, step_time)]
    if not complete:
        lines.append("slurmstepd: error: *** STEP 1.0 ON node1 CANCELLED AT 2025-04-11T15:00:00 "
                     "DUE TO TIME LIMIT ***")
    (paths.job_dir / f"log-{job_name}_{job_id}_0.out").write_text("\n".join(lines) + "\n")
    (paths.job_dir / f"sbatch_{job_name}_{job_id}.out").write_text("vboost: not permitted\n")
    nsys = paths.job_dir / "nsys_profile"
    nsys.mkdir()
    (nsys / f"profile_{job_id}_0_0.nsys-rep").write_bytes(b"\0" * 2048)
    ckpt = paths.job_dir / "code" / "nemo_experiments" / "default" / "checkpoints" / "step=49"
    (ckpt / "weights").mkdir(parents=True)
    (ckpt / "weights" / "__0_0.distcp").write_bytes(b"\0" * 4096)
    (paths.run_dir / "_CONFIG").write_text(json.dumps({"executor": {
        "client_secret": "nemo-run-serialized-secret"}}))
    return paths.run_dir


def submit_record(job_id: str, run_dir: Path, workload: str = "pretrain_llama3.1",
                  size: str = "8b", dtype: str = "fp8", scale: int = 8,
                  **extra: Any) -> dict[str, Any]:
    experiment = run_dir.parent.name
    record = {"type": "submit", "job_id": job_id, "experiment": experiment,
              "experiment_dir": str(run_dir), "workload": workload, "size": size,
              "dtype": dtype, "scale": scale, "gpu_type": "h100", "profile": False,
              "repeat": 1, "smoke": False, "unvalidated": False, "env": {}, "placement": {},
              "time": "2025-04-11T14:48:45Z"}
    record.update(extra)
    return record


def llmb_run_env(**extra: str) -> dict[str, str]:
    """A clean environment for running installer/llmb-run as a user would."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("LLMB_INSTALL", "HF_TOKEN", "STAGE_PATH") and
           not k.startswith(("SBATCH_", "LLMB_"))}
    env.update(LLMB_PYTHON=sys.executable, **extra)
    return env
