"""Hostile values through the real sbatch, srun and pyxis-stub mounts of the test cluster.

A value that nemo-run would hand to a shell unquoted is refused before sbatch is reached (no
command runs, no job appears); a value that is allowed but full of shell characters (an image
file and a checkpoint directory named `... $(touch pwned) ...`) is quoted all the way: the
job script's srun line parses, the stub bind-mounts the checkpoint directory with its space,
the jobs complete and nothing named `pwned` appears anywhere.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from launchjobs import describe, job_log, launch, wait_for
from paths import REPO

pytestmark = pytest.mark.e2e



def jobs(env: dict[str, str]) -> list[str]:
    out = subprocess.run(["squeue", "-h", "-o", "%i"], env=env, capture_output=True,
                         text=True, timeout=30, check=True).stdout
    return out.split()


def pwned(*roots: Path) -> list[Path]:
    return [p for root in roots for p in root.rglob("pwned")]


def test_a_command_in_a_value_never_reaches_sbatch(install, tmp_path):
    sandbox = tmp_path / "cwd"
    sandbox.mkdir()
    before = jobs(install)
    env = {**install, "LLMB_INSTALL": str(tmp_path / "y$(touch pwned)"), "JOB_TOTAL_GPUS": "8"}
    proc = subprocess.run([str(REPO / "llama3.1" / "launch.sh")], env=env, cwd=sandbox,
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(f"llmb: LLMB_INSTALL={tmp_path}/y$(touch pwned) contains $ ( a "
                                  "space ), which a job path cannot hold")
    assert proc.stdout == "" and proc.stderr.count("\n") == 1
    assert set(jobs(install)) <= set(before)  # no new job (an earlier test's may have ended)
    assert not pwned(tmp_path) and not list(sandbox.iterdir())


def test_allowed_shell_characters_are_quoted_through_slurm(install, tmp_path):
    """launch() submits from /, so a command that ran in the batch script would make /pwned."""
    assert not Path("/pwned").exists()
    image = tmp_path / "img $(touch pwned).sqsh"
    image.write_bytes(b"")
    common = {"JOB_TOTAL_GPUS": "8", "RUN_CONF_IMAGE": str(image), "MAX_STEPS": "3"}
    job_id, run_dir = launch("llama3.1", install, ENABLE_CHECKPOINT="true", **common)
    assert wait_for(job_id, install) == "COMPLETED", describe(run_dir, job_id)
    exp = run_dir.parent.name
    saved = sorted((run_dir / exp / "code" / "nemo_experiments" / "default" / "checkpoints")
                   .glob("*/weights/*.distcp"))
    assert saved, describe(run_dir, job_id)

    # the checkpoint moves outside the workload, under a name with a space and $(...): it is
    # mounted on its own (--container-mounts), which the stub does for real
    odd = tmp_path / "ck pt $(touch pwned)"
    odd.mkdir()
    ckpt = odd / saved[0].parent.parent.name
    shutil.move(str(saved[0].parent.parent), ckpt)
    job2, run2 = launch("llama3.1", install, LOAD_CHECKPOINT_PATH=str(ckpt), **common)
    assert wait_for(job2, install) == "COMPLETED", describe(run2, job2)
    assert "Global Checkpoint Load : Rank : 0 :" in job_log(run2, job2).read_text()
    script = (run2 / f"{run2.parent.name}_sbatch.sh").read_text()
    assert f"'{ckpt}:{ckpt}'" in script and f"--container-image '{image}'" in script
    assert not pwned(tmp_path, Path(install["LLMB_INSTALL"])) and not Path("/pwned").exists()
