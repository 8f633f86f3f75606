"""The job of a Megatron-Bridge recipe (bridge/<name>/metadata.yaml): one launcher for all.

A Megatron-Bridge recipe is a folder of facts. Its upstream launch.sh (NVIDIA/exemplar-performance
v26.08.00) turns launch.sh's variables into the arguments of Megatron-Bridge's
scripts/performance/setup_experiment.py, which submits, through nemo-run's SlurmExecutor, one
job whose every rank runs scripts/performance/run_script.py with those same arguments. llmb
builds that job itself, from the recipe's `bridge:` block:

- `BridgeJob`: launch.sh's environment, validated (llmb.launch.request's rules, then the ones
  of Megatron-Bridge recipes here), resolved once: the compute dtype, the image, the
  arguments, the job's environment and mounts, with what Megatron-Bridge's PerfEnvPlugin and,
  for ENABLE_PROFILE=true, its NsysPlugin change of them at submission (llmb.launch.bridgeenv);
- `executor`/`task`: the nemo-run objects Megatron-Bridge's slurm_executor (commit
  b50da4c7, scripts/performance/utils/executors.py) builds, with llmb's Slurm directives
  (llmb.launch.slurmjob) and llmb.launch.slurm's renderer;
- `launch`: print the job (DRY_RUN) or submit it, its run manifest (llmb.manifest) written
  into the run directory first, as the 25.04 recipes' (`framework: megatron-bridge`, what
  Megatron-Bridge was asked under `bridge`).

SMOKE_TEST=true: the same job (llmb's directives, one task per GPU, the same environment and
image), but every rank runs llmb's smoke workload (llmb.container.smoke, through the recipes'
entrypoint `train --manifest`) instead of run_script.py: it prints Megatron-Bridge's log lines
and needs no Megatron-Bridge checkout. The repository and the workload directory are mounted,
as in the 25.04 recipes' smoke job.

nemo-run is imported only inside the functions that build the job.
"""

from __future__ import annotations

import os
import shlex
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from llmb import layout
from llmb import manifest as run_manifest
from llmb.launch import bridgeenv, job, slurm, slurmjob
from llmb.launch.request import Request, RequestError, from_env
from llmb.launch.variables import checked, parse_positive_int, setting
from llmb.recipes import catalog, images
from llmb.shared import redact, shellsafe
from llmb.shared.values import shown

# The variables read here beyond llmb.launch.request's.
BRIDGE_VARS = ("FP8_RECIPE", "TP", "PP", "CP", "EP", "ETP", "ET", "GBS", "MBS", "VP")
# Variables of the 25.04 recipes a Megatron-Bridge job has no place for.
REFUSED = {"ENABLE_NCCLTRACE": "upstream's launch.sh offers no NCCL trace",
           "LOAD_CHECKPOINT_PATH": "upstream's launch.sh offers no checkpoint load"}
# The families the smoke workload has a tiny model of (llmb.container.smokemodel.TINY_SHAPES,
# which llmb.launch may not import; tests/launch/test_bridgejob.py holds the two equal).
SMOKE_FAMILIES = ("llama", "nemotron4", "nemotronh", "deepseek", "kimi", "qwen3", "gpt_oss")
SCRIPTS = "scripts/performance"  # in the Megatron-Bridge checkout
RUN_SCRIPT = "run_script.py"
CHECKOUT = "Megatron-Bridge"  # under $LLMB_WORKLOAD, where setup clones the pinned commit
HF_CACHE = ".cache/huggingface"  # under $LLMB_INSTALL (upstream launch.sh's HF_HOME)

