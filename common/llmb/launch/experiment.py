"""Login-node half: a validated Request -> run manifest -> nemo-run executor + experiment.

Then submit (Slurm: `sbatch` through nemo-run's LocalTunnel, detached; Run:ai: nemo-run's
DGXCloudExecutor; local: nemo-run's LocalExecutor with torchrun, attached) or, with DRY_RUN,
print what would be submitted and write nothing.

nemo-run is imported inside the functions that need it, never at module import, so the
validation path (llmb.launch.request) answers in well under a second.

Layout (nemo-run's own naming), under $LLMB_WORKLOAD/experiments:
    <exp>/<exp>_<time_ns>/          run dir: llmb_manifest.json, <exp>_sbatch.sh, nemo-run state
    <exp>/<exp>_<time_ns>/<exp>/    job dir: log-<job name>_<jobid>_<restart>.out,
                                    sbatch_<job name>_<jobid>.out, nsys_profile/, and code/
                                    (the container's working directory, where NeMo writes
                                    nemo_experiments/ with the checkpoints)
"""

from __future__ import annotations

import json
import os
import platform
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from llmb import manifest as run_manifest
from llmb.launch import jobenv, localrun, placement
from llmb.launch.request import Request
from llmb.recipes import catalog
from llmb.shared import redact, shellsafe

NEMO_RUN_VERSION = "0.11.1"
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


@dataclass(frozen=True)
class JobPaths:
    """Where one run lives; all absolute host paths (valid in the container too)."""

    experiment: str  # <exp>: title and task name
    run_id: str  # <exp>_<time_ns>
    run_dir: Path  # experiments/<exp>/<exp>_<time_ns>
    job_dir: Path  # run_dir/<exp>

    @property
    def manifest(self) -> Path:
        return run_manifest.path_in(self.run_dir)

    @classmethod
    def new(cls, req: Request, stamp: int | None = None) -> JobPaths:
        exp = req.experiment_name
        run_id = f"{exp}_{stamp if stamp is not None else time.time_ns()}"
        run_dir = req.experiments_dir / exp / run_id
        return cls(exp, run_id, run_dir, run_dir / exp)


def repo_root() -> Path:
    return catalog.REPO_ROOT


def entrypoint_file(req: Request) -> Path:
    return req.recipe.directory / str(req.recipe.data["entrypoint"])


# --- the run manifest -------------------------------------------------------------------------

def llmb_version() -> str:
    text = (repo_root() / "pyproject.toml").read_text()
    found = re.search(r'^version\s*=\s*"([^"]+)"', text, re.MULTILINE)
    return found.group(1) if found else "unknown"


def git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(repo_root()), "rev-parse", "HEAD"],
                             capture_output=True, text=True, timeout=5, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def nemo_run_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("nemo_run")
    except metadata.PackageNotFoundError:
        return NEMO_RUN_VERSION


