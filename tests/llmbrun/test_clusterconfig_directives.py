"""One cluster config, three jobs: a benchmark (launch.sh through llmb-run's launch
environment, nemo-run's sbatch script), `llmb-run screen` and `llmb-run preflight` ask Slurm for
the GPUs, the segment and the placement alike (llmb.launch.slurmjob writes them for all
three)."""

from __future__ import annotations

from pathlib import Path

import pytest
from llmb.launch import job, placement, request, slurm
from llmb.llmbrun import clusterconfig, preflight, slurmjob, submit
from llmb.llmbrun.screen import job as screen
from llmb.llmbrun.tasks import Task
from llmb.recipes import catalog
from runconfig import installed

SHELL = {"PATH": "/usr/bin:/bin", "HOME": "/home/u", "LANG": "C.UTF-8"}
# the options every job of the install asks for alike (the tasks per node are the job's own:
# a benchmark and the screen run one per GPU, preflight's probe one per node)
SHARED = ("--gres=", "--gpus-per-node=", "--segment=", "--qos=", "--exclude=", "--account=",
          "--partition=", "--nodes=")


def benchmark_options(cfg: clusterconfig.ClusterConfig, task: Task,
                      place: placement.Placement) -> list[str]:
    """The #SBATCH lines of the benchmark's job script, as sbatch options."""
    env = submit.launch_env(cfg, task, False, True, False, SHELL)
    env.update(place.to_env())
    req = request.from_env(catalog.find_recipe(task.workload), env)
    script = slurm.render(req, job.JobPaths.new(req, stamp=1))
    return [line.removeprefix("#SBATCH ") for line in script.splitlines()
            if line.startswith("#SBATCH ")]


def shared(options: list[str]) -> list[str]:
    return sorted(o for o in options if o.startswith(SHARED))


@pytest.mark.parametrize(("gpu_type", "gres", "task"), [
    ("h100", "gpu:h100:8", Task("pretrain_nemotron4", "15b", "fp8", 16)),
    ("h100", None, Task("pretrain_nemotron4", "15b", "fp8", 16)),
    # above an NVL72 domain: the default segment, decided once for all three
    ("gb200", "gpu:4", Task("pretrain_nemotron4", "340b", "fp8", 256)),
])
def test_one_config_gives_the_same_directives_to_every_job(
        tmp_path: Path, gpu_type: str, gres: str | None, task: Task) -> None:
    cfg = installed(tmp_path / "install", gpu_type=gpu_type, gres=gres)
    nodes = task.scale // cfg.gpus_per_node
    place = placement.build(qos="high", exclude="node7")
    bench = benchmark_options(cfg, task, place)
    screened = screen.sbatch_options(cfg, nodes, place, tmp_path / "screen")
    checked = slurmjob.sbatch_options(cfg, preflight.job_spec(nodes, tmp_path), place)
    assert shared(bench) == shared(screened) == shared(checked), (bench, screened, checked)
    gpus = f"--gres={gres}" if gres else f"--gpus-per-node={cfg.gpus_per_node}"
    assert gpus in bench and gpus in screened and gpus in checked
    segment = [o for o in bench if o.startswith("--segment=")]
    assert segment == (["--segment=16"] if gpu_type == "gb200" else [])
    assert f"--ntasks-per-node={cfg.gpus_per_node}" in bench and \
        f"--ntasks-per-node={cfg.gpus_per_node}" in screened and "--ntasks-per-node=1" in checked


def test_the_gres_type_reaches_the_benchmarks_job_script(tmp_path: Path) -> None:
    cfg = installed(tmp_path / "install", gres="gpu:h100:8")
    assert cfg.slurm is not None and str(cfg.slurm.gres) == "gpu:h100:8"
    options = benchmark_options(cfg, Task("pretrain_nemotron4", "15b", "fp8", 16),
                                placement.Placement())
    assert "--gres=gpu:h100:8" in options and not any(
        o.startswith("--gpus-per-node") for o in options)