# Megatron-Bridge b50da4c7, scripts/performance/utils/executors.py: every job's environment,
# the GB200 additions, and the command each rank runs (pre-commands, then the script).
PERF_ENV = {
    "TORCH_NCCL_AVOID_RECORD_STREAMS": "1", "TRANSFORMERS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "False", "NCCL_NVLS_ENABLE": "0", "NVTE_NORM_FWD_USE_CUDNN": "1",
    "NVTE_NORM_BWD_USE_CUDNN": "1", "TORCH_NCCL_HIGH_PRIORITY": "1", "HF_HUB_OFFLINE": "0",
    "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "NCCL_GRAPH_REGISTER": "0",
}
GPU_ENV = {"gb200": {"NCCL_NET_GDR_LEVEL": "PHB", "NCCL_NET_GDR_C2C": "1"}}
INLINE_TEMPLATE = ("\n#!/usr/bin/env bash\nset -euo pipefail\n"
                   "bash -c '{{ pre_cmds }} {{ command }}'\n")
PRINT_SHA = ("bash /opt/Megatron-Bridge/docker/common/print_sha.sh "
             "/nemo_run/configs/repo_status.json")
NUMA_DIVISOR = {"gb200": 2, "gb300": 2}  # else 4
SRUN_ARGS = ("--mpi=pmix", "--no-container-mount-home", "--container-writable")


@dataclass(frozen=True)
class BridgeJob:
    """One Megatron-Bridge run, resolved from launch.sh's environment."""

    request: Request  # llmb's shared launch facts: install, scale, Slurm, time limit, steps
    compute_dtype: str  # bf16, fp8_cs, fp8_mx, fp8_sc, nvfp4
    image: str  # as pyxis reads it
    checkout: Path  # the pinned Megatron-Bridge checkout
    args: tuple[str, ...]  # setup_experiment.py's arguments, which run_script.py gets
    env: Mapping[str, str]  # the job's environment
    mounts: tuple[str, ...]

    @property
    def experiment(self) -> str:
        cfg = self.request.config
        return f"{cfg.workload}_{cfg.model_size}_{self.compute_dtype}_gpus{cfg.num_gpus}"

    @property
    def script(self) -> Path:
        return self.checkout / SCRIPTS / RUN_SCRIPT

    @property
    def smoke(self) -> bool:
        return self.request.smoke_test

    def paths(self, stamp: int | None = None) -> job.JobPaths:
        exp = self.experiment
        run_id = f"{exp}_{stamp if stamp is not None else _now()}"
        run_dir = self.request.experiments_dir / exp / run_id
        return job.JobPaths(exp, run_id, run_dir, run_dir / exp)


def _now() -> int:
    return time.time_ns()


def bridge_of(recipe: catalog.Recipe) -> Mapping[str, Any]:
    return recipe.data["bridge"]


def from_environment(recipe: catalog.Recipe, env: Mapping[str, str] | None = None) -> BridgeJob:
    """Validate launch.sh's environment for a Megatron-Bridge recipe; RequestError (one line)
    on the first problem."""
    env = os.environ if env is None else env
    checked(shellsafe.printable_env, env, BRIDGE_VARS, ())
    for name, why in REFUSED.items():
        if setting(env, name) not in (None, "false"):
            raise RequestError(f"{name}={shown(env[name])} is not supported by {recipe.name}: "
                               f"{why}; unset it")
    req = from_env(recipe, env)
    cfg, bridge = req.config, bridge_of(recipe)
    if req.smoke_test and recipe.family not in SMOKE_FAMILIES:
        raise RequestError(f"SMOKE_TEST=true is not supported by {recipe.name}: the smoke "
                           f"workload has no model of family {recipe.family} (it has: "
                           f"{', '.join(SMOKE_FAMILIES)}); unset it")
    rules = matching_rules(bridge, cfg)
    limits = [r["time_limit"] for r in rules if "time_limit" in r]
    if limits and setting(env, "TIME_LIMIT") is None:
        req = replace(req, time_limit=limits[-1])
    refused = [r["no_checkpoint"] for r in rules if "no_checkpoint" in r]
    if req.checkpoint_save and (refused or not bridge["checkpoint"]):
        why = refused[-1] if refused else "upstream's launch.sh saves no checkpoint"
        raise RequestError(f"ENABLE_CHECKPOINT=true is not supported by {recipe.name} "
                           f"{cfg.model_size}: {why}; unset it")
    if cfg.gpus_per_node != cfg.gpu.gpus_per_node:
        raise RequestError(f"GPUS_PER_NODE={cfg.gpus_per_node} is not supported by "
                           f"{recipe.name}: Megatron-Bridge runs {cfg.gpu.gpus_per_node} per "
                           f"{cfg.gpu_type} node; unset it")
    compute = compute_dtype(recipe, env, cfg, rules)
    perf = bridgeenv.row(recipe.data, recipe.size(cfg.model_size), cfg.gpu_type, compute,
                         f"{recipe.name} {cfg.model_size}")
    image = job_image(recipe, req, env)
    checkout = req.llmb_workload / CHECKOUT
    env_out, mounts = job_env(recipe, req, rules, checkout)
    if req.smoke_test:  # llmb's entrypoint and the run's manifest, not Megatron-Bridge's
        mounts = (f"{req.llmb_workload}:{req.llmb_workload}",
                  f"{job.repo_root()}:{job.repo_root()}")
    args = arguments(recipe, req, env, rules, compute, image)
    env_out = bridgeenv.perf_env(env_out, perf, args)
    if req.gpu_metrics:
        env_out.update(bridgeenv.GPU_METRICS_NODES)
    return BridgeJob(req, compute, image, checkout, args, env_out, mounts)


