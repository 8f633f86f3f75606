"""Login-node half: a validated Request -> run manifest -> nemo-run executor + experiment.

Then submit (Slurm: `sbatch` through nemo-run's LocalTunnel, detached; Run:ai: nemo-run's
DGXCloudExecutor; local: nemo-run's LocalExecutor with torchrun, attached) or, with DRY_RUN,
print what would be submitted and write nothing. One module per backend builds its executor:
llmb.launch.slurm, llmb.launch.runai, llmb.launch.local; llmb.launch.job says where a run
lives and writes its manifest.

nemo-run is imported inside the functions that need it, never at module import, so the
validation path (llmb.launch.request) answers in well under a second.
"""

from __future__ import annotations

import json
import os
import sys

from llmb import manifest as run_manifest
from llmb.launch import job, local, placement, runai, slurm
from llmb.launch.request import Request
from llmb.shared import redact


def _masked(text: str) -> str:
    """Never print a secret that happens to be in the environment."""
    return redact.redact(text, redact.secret_values(os.environ))


def dry_run(req: Request, out=None) -> int:
    """Print the manifest and the job script/spec; write nothing, submit nothing."""
    out = out or sys.stdout
    paths = job.JobPaths.new(req)
    manifest = job.build_manifest(req, paths, commit=job.git_commit())
    if req.cluster_type == "slurm":
        kind, body = "sbatch script", slurm.render(req, paths)
    elif req.cluster_type == "runai":
        kind, body = "Run:ai workload spec", json.dumps(runai.payload(req, paths), indent=2)
    else:
        kind, body = "local command", local.render(req, paths)
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
    return f"{job.repo_root() / 'common' / 'parse_train_timing.sh'} {req.experiments_dir}"


def submit(req: Request) -> int:
    """Write the manifest into the experiment's run dir, then submit through nemo-run."""
    import nemo_run as run

    if req.cluster_type == "runai":
        # DGXCloudExecutor maps job dirs under NEMORUN_HOME onto the PVC.
        run.config.set_nemorun_home(str(req.llmb_workload))
        os.umask(0o077)  # nemo-run serializes the executor (with its secret) into the run dir
    paths = job.JobPaths.new(req)
    if req.cluster_type == "slurm":
        executor, task = slurm.executor(req), slurm.task(req, paths)
    elif req.cluster_type == "runai":
        # The repository is archived (git archive HEAD) into the job's code/ dir, which
        # nemo-run moves to the PVC; torchrun runs from there, so the path is relative.
        executor, task = runai.executor(req), local.task(req, paths)
        task.path = str(job.entrypoint_file(req).relative_to(job.repo_root()))
        executor.packager = run.GitArchivePackager()
    else:
        executor, task = local.executor(req), local.task(req, paths)

    with _experiment_class()(paths.experiment, executor=executor, id=paths.run_id,
                        base_dir=str(req.llmb_workload), log_level="WARN",
                        skip_status_at_exit=True, enable_goodbye_message=False, clean_mode=True,
                        serialize_metadata_for_scripts=False) as exp:
        exp.add(task, executor=executor, name=paths.experiment)
        run_manifest.write(job.build_manifest(req, paths, commit=job.git_commit()), paths.manifest)
        if req.profile:
            (paths.job_dir / slurm.NSYS_FOLDER).mkdir(parents=True, exist_ok=True)
        if req.cluster_type == "runai":
            os.chdir(job.repo_root())  # GitArchivePackager archives the repository of the cwd
        if req.cluster_type == "local":
            interrupted = local.run_attached(exp, paths.experiment)
        else:
            with placement.sbatch_environment():  # the script's #SBATCH lines, nothing else
                exp.run(detach=True, tail_logs=False)
        job_id = _job_id(exp)
    if req.cluster_type == "local":
        return local.finish(paths.job_dir, paths.experiment, interrupted, analyzer_hint(req))
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
