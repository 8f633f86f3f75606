"""llmb.launch.slurm: the segment of a large GB200 job, and the srun line's quoting."""

from __future__ import annotations

import subprocess
from pathlib import Path

from launchrequests import env_for
from llmb.launch import job, request, slurm
from llmb.recipes import catalog


def test_segment_size() -> None:
    assert slurm.segment_size(18, 18) is None
    assert slurm.segment_size(32, 18) == 16
    assert slurm.segment_size(64, 18) == 16
    assert slurm.segment_size(128, 18) == 16
    assert slurm.segment_size(36, 18) == 18
    assert slurm.segment_size(38, 18) == 2
    assert slurm.segment_size(64, None) is None


def test_values_reach_the_srun_line_quoted(tmp_path: Path) -> None:
    """nemo-run writes srun's arguments and the export values as they are; llmb quotes them.
    Run the generated srun line and export lines with bash (srun: a function printing its
    arguments): every value arrives whole and nothing in it runs."""
    install = tmp_path / "install"
    (install / "images").mkdir(parents=True)
    image = tmp_path / "img $(touch pwned) 'q'.sqsh"
    image.touch()
    ckpt = tmp_path / "ck pt $(touch pwned)"
    (ckpt / "weights").mkdir(parents=True)
    (ckpt / "weights" / "__0_0.distcp").touch()
    req = request.from_env(catalog.find_recipe("nemotron"), env_for(
        LLMB_INSTALL=str(install), JOB_TOTAL_GPUS="64", RUN_CONF_IMAGE=str(image),
        LOAD_CHECKPOINT_PATH=str(ckpt), DRY_RUN="false"))
    paths = job.JobPaths.new(req, stamp=1)
    script = slurm.render(req, paths)
    lines = script.splitlines()
    exports = [line for line in lines if line.startswith("export ")]
    (srun,) = [line for line in lines if line.startswith("srun --output")]
    sandbox = tmp_path / "sandbox"
    sandbox.mkdir()
    program = ("srun() { printf '%s\\n' \"$@\"; }\nSLURM_RESTART_COUNT=0\n"
               + "\n".join(exports) + "\n" + srun + "\nprintf 'NVTE_FUSED_ATTN=%s\\n' "
               '"$NVTE_FUSED_ATTN"\n')
    out = subprocess.run(["bash", "-c", program], cwd=sandbox, capture_output=True, text=True,
                         check=True).stdout.splitlines()
    assert out[out.index("--container-image") + 1] == str(image)
    mounts = out[out.index("--container-mounts") + 1].split(",")
    assert f"{ckpt}:{ckpt}" in mounts and mounts[0] == f"{req.llmb_workload}:{req.llmb_workload}"
    assert out[-1] == "NVTE_FUSED_ATTN=1"
    assert not list(tmp_path.rglob("pwned")) and not (Path.cwd() / "pwned").exists()