def matching_rules(bridge: Mapping[str, Any], cfg: catalog.Config) -> list[Mapping[str, Any]]:
    """The recipe's rules whose `when` holds for this row (every named condition)."""
    facts = {"sizes": cfg.model_size, "dtypes": cfg.dtype, "gpu_types": cfg.gpu_type,
             "scales": cfg.num_gpus}
    return [rule for rule in bridge.get("rules") or []
            if all(facts[key] in allowed for key, allowed in rule["when"].items()
                   if key in facts)]


def compute_dtype(recipe: catalog.Recipe, env: Mapping[str, str], cfg: catalog.Config,
                  rules: list[Mapping[str, Any]]) -> str:
    """--compute_dtype: DTYPE, or for fp8 fp8_<FP8_RECIPE>: one of the GPU type's FP8 recipes
    (the first unless FP8_RECIPE names another), or the one a rule forces."""
    given = setting(env, "FP8_RECIPE")
    if cfg.dtype != "fp8":
        if given is not None:
            raise RequestError(f"FP8_RECIPE={shown(given)} applies to DTYPE=fp8 only; unset it "
                               f"for DTYPE={cfg.dtype}")
        return cfg.dtype
    forced = [r["fp8_recipe"] for r in rules if "fp8_recipe" in r]
    allowed = forced[-1:] or list(bridge_of(recipe)["fp8_recipes"][cfg.gpu_type])
    value = (given or "").lower().removeprefix("fp8_") or allowed[0]
    if value not in allowed:
        what = f"{recipe.name} {cfg.model_size} fp8 on {cfg.gpu_type} at {cfg.num_gpus} GPUs"
        raise RequestError(f"FP8_RECIPE={shown(given)} is not supported by {what}; "
                           f"allowed: {', '.join(allowed)}")
    return f"fp8_{value}"


def job_image(recipe: catalog.Recipe, req: Request, env: Mapping[str, str]) -> str:
    """RUN_CONF_IMAGE (checked by the request), else the install's file of the image this GPU
    type pins (`gpu_overrides`), else of the recipe's."""
    if setting(env, "RUN_CONF_IMAGE") is not None:
        return req.image
    pinned = (recipe.data.get("gpu_overrides") or {}).get(req.config.gpu_type, {})
    if "image" not in pinned:
        return req.image
    return str(layout.Install(req.llmb_install).image(images.Image(pinned["image"]).file_name))