def build_manifest(req: Request, paths: JobPaths, created: str | None = None,
                   commit: str | None = None) -> dict[str, Any]:
    """The run manifest (schema 1): what the in-container half needs; never a secret."""
    cfg = req.config
    size = req.recipe.size(cfg.model_size)
    return {
        "schema": run_manifest.SCHEMA,
        "recipe": req.recipe.name,
        "workload": req.recipe.workload,
        "experiment": paths.experiment,
        "model_size": cfg.model_size,
        "dtype": cfg.dtype,
        "gpu_type": cfg.gpu_type,
        "num_gpus": cfg.num_gpus,
        "gpus_per_node": cfg.gpus_per_node,
        "nodes": cfg.nodes,
        "scaling": cfg.scaling,
        "published": cfg.published,
        "source": cfg.source,
        "seq_length": cfg.seq_length,
        "family": req.recipe.family,
        "nemo_recipe": size["nemo_recipe"],
        "nemo": req.recipe.nemo_settings(cfg),
        "model": dict(size["model"]),
        "parallelism": {"tp": cfg.tp, "pp": cfg.pp, "cp": cfg.cp, "vp": cfg.vp, "ep": cfg.ep,
                        "mbs": cfg.mbs, "gbs": cfg.gbs, "dp": cfg.dp, "ga": cfg.ga,
                        "num_layers": cfg.num_layers},
        "cluster_type": req.cluster_type,
        **({"placement": req.placement.record()} if req.placement else {}),
        "options": {
            "max_steps": req.max_steps,
            "smoke_test": req.smoke_test,
            "profile": req.profile,
            "profile_start_step": req.profile_start_step,
            "profile_stop_step": req.profile_stop_step,
            "gpu_metrics": req.gpu_metrics,
            "nccl_trace": req.nccl_trace,
            "checkpoint_save": req.checkpoint_save,
            "checkpoint_load_path": (str(req.checkpoint_load_path)
                                     if req.checkpoint_load_path else None),
            "time_limit": req.time_limit,
            "dry_run": req.dry_run,
        },
        "image": req.image,
        "job_dir": str(paths.job_dir),
        "versions": {
            "llmb": llmb_version(),
            "framework": str(req.recipe.data["framework"]["version"]),
            "nemo_run": nemo_run_version(),
            "python": platform.python_version(),
        },
        "git_commit": commit,
        "created": created or datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


# --- the command each rank runs ---------------------------------------------------------------

def train_command(req: Request, paths: JobPaths) -> list[str]:
    """`python <repo>/<recipe>/<entrypoint> train --manifest <abs path>` as argv."""
    return ["python", str(entrypoint_file(req)), "train", "--manifest", str(paths.manifest)]


def slurm_task_command(req: Request, paths: JobPaths) -> str:
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
    parts.append(shlex.join(train_command(req, paths)))
    return prefix + " ".join(parts)


# --- Slurm ------------------------------------------------------------------------------------

def segment_size(nodes: int, max_nodes: int | None) -> int | None:
    """GB200: above max_nodes nodes, the largest divisor of the node count that is <= max."""
    if not max_nodes or nodes <= max_nodes:
        return None
    return max(d for d in range(1, max_nodes + 1) if nodes % d == 0)


def container_mounts(req: Request) -> list[str]:
    mounts = [f"{req.llmb_workload}:{req.llmb_workload}", f"{repo_root()}:{repo_root()}"]
    load = req.checkpoint_load_path
    if load is not None and not load.is_relative_to(req.llmb_workload):
        mounts.append(f"{load}:{load}")
    return mounts


def slurm_executor(req: Request):
    """nemo_run.SlurmExecutor for this request (not yet assigned to an experiment).

    nemo-run 0.11.1 writes the srun arguments and the `export NAME=VALUE` lines into the job
    script as they are (its `noquote` marker is an alias of str, so every srun argument counts
    as pre-quoted): the image, each mount and each value are shell-quoted here. A mount list
    stays one word: bash joins `a:a,'b c:b c',d:d` into `a:a,b c:b c,d:d`.
    """
    import nemo_run as run

    cfg = req.config
    gpu = catalog.get_gpu_type(cfg.gpu_type)
    segment = req.placement.segment or segment_size(cfg.nodes, gpu.segment_max_nodes)
    env = jobenv.job_env(req.recipe, cfg, req.nccl_trace, req.llmb_workload)
    return run.SlurmExecutor(
        account=str(req.account),
        partition=req.partition,
        nodes=cfg.nodes,
        ntasks_per_node=cfg.gpus_per_node,
        gpus_per_node=None if req.gres_gpus else cfg.gpus_per_node,
        gres=f"gpu:{req.gres_gpus}" if req.gres_gpus else None,
        time=req.time_limit,
        mem="0",
        exclusive=True,
        segment=segment,
        additional_parameters=req.placement.sbatch_options() or None,
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


def slurm_task(req: Request, paths: JobPaths):
    import nemo_run as run

    return run.Script(path="-c", args=[shlex.quote(slurm_task_command(req, paths))],
                      entrypoint="bash")


def render_slurm(req: Request, paths: JobPaths) -> str:
    """The sbatch script nemo-run would submit, built with nemo-run's own request class.

    Mirrors nemo-run 0.11.1's SlurmTunnelScheduler._submit_dryrun minus its side effects
    (packaging, writing the script): assign the executor, package the task into a torchx
    AppDef, materialize a SlurmBatchRequest. tests/launch/test_experiment.py checks the result
    equals the script nemo-run writes on a real submission.
    """
    from nemo_run.core.execution.slurm import SlurmBatchRequest
    from nemo_run.run.torchx_backend.packaging import package

    executor = slurm_executor(req)
    executor.assign(paths.run_id, str(paths.run_dir), paths.experiment, paths.experiment)
    app = package(paths.experiment, slurm_task(req, paths), executor,
                  serialize_metadata_for_scripts=False)
    values = executor.macro_values()
    roles = [values.apply(role) if values else role for role in app.roles]
    batch = SlurmBatchRequest(
        launch_cmd=["sbatch", "--requeue", "--parsable"],
        jobs=[role.name for role in roles],
        command_groups=[[" ".join([role.entrypoint, *role.args])] for role in roles],
        executor=executor,
        max_retries=min(role.max_retries for role in roles),
        extra_env={k: v for role in roles for k, v in role.env.items()},
        launcher=executor.get_launcher(),
    )
    return batch.materialize()


# --- Run:ai (DGX Cloud executor) --------------------------------------------------------------

def runai_executor(req: Request):
    import nemo_run as run

    assert req.runai is not None
    cfg = req.config
    ra = req.runai
    return run.DGXCloudExecutor(
        base_url=ra.base_url,
        kube_apiserver_url="",  # unused by nemo-run 0.11.1
        client_id=ra.app_id,
        client_secret=ra.app_secret,
        project_name=ra.project_name,
        container_image=req.image,
        pvc_nemo_run_dir=ra.pvc_dir,
        nodes=cfg.nodes,
        gpus_per_node=cfg.gpus_per_node,
        nprocs_per_node=cfg.gpus_per_node,
        pvcs=[{"name": ra.mount_name, "path": ra.mount_path, "existingPvc": True,
               "claimName": ra.claim_name}],
        env_vars=jobenv.job_env(req.recipe, cfg, req.nccl_trace),
        launcher="torchrun",
    )


def runai_payload(req: Request, paths: JobPaths) -> dict[str, Any]:
    """The workload spec nemo-run 0.11.1 POSTs for this job, built here without any network.

    DGXCloudExecutor.create_training_job builds and POSTs its payload in one step (it needs a
    token and the project/cluster ids first), so this mirrors its shape instead; the ids it
    looks up at submission are shown as placeholders. The secret is not part of the payload.
    """
    assert req.runai is not None
    cfg = req.config
    name = paths.experiment.replace("_", "-").replace(".", "-").lower()[:34]
    pvc_job_dir = f"{req.runai.pvc_dir.rstrip('/')}/experiments/{paths.experiment}/" \
                  f"{paths.run_id}/{paths.experiment}"
    spec: dict[str, Any] = {
        "command": f"/bin/bash {pvc_job_dir}/launch_script.sh",
        "image": req.image,
        "compute": {"gpuDevicesRequest": cfg.gpus_per_node, "largeShmRequest": True},
        "storage": {"pvc": [{"name": req.runai.mount_name, "path": req.runai.mount_path,
                             "existingPvc": True, "claimName": req.runai.claim_name}]},
        "environmentVariables": [{"name": k, "value": v} for k, v in
                                 jobenv.job_env(req.recipe, cfg, req.nccl_trace).items()],
    }
    if cfg.nodes > 1:
        endpoint = "workloads/distributed"
        spec |= {"distributedFramework": "PyTorch", "minReplicas": cfg.nodes,
                 "maxReplicas": cfg.nodes, "numWorkers": cfg.nodes}
    else:
        endpoint = "workloads/trainings"
    return {
        "url": f"{req.runai.base_url}/{endpoint}",
        "payload": {"name": name, "useGivenNameAsPrefix": True,
                    "projectId": f"<id of project {req.runai.project_name}>",
                    "clusterId": "<cluster id of that project>", "spec": spec},
        "auth": {"url": f"{req.runai.base_url}/token", "appId": req.runai.app_id,
                 "appSecret": "********"},
        "launch_script": runai_launch_line(req, paths, pvc_job_dir),
    }


def runai_launch_line(req: Request, paths: JobPaths, pvc_job_dir: str) -> str:
    cfg = req.config
    manifest = f"{pvc_job_dir}/{run_manifest.NAME}"
    entry = entrypoint_file(req).relative_to(repo_root())
    return (f"torchrun --nnodes={cfg.nodes} --nproc-per-node={cfg.gpus_per_node} "
            f"--node-rank=$GROUP_RANK {shlex.quote(f'/nemo_run/code/{entry}')} train "
            f"--manifest {shlex.quote(manifest)}")


# --- local ------------------------------------------------------------------------------------

def local_executor(req: Request):
    import nemo_run as run

    return run.LocalExecutor(ntasks_per_node=req.config.num_gpus, launcher="torchrun",
                             env_vars=jobenv.job_env(req.recipe, req.config, req.nccl_trace,
                                                     req.llmb_workload))


def local_task(req: Request, paths: JobPaths):
    import nemo_run as run

    cmd = train_command(req, paths)
    return run.Script(path=cmd[1], args=cmd[2:], entrypoint="python")


def render_local(req: Request, paths: JobPaths) -> str:
    from nemo_run.run.torchx_backend.packaging import package

    executor = local_executor(req)
    executor.assign(paths.run_id, str(paths.run_dir), paths.experiment, paths.experiment)
    app = package(paths.experiment, local_task(req, paths), executor,
                  serialize_metadata_for_scripts=False)
    role = app.roles[0]
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(role.env.items()))
    return f"{env} {role.entrypoint} {' '.join(role.args)}"


# --- orchestration ----------------------------------------------------------------------------

def _masked(text: str) -> str:
    """Never print a secret that happens to be in the environment."""
    return redact.redact(text, redact.secret_values(os.environ))


def dry_run(req: Request, out=None) -> int:
    """Print the manifest and the job script/spec; write nothing, submit nothing."""
    out = out or sys.stdout
    paths = JobPaths.new(req)
    manifest = build_manifest(req, paths, commit=git_commit())
    if req.cluster_type == "slurm":
        kind, body = "sbatch script", render_slurm(req, paths)
    elif req.cluster_type == "runai":
        kind, body = "Run:ai workload spec", json.dumps(runai_payload(req, paths), indent=2)
    else:
        kind, body = "local command", render_local(req, paths)
    text = (
        f"# llmb DRY_RUN: nothing written, nothing submitted\n"
        f"# experiment: {paths.experiment}\n"
        f"# run directory (its timestamp is set at submission): {paths.run_dir}\n"
        f"# ---- {run_manifest.NAME} ----\n{json.dumps(manifest, indent=2)}\n"
        f"# ---- {kind} ----\n{body}\n"
    )
    out.write(_masked(text))
    return 0


def analyzer_hint(req: Request) -> str:
    return f"{repo_root() / 'common' / 'parse_train_timing.sh'} {req.experiments_dir}"


def submit(req: Request) -> int:
    """Write the manifest into the experiment's run dir, then submit through nemo-run."""
    import nemo_run as run

    if req.cluster_type == "runai":
        # DGXCloudExecutor maps job dirs under NEMORUN_HOME onto the PVC.
        run.config.set_nemorun_home(str(req.llmb_workload))
        os.umask(0o077)  # nemo-run serializes the executor (with its secret) into the run dir
    paths = JobPaths.new(req)
    if req.cluster_type == "slurm":
        executor, task = slurm_executor(req), slurm_task(req, paths)
    elif req.cluster_type == "runai":
        # The repository is archived (git archive HEAD) into the job's code/ dir, which
        # nemo-run moves to the PVC; torchrun runs from there, so the path is relative.
        executor, task = runai_executor(req), local_task(req, paths)
        task.path = str(entrypoint_file(req).relative_to(repo_root()))
        executor.packager = run.GitArchivePackager()
    else:
        executor, task = local_executor(req), local_task(req, paths)

    with _experiment_class()(paths.experiment, executor=executor, id=paths.run_id,
                        base_dir=str(req.llmb_workload), log_level="WARN",
                        skip_status_at_exit=True, enable_goodbye_message=False, clean_mode=True,
                        serialize_metadata_for_scripts=False) as exp:
        exp.add(task, executor=executor, name=paths.experiment)
        run_manifest.write(build_manifest(req, paths, commit=git_commit()), paths.manifest)
        if req.profile:
            (paths.job_dir / NSYS_FOLDER).mkdir(parents=True, exist_ok=True)
        if req.cluster_type == "runai":
            os.chdir(repo_root())  # GitArchivePackager archives the repository of the cwd
        if req.cluster_type == "local":
            interrupted = localrun.run_attached(exp, paths.experiment)
        else:
            with placement.sbatch_environment():  # the script's #SBATCH lines, nothing else
                exp.run(detach=True, tail_logs=False)
        job_id = _job_id(exp)
    if req.cluster_type == "local":
        return localrun.finish(paths.job_dir, paths.experiment, interrupted, analyzer_hint(req))
    print(f"llmb: submitted {paths.experiment} as job {job_id}")
    print(f"llmb: experiment directory: {paths.run_dir}")
    print(f"llmb: logs: {paths.job_dir}/log-*_{job_id}_0.out")
    print(f"llmb: when it has finished, analyze with: {analyzer_hint(req)}")
    return 0


def _experiment_class():
    """nemo_run.Experiment that accepts a run dir that already exists (see __getattr__)."""
    return __getattr__("LlmbExperiment")


def __getattr__(name: str):
    """Module attributes built on first use, so importing llmb.launch.experiment never imports
    nemo-run.

    LlmbExperiment: the manifest must be in the run dir before the job can start, and
    nemo-run 0.11.1 creates that dir inside Experiment.run() with os.makedirs(exist_ok=False)
    right before submitting; this subclass only relaxes that one makedirs. nemo-run records
    the class by its import path (llmb.launch.LlmbExperiment) in the run dir's _CONFIG, so
    reading an experiment back with nemo-run needs <repo>/common on PYTHONPATH.
    """
    if name != "LlmbExperiment":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import nemo_run as run

    class LlmbExperiment(run.Experiment):
        def _save_experiment(self, exist_ok: bool = False):
            super()._save_experiment(exist_ok=True)

    # Recorded as llmb.launch.LlmbExperiment, the path run directories already hold.
    LlmbExperiment.__module__ = "llmb.launch"
    LlmbExperiment.__qualname__ = name
    globals()[name] = LlmbExperiment
    return LlmbExperiment


def _job_id(exp) -> str:
    handle = exp.jobs[0].handle if exp.jobs else ""
    # torchx handle: <scheduler>://<session>/<app id>
    return handle.rsplit("/", 1)[-1] if handle else "unknown"


def launch(req: Request) -> int:
    for warning in req.warnings:
        print(f"llmb: warning: {warning}", file=sys.stderr)
    if req.dry_run:
        return dry_run(req)
    return submit(req)
