"""End to end on the real test Slurm cluster: launch.sh -> nemo-run -> sbatch -> srun tasks ->
log in the experiments layout -> parse_train_timing.sh.

Every recipe runs its smoke workload (SMOKE_TEST=true: a tiny real PyTorch training loop in
place of NeMo) on 2 nodes x 8 tasks through the job script nemo-run generates, unchanged. What
cannot exist here is doubled, and only that: the container (the pyxis SPANK stub in
tests/slurm ignores the image and honours the mounts), the image file (an empty placeholder
at the path setup.sh would import to), and a two-socket NUMA host (tests/e2e/bin/numactl).
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import launchjobs
import pytest
from launchjobs import JOB_TIMEOUT, analyze, describe, job_log, launch, wait_for

pytestmark = pytest.mark.e2e

RECIPES = launchjobs.RECIPES


@pytest.mark.parametrize("recipe", list(RECIPES))
def test_smoke_job_lands_in_the_layout_and_analyzes_as_success(recipe, install, tmp_path):
    workload, size = RECIPES[recipe]
    numa_log = tmp_path / "numactl.log"
    job_id, run_dir = launch(recipe, install, NUMACTL_LOG=str(numa_log))
    state = wait_for(job_id, install)
    assert state == "COMPLETED", describe(run_dir, job_id)

    # the experiments layout: experiments/<exp>/<exp>_<timestamp>/<exp>/log-<job name>_<jobid>_0.out
    experiments = Path(install["LLMB_INSTALL"]) / "workloads" / workload / "experiments"
    exp = run_dir.parent.name
    assert run_dir.parent.parent == experiments
    assert run_dir.name.startswith(f"{exp}_")
    log = job_log(run_dir, job_id)
    assert list((run_dir / exp).glob(f"sbatch_*_{job_id}.out"))
    manifest = json.loads((run_dir / "llmb_manifest.json").read_text())
    assert (manifest["num_gpus"], manifest["nodes"], manifest["model_size"]) == (16, 2, size)
    assert "iteration 49/49" in log.read_text()

    # every one of the 16 tasks ran under its NUMA binding: local ranks 0-3 node 0, 4-7 node 1
    bindings = sorted(tuple(map(int, line.split())) for line in numa_log.read_text().splitlines())
    assert [b[0] for b in bindings] == list(range(16))
    assert all(node == local // 4 for _, local, node in bindings)

    code, report = analyze(experiments, install)
    assert code == 0, report
    (result,) = [r for r in report["results"] if r["experiment"] == exp]
    assert result["status"] == "Success"
    assert result["max_iteration"] == 49
    assert result["time_mean"] > 0 and result["tflops_per_gpu_mean"] > 0
    for key in ("recipe", "model_size", "dtype", "gpu_type", "num_gpus"):
        assert result[key] == manifest[key], key
    assert result["global_batch_size"] == manifest["parallelism"]["gbs"]


def test_cancelled_job_is_reported_failed_at_its_last_iteration(install):
    job_id, run_dir = launch("nemotron", install, MAX_STEPS="2000")
    log = None
    deadline = time.monotonic() + JOB_TIMEOUT
    seen = -1
    while time.monotonic() < deadline and seen < 5:
        time.sleep(2)
        try:
            log = job_log(run_dir, job_id)
        except AssertionError:
            continue
        steps = re.findall(r"iteration (\d+)/", log.read_text(errors="replace"))
        seen = int(steps[-1]) if steps else -1
    assert seen >= 5, describe(run_dir, job_id)
    subprocess.run(["scancel", job_id], env=install, check=True, timeout=30)
    assert wait_for(job_id, install) == "CANCELLED"

    last = int(re.findall(r"iteration (\d+)/", log.read_text(errors="replace"))[-1])
    assert last < 1999
    code, report = analyze(run_dir, install)
    assert code == 1  # the only run in that directory did not succeed
    (result,) = report["results"]
    assert result["status"] == "Failed"
    assert result["max_iteration"] == last


def test_checkpoint_saved_then_loaded(install):
    job_id, run_dir = launch("nemotron", install, ENABLE_CHECKPOINT="true", MAX_STEPS="12")
    assert wait_for(job_id, install) == "COMPLETED", describe(run_dir, job_id)
    exp = run_dir.parent.name
    checkpoints = run_dir / exp / "code" / "nemo_experiments" / "default" / "checkpoints"
    saved = sorted(checkpoints.glob("*/weights/*.distcp"))
    assert saved, describe(run_dir, job_id)
    log_text = job_log(run_dir, job_id).read_text()
    assert "Global Checkpoint Save : Rank: 0 : Iteration: 12" in log_text

    ckpt = saved[0].parent.parent
    job2, run2 = launch("nemotron", install, LOAD_CHECKPOINT_PATH=str(ckpt))
    assert wait_for(job2, install) == "COMPLETED", describe(run2, job2)
    text = job_log(run2, job2).read_text()
    assert "Global Checkpoint Load : Rank : 0 :" in text
    assert re.findall(r"iteration (\d+)/(\d+)", text) == [("0", "0")]  # 1 step after loading
    manifest = json.loads((run2 / "llmb_manifest.json").read_text())
    assert manifest["options"]["checkpoint_load_path"] == str(ckpt)
    assert manifest["options"]["max_steps"] == 1