def job_env(recipe: catalog.Recipe, req: Request, rules: list[Mapping[str, Any]],
            checkout: Path) -> tuple[dict[str, str], tuple[str, ...]]:
    """The job's environment and mounts, in slurm_executor's order: its environment, the GPU
    type's additions, HF_HUB_OFFLINE for --offline, NEMO_HOME, then the recipe's and its
    rules' (which upstream's launch.sh exports and the job inherits)."""
    bridge, cfg = bridge_of(recipe), req.config
    env = {**PERF_ENV, **GPU_ENV.get(cfg.gpu_type, {})}
    mounts: list[str] = []
    if bridge["offline"]:
        env["HF_HUB_OFFLINE"] = "1"
    if bridge["nemo_home"]:
        env["NEMO_HOME"] = str(req.llmb_workload)
        mounts.append(f"{req.llmb_workload}:{req.llmb_workload}")
    hf_home = req.llmb_install / HF_CACHE
    if bridge["hf_home"]:
        env["HF_HOME"] = str(hf_home)
    for extra in (recipe.data.get("env") or {}, recipe.size(cfg.model_size).get("env") or {},
                  *(r.get("env") or {} for r in rules)):
        env.update({str(k): str(v) for k, v in extra.items()})
    scripts = checkout / SCRIPTS
    mounts += [str(hf_home)] if bridge["hf_home"] else []
    mounts += [f"{scripts / RUN_SCRIPT}:{scripts / RUN_SCRIPT}", f"{scripts}:{scripts}"]
    return env, tuple(mounts)


def arguments(recipe: catalog.Recipe, req: Request, env: Mapping[str, str],
              rules: list[Mapping[str, Any]], compute: str, image: str) -> tuple[str, ...]:
    """setup_experiment.py's arguments, as upstream's launch.sh passes them (with
    ENABLE_PROFILE=true its profiling flags), then the overrides the plugins append."""
    bridge, cfg = bridge_of(recipe), req.config
    out = ["--container_image", image]
    if bridge["offline"]:
        out.append("--offline")
    out += ["--compute_dtype", compute, "--model_family_name", bridge["model_family_name"],
            "--model_recipe_name", recipe.size(cfg.model_size)["recipe_name"],
            "--gpu", cfg.gpu_type, "--num_gpus", str(cfg.num_gpus),
            "--gpus_per_node", str(cfg.gpus_per_node)]
    if bridge["hf_home"]:
        out += ["--custom_mounts", str(req.llmb_install / HF_CACHE)]
    defaults = {k: v for rule in rules for k, v in (rule.get("defaults") or {}).items()}
    per_gpu = [r["gbs_per_gpu"] for r in rules if "gbs_per_gpu" in r]
    forced = {"GBS": cfg.num_gpus * per_gpu[-1]} if per_gpu else {}
    for var, flag in bridge["overrides"].items():
        if var in forced:
            given = setting(env, var)
            if given is not None and given != str(forced[var]):
                raise RequestError(f"{var}={shown(given)}: upstream's launch.sh sets {var}="
                                   f"{forced[var]} for {recipe.name} {cfg.model_size} on "
                                   f"{cfg.gpu_type} at {cfg.num_gpus} GPUs; unset it")
            out += [flag, str(forced[var])]
        elif setting(env, var) is not None:
            out += [flag, str(parse_positive_int(env, var))]
        elif var in defaults:
            out += [flag, str(defaults[var])]
    for rule in rules:
        out += [str(a) for a in rule.get("args") or []]
    out += [str(a) for a in bridge.get("args") or []]
    steps = (req.profile_start_step, req.profile_stop_step, cfg.num_gpus)
    if req.profile:
        out += bridgeenv.profile_args(bridge, *steps, req.gpu_metrics)
    if req.checkpoint_save:  # at the end of training
        out.append(f"--save_interval={req.max_steps}")
    out += ["--account", req.slurm.account if req.slurm else "",
            "--partition", req.slurm.partition if req.slurm else "",
            "--log_dir", str(req.llmb_workload), "--time_limit", req.time_limit,
            "--max_steps", str(req.max_steps), "--packager", "none", *bridgeenv.MANUAL_GC]
    if req.profile:
        out += bridgeenv.nsys_overrides(*steps)
    return tuple(out)


