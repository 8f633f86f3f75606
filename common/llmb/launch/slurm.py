"""The Slurm backend: the sbatch script nemo-run's SlurmExecutor writes for a request, with the
task command every rank runs under srun/pyxis (NUMA binding, nsys when profiling)."""

from __future__ import annotations

import shlex

from llmb.launch import job, jobenv, slurmjob
from llmb.launch.job import JobPaths
from llmb.launch.request import Request
from llmb.launch.slurmjob import segment_size as segment_size  # where tests find it
from llmb.shared import shellsafe

NSYS_FOLDER = "nsys_profile"


# nsys flags of the published jobs; the output name carries job, node and rank.
NSYS_FLAGS = (
    "-s none -t nvtx,cuda --force-overwrite=true --capture-range=cudaProfilerApi "
    "--capture-range-end=stop --cuda-graph-trace=node --cuda-event-trace=false "
    "--nvtx-domain-include=NCCL"
)


NSYS_OUTPUT = "profile_%q{SLURM_JOBID}_%q{SLURM_NODEID}_%q{SLURM_PROCID}"


# GPU clock boost before training, one task per node. `sudo -n` never waits for a password;
# `|| true`: a cluster that does not allow it still runs the benchmark.
VBOOST_LINE = (
    "# vboost: raise the GPU clock boost on every node; its failure must not fail the job\n"
    'srun --ntasks="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 '
    "sudo -n nvidia-smi boost-slider --vboost 1 || true"
)


def task_command(req: Request, paths: JobPaths) -> str:
    """The shell line srun runs in every task: NUMA binding, optional nsys, the entrypoint.

    The arithmetic on SLURM_LOCALID must be evaluated per task, so the line is run by
    `bash -c '...'` inside the container; GPU metrics are added for SLURM_PROCID 0 only.
    """
    half = max(1, req.config.gpus_per_node // 2)
    numa = f"$((SLURM_LOCALID/{half}))"
    parts = [f"numactl --cpunodebind={numa} --membind={numa}"]
    prefix = ""
    if req.profile:
        out = paths.job_dir / NSYS_FOLDER / NSYS_OUTPUT
        parts.append(f"nsys profile {NSYS_FLAGS} -o {out}")
        if req.gpu_metrics:
            prefix = ('NSYS_GPU_METRICS=""; if [ "$SLURM_PROCID" = 0 ]; then '
                      'NSYS_GPU_METRICS="--gpu-metrics-devices=all"; fi; ')
            parts.append("$NSYS_GPU_METRICS")
    parts.append(shlex.join(job.train_command(req, paths)))
    return prefix + " ".join(parts)


def container_mounts(req: Request) -> list[str]:
    mounts = [f"{req.llmb_workload}:{req.llmb_workload}", f"{job.repo_root()}:{job.repo_root()}"]
    load = req.checkpoint_load_path
    if load is not None and not load.is_relative_to(req.llmb_workload):
        mounts.append(f"{load}:{load}")
    return mounts


def executor(req: Request):
    """nemo_run.SlurmExecutor for this request (not yet assigned to an experiment).

    nemo-run 0.11.1 writes the srun arguments and the `export NAME=VALUE` lines into the job
    script as they are (its `noquote` marker is an alias of str, so every srun argument counts
    as pre-quoted): the image, each mount and each value are shell-quoted here. A mount list
    stays one word: bash joins `a:a,'b c:b c',d:d` into `a:a,b c:b c,d:d`.
    """
    import nemo_run as run

    cfg = req.config
    if req.slurm is None:
        raise ValueError("a Slurm job needs the request's Slurm settings")  # request's rule
    ask = slurmjob.directives(cfg.gpu, req.slurm, cfg.nodes, cfg.gpus_per_node, True,
                              req.placement, cfg.gpus_per_node)
    env = jobenv.job_env(req.recipe, cfg, req.nccl_trace, req.llmb_workload)
    return run.SlurmExecutor(
        account=req.slurm.account,
        partition=req.slurm.partition,
        nodes=ask.nodes,
        ntasks_per_node=ask.tasks_per_node,
        gpus_per_node=ask.gpus_per_node,
        gres=ask.gres,
        time=req.time_limit,
        mem="0" if ask.exclusive else None,
        exclusive=ask.exclusive,
        segment=ask.segment,
        additional_parameters=ask.placement or None,
        container_image=shlex.quote(req.image),
        container_mounts=[shlex.quote(m) for m in container_mounts(req)],
        env_vars=shellsafe.shell_env(env),
        srun_args=["--mpi=pmix", jobenv.container_env_arg(req.recipe, env)],
        setup_lines=VBOOST_LINE,
        tunnel=run.LocalTunnel(job_dir=str(req.experiments_dir)),
        # The repository is mounted at the same path: nothing is packaged or copied.
        packager=run.Packager(),
        poll_estimated_start_time=False,
    )


def task(req: Request, paths: JobPaths):
    import nemo_run as run

    return run.Script(path="-c", args=[shlex.quote(task_command(req, paths))],
                      entrypoint="bash")


def render(req: Request, paths: JobPaths) -> str:
    """The sbatch script nemo-run would submit, built with nemo-run's own request class.

    Mirrors nemo-run 0.11.1's SlurmTunnelScheduler._submit_dryrun minus its side effects
    (packaging, writing the script): assign the executor, package the task into a torchx
    AppDef, materialize a SlurmBatchRequest. tests/launch/test_experiment.py checks the result
    equals the script nemo-run writes on a real submission.
    """
    return render_batch(executor(req), task(req, paths), paths)


def render_batch(built, work, paths: JobPaths) -> str:
    """The sbatch script nemo-run writes for executor `built` running `work` (a nemo-run
    Script): the one renderer of every benchmark job (llmb.launch.bridgejob's too)."""
    from nemo_run.core.execution.slurm import SlurmBatchRequest
    from nemo_run.run.torchx_backend.packaging import package

    built.assign(paths.run_id, str(paths.run_dir), paths.experiment, paths.experiment)
    app = package(paths.experiment, work, built,
                  serialize_metadata_for_scripts=False)
    values = built.macro_values()
    roles = [values.apply(role) if values else role for role in app.roles]
    batch = SlurmBatchRequest(
        launch_cmd=["sbatch", "--requeue", "--parsable"],
        jobs=[role.name for role in roles],
        command_groups=[[" ".join([role.entrypoint, *role.args])] for role in roles],
        executor=built,
        max_retries=min(role.max_retries for role in roles),
        extra_env={k: v for role in roles for k, v in role.env.items()},
        launcher=built.get_launcher(),
    )
    return batch.materialize()
