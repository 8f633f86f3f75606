"""A launch request: launch.sh's environment, validated and normalised.

`from_env(recipe, env)` turns the variables a user sets for `launch.sh` into a `Request`, or
raises `RequestError` whose message is the ONE line printed on stderr: it names the variable,
the bad value and what is allowed. Everything that can be checked before a job is built is
checked here, so nothing is written or submitted for a bad request; this module never imports
nemo-run (validation must answer in well under a second).

This module holds the rules every cluster type shares and builds the request. How one variable
is read (a blank one is unset, booleans, counts, choices) and RequestError are
llmb.launch.variables'; the rules of one cluster type are its own module's: Slurm's account,
partition, GRES and image file llmb.launch.slurmvars', Run:ai's mount, API and project
llmb.launch.runaivars' (node placement is llmb.launch.placement's).

Decisions (documented in the recipe READMEs too):
- defaults: DTYPE, MODEL_SIZE and GPU_TYPE from metadata `defaults`; GPUS_PER_NODE from
  common/gpus.yaml; CLUSTER_TYPE slurm; MAX_STEPS 50; PROFILE_START_STEP/STOP_STEP from
  metadata `profile` (as each seed says: Llama 3.1 20/25, Nemotron-4 and Nemotron-H 45/50);
  TIME_LIMIT from metadata `sizes.<size>.time_limit`.
- effective steps (manifest options.max_steps): checkpoint load -> 1, NCCL trace -> 5,
  profile -> PROFILE_STOP_STEP, else MAX_STEPS.
- a checkpoint load runs a single step, so it cannot be combined with profiling or NCCL tracing.
- CLUSTER_TYPE=local runs every process on this machine: GPUS_PER_NODE is JOB_TOTAL_GPUS.
- HF_TOKEN is never stored in the request's printable fields or the manifest; the job
  inherits it from the submitting environment.
- hostile values (llmb.shared.shellsafe says what each may hold and why): a control character in any
  variable read here, shell or Slurm characters in the paths and names nemo-run hands to a shell
  or writes into the job script, ',' or ':' in a mounted path, non-ASCII digits, leading zeros
  and counts above variables.MAX_COUNT, a relative image file, a token that cannot be one,
  more local processes than this machine can run: each refused in one line.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from llmb import layout
from llmb.launch import runaivars, slurmvars
from llmb.launch.placement import Placement, PlacementError, for_launch
from llmb.launch.runaivars import RUNAI_VARS, RunaiSettings
from llmb.launch.slurmjob import SlurmSettings
from llmb.launch.slurmvars import SLURM_VARS
from llmb.launch.variables import (
    MAX_GPUS_PER_NODE,
    RequestError,
    checked,
    parse_bool,
    parse_choice,
    parse_positive_int,
    setting,
)
from llmb.recipes import catalog, images
from llmb.shared import files, shellsafe
from llmb.shared.values import shown

DEFAULT_MAX_STEPS = 50
DEFAULT_PROFILE_START = 45
DEFAULT_PROFILE_STOP = 50
NCCL_TRACE_STEPS = 5
CHECKPOINT_LOAD_STEPS = 1

# CatalogError.field -> the variable a launch.sh user sets.
FIELD_VARS = {
    "model_size": "MODEL_SIZE",
    "dtype": "DTYPE",
    "gpu_type": "GPU_TYPE",
    "num_gpus": "JOB_TOTAL_GPUS",
    "scaling": "STRONG_SCALING",
    "gpus_per_node": "GPUS_PER_NODE",
}
# Every variable from_env reads. None may hold a control character: each lands in the job
# script, the manifest or a message line. The secret ones are never shown.
LAUNCH_VARS = ("LLMB_INSTALL", "LLMB_WORKLOAD", "STAGE_PATH", "DRY_RUN", "SMOKE_TEST",
               "CLUSTER_TYPE", "MODEL_SIZE", "DTYPE", "GPU_TYPE", "STRONG_SCALING",
               "JOB_TOTAL_GPUS", "GPUS_PER_NODE", "LLMB_ALLOW_UNVALIDATED_SCALE", "MAX_STEPS",
               "ENABLE_PROFILE", "ENABLE_GPU_METRICS", "ENABLE_NCCLTRACE", "PROFILE_START_STEP",
               "PROFILE_STOP_STEP", "ENABLE_CHECKPOINT", "LOAD_CHECKPOINT_PATH", "TIME_LIMIT",
               "HF_TOKEN", "RUN_CONF_IMAGE", *SLURM_VARS, *RUNAI_VARS)
SECRET_VARS = ("HF_TOKEN", "APP_SECRET")


@dataclass(frozen=True)
class Request:
    recipe: catalog.Recipe = field(repr=False)
    config: catalog.Config
    cluster_type: str
    llmb_install: Path
    llmb_workload: Path
    image: str
    time_limit: str
    max_steps: int  # the EFFECTIVE number of steps the job runs
    profile: bool = False
    profile_start_step: int = DEFAULT_PROFILE_START
    profile_stop_step: int = DEFAULT_PROFILE_STOP
    gpu_metrics: bool = False
    nccl_trace: bool = False
    checkpoint_save: bool = False
    checkpoint_load_path: Path | None = None
    smoke_test: bool = False
    dry_run: bool = False
    slurm: SlurmSettings | None = None  # SBATCH_ACCOUNT, SBATCH_PARTITION, SBATCH_GPUS_PER_NODE
    runai: RunaiSettings | None = None
    warnings: tuple[str, ...] = ()
    placement: Placement = field(default_factory=Placement)  # LLMB_NODELIST, ... (Slurm)

    @property
    def experiment_name(self) -> str:
        return self.config.experiment_name + ("_nccltrace" if self.nccl_trace else "")

    @property
    def experiments_dir(self) -> Path:
        return self.llmb_workload / "experiments"


def _install_paths(recipe: catalog.Recipe, env: Mapping[str, str],
                   cluster_type: str) -> tuple[Path, Path]:
    """LLMB_INSTALL and LLMB_WORKLOAD, absolute. Where nemo-run hands the run directory to a
    shell (slurm, runai) they hold only the characters jobsafe.job_path allows; an existing
    path must be a directory (a file there would otherwise be blamed on the image)."""
    install = setting(env, "LLMB_INSTALL")
    if install is None:
        raise RequestError("LLMB_INSTALL is not set; set it to your install root")
    workload = setting(env, "LLMB_WORKLOAD")
    llmb_install = Path(install).absolute()
    llmb_workload = (Path(workload).absolute() if workload
                     else layout.Install(llmb_install).workload(recipe.workload))
    for name, path in (("LLMB_INSTALL", llmb_install),
                       ("LLMB_WORKLOAD", llmb_workload if workload else None)):
        if path is None:
            continue
        if cluster_type != "local":
            checked(shellsafe.job_path, name, str(path))
        problem = files.path_problem(path)
        if problem and problem != "does not exist":
            raise RequestError(f"{name}={shown(path)} {problem}; set it to a directory")
    return llmb_install, llmb_workload


def _local_processes(num_gpus: int, smoke_test: bool) -> None:
    """CLUSTER_TYPE=local starts JOB_TOTAL_GPUS processes here: no more than it can run."""
    limit, what = shellsafe.local_process_limit(smoke_test)
    if num_gpus > limit:
        raise RequestError(f"JOB_TOTAL_GPUS={num_gpus} is more processes than this machine can "
                           f"run: CLUSTER_TYPE=local starts one per GPU, at most {limit} here "
                           f"({what})")


def _image(env: Mapping[str, str], cluster_type: str) -> str | None:
    """RUN_CONF_IMAGE as pyxis (slurm) or Run:ai takes it, or None when unset."""
    value = setting(env, "RUN_CONF_IMAGE")
    if value is None:
        return None
    image = checked(shellsafe.container_image, "RUN_CONF_IMAGE", value)
    if shellsafe.looks_like_file(value):
        if cluster_type == "runai":
            raise RequestError(f"RUN_CONF_IMAGE={shown(value)} is a file; Run:ai pulls the "
                               "image from a registry: use a reference such as "
                               "nvcr.io/nvidia/nemo:25.04.01")
        return image
    ref = images.Image.parse(image)
    return ref.pyxis if cluster_type == "slurm" else ref.reference


def _catalog_error(err: catalog.CatalogError, recipe: catalog.Recipe,
                   values: Mapping[str, object]) -> RequestError:
    """Rewrite a CatalogError in the variables the user set."""
    var = FIELD_VARS.get(err.field or "")
    if var is None:
        return RequestError(str(err))
    value = values.get(var, err.value)
    allowed = ", ".join(map(str, err.allowed))
    what = (f"{recipe.name} {values['MODEL_SIZE']} {values['DTYPE']} "
            f"on {values['GPU_TYPE']}")
    if err.field == "num_gpus":
        per_node = values["GPUS_PER_NODE"]
        if isinstance(value, int) and isinstance(per_node, int) and value % per_node:
            return RequestError(
                f"JOB_TOTAL_GPUS={value} is not a multiple of GPUS_PER_NODE={per_node} "
                f"for {values['GPU_TYPE']}")
        if allowed and "published" in str(err):
            if values["SCALING"] == "strong":
                what += " with strong scaling"
            return RequestError(f"JOB_TOTAL_GPUS={value} is not a published scale for {what}"
                                f"; published: {allowed}")
        return RequestError(f"JOB_TOTAL_GPUS={value}: {err}")
    if err.field == "scaling":
        value = "true" if value == "strong" else "false"
        modes = " and ".join(f"{m} scaling" for m in err.allowed)
        return RequestError(f"STRONG_SCALING={value} is not published for "
                            f"{recipe.name} {values['MODEL_SIZE']} {values['DTYPE']} on "
                            f"{values['GPU_TYPE']}; published: {modes}")
    if err.field == "gpus_per_node":
        return RequestError(f"GPUS_PER_NODE={value} is not a positive integer")
    context = {
        "DTYPE": f"{recipe.name} {values['MODEL_SIZE']}",
        "GPU_TYPE": f"{recipe.name} {values['MODEL_SIZE']} {values['DTYPE']}",
        "MODEL_SIZE": recipe.name,
    }[var]
    return RequestError(f"{var}={value} is not supported by {context}; allowed: {allowed}")


def from_env(recipe: catalog.Recipe, env: Mapping[str, str] | None = None) -> Request:
    """Validate the launch environment for `recipe`; raise RequestError on the first problem."""
    env = os.environ if env is None else env
    warnings: list[str] = []
    checked(shellsafe.printable_env, env, LAUNCH_VARS, SECRET_VARS)
    if (stage_path := layout.stage_path_problem(env)) is not None:
        raise RequestError(stage_path)
    if setting(env, "LLMB_INSTALL") is None:
        raise RequestError("LLMB_INSTALL is not set; set it to your install root")
    dry_run = parse_bool(env, "DRY_RUN")
    smoke_test = parse_bool(env, "SMOKE_TEST")
    cluster_type = _cluster_type(recipe, env)
    llmb_install, llmb_workload = _install_paths(recipe, env, cluster_type)
    config = _config(recipe, env, cluster_type, smoke_test, warnings)
    steps = _steps(recipe, env, config, cluster_type, warnings)
    time_limit = setting(env, "TIME_LIMIT") or str(recipe.size(config.model_size)["time_limit"])
    checked(shellsafe.slurm_time, "TIME_LIMIT", time_limit)
    if recipe.data.get("requires_hf_token") and not smoke_test:
        if not setting(env, "HF_TOKEN"):
            raise RequestError(f"HF_TOKEN is not set; {recipe.name} needs a Hugging Face token "
                               "with access to the Llama 3.1 tokenizer (export HF_TOKEN=hf_...)")
        checked(shellsafe.hf_token, "HF_TOKEN", env["HF_TOKEN"])
    image_override = _image(env, cluster_type)
    slurm = None
    runai = None
    if cluster_type == "slurm":
        slurm, image = slurmvars.settings(recipe, env, config, llmb_install, image_override,
                                          dry_run, warnings)
    elif cluster_type == "runai":
        runai = runaivars.settings(env)
        image = image_override or recipe.image
    else:
        image = "local"
    try:
        place = for_launch(env, cluster_type, config.nodes)
    except PlacementError as err:
        raise RequestError(str(err)) from None
    return Request(
        recipe=recipe, config=config, cluster_type=cluster_type, llmb_install=llmb_install,
        llmb_workload=llmb_workload, image=image, time_limit=time_limit,
        max_steps=steps.effective, profile=steps.profile,
        profile_start_step=steps.profile_start, profile_stop_step=steps.profile_stop,
        gpu_metrics=steps.gpu_metrics, nccl_trace=steps.nccl_trace,
        checkpoint_save=steps.checkpoint_save, checkpoint_load_path=steps.load_path,
        smoke_test=smoke_test, dry_run=dry_run,
        slurm=slurm, runai=runai, warnings=tuple(warnings),
        placement=place,
    )


def _cluster_type(recipe: catalog.Recipe, env: Mapping[str, str]) -> str:
    cluster_types = list(recipe.data["cluster_types"])
    given = setting(env, "CLUSTER_TYPE") or "slurm"
    cluster_type = given.lower()
    if cluster_type not in catalog.CLUSTER_TYPES:
        raise RequestError(f"CLUSTER_TYPE={shown(given)} is not known; allowed: "
                           f"{', '.join(catalog.CLUSTER_TYPES)}")
    if cluster_type not in cluster_types:
        raise RequestError(f"CLUSTER_TYPE={shown(given)} is not supported by {recipe.name}; "
                           f"allowed: {', '.join(cluster_types)}")
    return cluster_type


# --- the configuration: size, dtype, GPU type, scale ----------------------------------------

def _gpus_per_node(env: Mapping[str, str], cluster_type: str, gpu_type: str, num_gpus: int,
                   smoke_test: bool) -> int:
    if cluster_type != "local":
        return parse_positive_int(env, "GPUS_PER_NODE",
                                  catalog.get_gpu_type(gpu_type).gpus_per_node,
                                  maximum=MAX_GPUS_PER_NODE)
    per_node_set = setting(env, "GPUS_PER_NODE")
    if per_node_set is not None and per_node_set != str(num_gpus):
        raise RequestError(f"GPUS_PER_NODE={per_node_set} does not apply to "
                           f"CLUSTER_TYPE=local, which runs all {num_gpus} processes on "
                           "this machine; unset GPUS_PER_NODE")
    _local_processes(num_gpus, smoke_test)  # a dry run refuses what the real run refuses
    return num_gpus


def _config(recipe: catalog.Recipe, env: Mapping[str, str], cluster_type: str,
            smoke_test: bool, warnings: list[str]) -> catalog.Config:
    """The published configuration the variables name (or, for a smoke test or a scale above
    the published ones, the nearest published layout, with a warning)."""
    model_size = parse_choice(env, "MODEL_SIZE", recipe.defaults["model_size"], recipe.sizes,
                              recipe.name)
    dtype = parse_choice(env, "DTYPE", recipe.defaults["dtype"], recipe.dtypes, recipe.name)
    gpu_type = parse_choice(env, "GPU_TYPE", recipe.defaults["gpu_type"], recipe.gpu_types,
                            recipe.name)
    scaling = "strong" if parse_bool(env, "STRONG_SCALING") else "weak"
    num_gpus = parse_positive_int(env, "JOB_TOTAL_GPUS", what="a positive integer "
                                  "(the total number of GPUs for the job)")
    gpus_per_node = _gpus_per_node(env, cluster_type, gpu_type, num_gpus, smoke_test)
    values = {"MODEL_SIZE": model_size, "DTYPE": dtype, "GPU_TYPE": gpu_type,
              "JOB_TOTAL_GPUS": num_gpus, "GPUS_PER_NODE": gpus_per_node, "SCALING": scaling,
              "STRONG_SCALING": scaling}
    # LLMB_ALLOW_UNVALIDATED_SCALE=true (set by llmb-run): a scale ABOVE the largest published
    # one runs with the nearest published layout (a warning, not an error).
    above_max = False
    if parse_bool(env, "LLMB_ALLOW_UNVALIDATED_SCALE"):
        try:
            published_scales = recipe.scales(model_size, dtype, gpu_type, scaling)
        except catalog.CatalogError:
            published_scales = []
        above_max = bool(published_scales) and num_gpus > max(published_scales)
    try:
        config = recipe.resolve(model_size, dtype, gpu_type, num_gpus, scaling,
                                gpus_per_node=gpus_per_node,
                                allow_unpublished=smoke_test or above_max)
    except catalog.CatalogError as err:
        raise _catalog_error(err, recipe, values) from None
    what = f"{recipe.name} {model_size} {dtype} on {gpu_type}"
    if not config.published and above_max and not smoke_test:
        warnings.append(
            f"JOB_TOTAL_GPUS={num_gpus} is above the largest published scale for {what}: an "
            "unvalidated configuration (nearest published layout), no reference applies")
    elif not config.published:
        published = recipe.scales(model_size, dtype, gpu_type, scaling)
        warnings.append(
            f"JOB_TOTAL_GPUS={num_gpus} is not a published scale for {what} (published: "
            f"{', '.join(map(str, published))}); SMOKE_TEST runs it with the nearest published "
            "layout, no reference applies")
    return config


# --- steps, profiling, tracing, checkpoints -------------------------------------------------

@dataclass(frozen=True)
class _Steps:
    effective: int  # the steps the job runs
    profile: bool
    profile_start: int
    profile_stop: int
    gpu_metrics: bool
    nccl_trace: bool
    checkpoint_save: bool
    load_path: Path | None


def _steps(recipe: catalog.Recipe, env: Mapping[str, str], config: catalog.Config,
           cluster_type: str, warnings: list[str]) -> _Steps:
    max_steps = parse_positive_int(env, "MAX_STEPS", DEFAULT_MAX_STEPS)
    profile = parse_bool(env, "ENABLE_PROFILE")
    gpu_metrics = parse_bool(env, "ENABLE_GPU_METRICS")
    nccl_trace = parse_bool(env, "ENABLE_NCCLTRACE")
    default_start, default_stop = recipe.profile_steps
    start = parse_positive_int(env, "PROFILE_START_STEP", default_start)
    stop = parse_positive_int(env, "PROFILE_STOP_STEP", default_stop)
    if profile and nccl_trace:
        raise RequestError("ENABLE_PROFILE=true and ENABLE_NCCLTRACE=true cannot be combined; "
                           "enable one of them per run")
    if gpu_metrics and not profile:
        raise RequestError("ENABLE_GPU_METRICS=true needs ENABLE_PROFILE=true "
                           "(GPU metrics are collected by the nsys profile)")
    if start >= stop:
        raise RequestError(f"PROFILE_START_STEP={start} must be less than "
                           f"PROFILE_STOP_STEP={stop}")
    checkpoint_save = parse_bool(env, "ENABLE_CHECKPOINT")
    checkpoint = recipe.size(config.model_size)["checkpoint"]
    load_path = _load_path(env, cluster_type)
    if load_path is not None:
        if profile or nccl_trace:
            raise RequestError("LOAD_CHECKPOINT_PATH runs a single step after loading; it "
                               "cannot be combined with ENABLE_PROFILE or ENABLE_NCCLTRACE")
        warnings.extend(_untested_scale(recipe, config, checkpoint, "load_min_scale", "loading"))
    if checkpoint_save:
        warnings.extend(_untested_scale(recipe, config, checkpoint, "save_min_scale", "saving"))
    if load_path is not None:
        effective = CHECKPOINT_LOAD_STEPS
    elif nccl_trace:
        effective = NCCL_TRACE_STEPS
    elif profile:
        effective = stop
    else:
        effective = max_steps
    return _Steps(effective, profile, start, stop, gpu_metrics, nccl_trace, checkpoint_save,
                  load_path)


def _load_path(env: Mapping[str, str], cluster_type: str) -> Path | None:
    """LOAD_CHECKPOINT_PATH, absolute: a checkpoint directory holding weights/*.distcp."""
    load = setting(env, "LOAD_CHECKPOINT_PATH")
    if load is None:
        return None
    load_path = Path(os.path.expanduser(load)).absolute()
    if cluster_type == "slurm":  # mounted into the container beside the workload
        checked(shellsafe.mount_path, "LOAD_CHECKPOINT_PATH", str(load_path))
    problem = files.path_problem(load_path)
    if problem:
        raise RequestError(f"LOAD_CHECKPOINT_PATH={load} {problem}; point it at a "
                           "checkpoint directory that holds weights/*.distcp")
    if not any((load_path / "weights").glob("*.distcp")):
        raise RequestError(f"LOAD_CHECKPOINT_PATH={load} holds no weights/*.distcp; point "
                           "it at the directory one level above weights/")
    return load_path


def _untested_scale(recipe: catalog.Recipe, config: catalog.Config,
                    checkpoint: Mapping[str, Mapping[str, int]], key: str,
                    what: str) -> list[str]:
    minimum = (checkpoint.get(key) or {}).get(config.gpu_type)
    name = f"{recipe.name} {config.model_size} on {config.gpu_type}"
    if minimum is None:
        return [f"checkpoint {what} is not tested for {name}"]
    if config.num_gpus < minimum:
        return [f"checkpoint {what} at JOB_TOTAL_GPUS={config.num_gpus} is below the smallest "
                f"tested scale for {name} ({minimum} GPUs); it may run out of memory"]
    return []