# --- the nemo-run job -------------------------------------------------------------------------

def command(bj: BridgeJob) -> str:
    """What the launcher template runs before the script: the repository status (of the
    image's Megatron-Bridge, which a smoke job does not run), then the NUMA binding the script
    runs under."""
    div = NUMA_DIVISOR.get(bj.request.config.gpu_type, 4)
    numa = (f"numactl --cpunodebind=$((SLURM_LOCALID/{div})) "
            f"--membind=$((SLURM_LOCALID/{div}))")
    return numa if bj.smoke else f"{PRINT_SHA} ; {numa}"


def executor(bj: BridgeJob):
    """nemo_run.SlurmExecutor as slurm_executor builds it, with llmb's directives."""
    import nemo_run as run
    from nemo_run.core.execution.launcher import SlurmTemplate

    req, cfg = bj.request, bj.request.config
    if req.slurm is None:
        raise ValueError("a Slurm job needs the request's Slurm settings")
    ask = slurmjob.directives(cfg.gpu, req.slurm, cfg.nodes, cfg.gpus_per_node, True,
                              req.placement, cfg.gpus_per_node)
    names = ",".join(sorted(bj.env))
    launcher = SlurmTemplate(template_inline=INLINE_TEMPLATE,
                             template_vars={"pre_cmds": command(bj)})
    if req.profile:  # NsysPlugin.setup
        settings = bridgeenv.nsys_launcher(bridge_of(req.recipe), launcher.nsys_extra_args,
                                           req.gpu_metrics)
        for name, value in settings.items():
            setattr(launcher, name, value)
    return run.SlurmExecutor(
        account=req.slurm.account, partition=req.slurm.partition, nodes=ask.nodes,
        ntasks_per_node=ask.tasks_per_node, gpus_per_node=ask.gpus_per_node, gres=ask.gres,
        time=req.time_limit, mem="0", exclusive=ask.exclusive, segment=ask.segment,
        additional_parameters=ask.placement or None,
        container_image=shlex.quote(bj.image),
        container_mounts=[shlex.quote(m) for m in bj.mounts],
        env_vars=shellsafe.shell_env(dict(bj.env)),
        srun_args=[*SRUN_ARGS, f"--container-env={names}"],
        launcher=launcher,
        tunnel=run.LocalTunnel(job_dir=str(req.experiments_dir)),
        packager=run.Packager(), poll_estimated_start_time=False,
    )


def task(bj: BridgeJob, paths: job.JobPaths):
    """run_script.py with its arguments; for a smoke job llmb's entrypoint, `train --manifest`
    with the run's manifest."""
    import nemo_run as run

    if bj.smoke:
        _, entry, *args = job.train_command(bj.request, paths)
        return run.Script(path=os.path.normpath(entry), entrypoint="python", args=args)
    scripts = bj.checkout / SCRIPTS
    return run.Script(path=str(bj.script), entrypoint="python",
                      env={"PYTHONPATH": f"{scripts}:$PYTHONPATH"}, args=list(bj.args))


def render(bj: BridgeJob, paths: job.JobPaths) -> str:
    """The sbatch script, then the script every rank runs, which nemo-run writes from the
    launcher template into the job directory's scripts/ while it builds the job: built here
    in a scratch run directory, so that a dry run writes nothing, and shown at their paths."""
    with tempfile.TemporaryDirectory(prefix="llmb-dry-run-") as tmp:
        scratch = Path(tmp) / paths.run_id
        built = executor(bj)
        batch = slurm.render_batch(built, task(bj, paths), job.JobPaths(
            paths.experiment, paths.run_id, scratch, scratch / paths.experiment))
        rank = (scratch / paths.experiment / "scripts" / f"{paths.experiment}.sh").read_text()
    where = paths.job_dir / "scripts" / f"{paths.experiment}.sh"
    return (batch.replace(str(scratch), str(paths.run_dir))
            + f"\n# ---- {where} (/nemo_run/scripts in the job: every rank runs it) ----\n"
            + rank)


def profile_dir(paths: job.JobPaths) -> Path:
    """Where the nsys reports land: the job directory, /nemo_run in the job."""
    return paths.job_dir / bridgeenv.NSYS_FOLDER


def dry_run(bj: BridgeJob, paths: job.JobPaths | None = None, out=None) -> int:
    """Print the job that would be submitted; write nothing, submit nothing."""
    out = out or sys.stdout
    paths = paths or bj.paths()
    what = (f"# SMOKE_TEST: every rank runs llmb's smoke workload (a tiny PyTorch model, "
            f"Megatron-Bridge's log lines), not Megatron-Bridge, with the run manifest written "
            f"at submission: {paths.manifest}\n" if bj.smoke
            else f"# Megatron-Bridge checkout: {bj.checkout}\n")
    if bj.request.profile:
        what += (f"# ENABLE_PROFILE: nsys writes each rank's report into "
                 f"{profile_dir(paths)} (/nemo_run/{bridgeenv.NSYS_FOLDER} in the job), "
                 f"named {bridgeenv.NSYS_FILENAME}.nsys-rep\n")
    text = (f"# llmb DRY_RUN: nothing written, nothing submitted\n"
            f"# experiment: {bj.experiment}\n"
            f"# run directory (its timestamp is set at submission): {paths.run_dir}\n"
            f"{what}# ---- sbatch script ----\n{render(bj, paths)}\n")
    out.write(redact.redact(text, redact.secret_values(os.environ)))
    return 0


def manifest(bj: BridgeJob, paths: job.JobPaths, created: str | None = None,
             commit: str | None = None) -> dict[str, object]:
    """The run manifest: the 25.04 recipes' schema, with what Megatron-Bridge is asked."""
    recipe, cfg = bj.request.recipe, bj.request.config
    asked: run_manifest.Bridge = {
        "compute_dtype": bj.compute_dtype,
        "model_recipe_name": str(recipe.size(cfg.model_size)["recipe_name"]),
        "args": list(bj.args)}
    return {**job.build_manifest(bj.request, paths, created, commit, bridge=asked),
            "image": bj.image}


def submit(bj: BridgeJob) -> int:
    from llmb.launch import experiment, placement

    if not bj.smoke and not bj.script.is_file():
        raise RequestError(f"{bj.script} does not exist; run ./setup.sh (it clones the pinned "
                           "Megatron-Bridge)")
    paths = bj.paths()
    built, work = executor(bj), task(bj, paths)
    with experiment.__getattr__("LlmbExperiment")(
            paths.experiment, executor=built, id=paths.run_id,
            base_dir=str(bj.request.llmb_workload), log_level="WARN",
            skip_status_at_exit=True, enable_goodbye_message=False, clean_mode=True,
            serialize_metadata_for_scripts=False) as exp:
        exp.add(work, executor=built, name=paths.experiment)
        run_manifest.write(manifest(bj, paths, commit=job.git_commit()), paths.manifest)
        if bj.request.profile:
            profile_dir(paths).mkdir(parents=True, exist_ok=True)
        with placement.sbatch_environment():
            exp.run(detach=True, tail_logs=False)
        job_id = experiment._job_id(exp)
    print(f"llmb: submitted {paths.experiment} as job {job_id}")
    print(f"llmb: experiment directory: {paths.run_dir}")
    print(f"llmb: logs: {paths.job_dir}/log-*_{job_id}_0.out")
    return 0


def launch(recipe: catalog.Recipe, env: Mapping[str, str] | None = None) -> int:
    bj = from_environment(recipe, env)
    for warning in bj.request.warnings:
        print(f"llmb: warning: {warning}", file=sys.stderr)
    return dry_run(bj) if bj.request.dry_run else submit(bj)
