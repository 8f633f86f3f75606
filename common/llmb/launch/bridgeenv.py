"""Megatron-Bridge's performance plugins for llmb's Megatron-Bridge jobs (llmb.launch.bridgejob).

Upstream's scripts/performance/setup_experiment.py (Megatron-Bridge commit b50da4c7) hands
nemo-run two plugins (scripts/performance/perf_plugins.py) that change the job at submission:

- `PerfEnvPlugin`, always: from the row's workload base config (a size's `perf` in
  metadata.yaml, llmb.recipes.bridgeschema.BaseConfig) and the parallel sizes the arguments
  set, it adds and removes job variables (`perf_env`) and appends manual garbage collection to
  the arguments (`MANUAL_GC`). Its vboost and GPU clock steps stay off: every upstream
  launch.sh leaves ENABLE_VBOOST false and passes no --lock_gpu_freq.
- `NsysPlugin`, with ENABLE_PROFILE=true (launch.sh's --enable_nsys): nsys wraps every rank
  (`nsys_launcher`: nemo-run's launcher settings), the arguments gain launch.sh's profiling
  flags (`profile_args`) and the plugin's overrides (`nsys_overrides`), and each rank writes
  its report into the job directory's nsys_profile/ (/nemo_run/nsys_profile in the job).

Every function here returns data; none imports nemo-run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from llmb.launch.request import RequestError
from llmb.recipes.bridgeschema import BaseConfig

# perf_plugins.py: the GPUs it counts as SM100 or newer, and those on NVLink domains of 8.
SM100_OR_NEWER = ("b300", "b200", "gb200", "gb300", "vr200")
NVL8 = ("h100", "b200", "b300")
NVL72 = 72  # the largest EP a hybrid-EP dispatcher spans on the others
EP_DISPATCHERS = ("deepep", "hybridep")
MANUAL_GC = ("train.manual_gc=true", "train.manual_gc_interval=100")
# The flags of setup_experiment.py's argument parser the plugin reads the parallel sizes of.
LAYOUT_FLAGS = {"-tp": "tp", "--tensor_model_parallel_size": "tp",
                "-pp": "pp", "--pipeline_model_parallel_size": "pp",
                "-cp": "cp", "--context_parallel_size": "cp",
                "-ep": "ep", "--expert_model_parallel_size": "ep"}
NSYS_FOLDER = "nsys_profile"  # nemo-run's Launcher.nsys_folder, under the job directory
# NsysPlugin on a SlurmExecutor: %p the process, %q{VAR} the variable (nsys's own syntax).
NSYS_FILENAME = "profile_%p_%q{SLURM_JOB_ID}_node%q{SLURM_NODEID}_rank%q{SLURM_PROCID}"
NSYS_DEFAULT_TRACE = ("cuda-sw", "nvtx")  # setup_experiment.py's when --nsys_trace is not given
# nemo-run's wrapper collects GPU metrics on the nodes this variable names; upstream sets it
# nowhere (its flag then collects none): llmb names the first node.
GPU_METRICS_NODES = {"GPU_METRICS_NODES": "0"}


@dataclass(frozen=True)
class Row:
    """What PerfEnvPlugin is given of one run."""

    family: str  # --model_family_name
    recipe_name: str  # --model_recipe_name
    gpu: str
    compute_dtype: str
    base: BaseConfig
    model_env: Mapping[str, str]  # the size's variables of every row (perf.env)
    p2p_chunksize: int | None  # the size's perf.p2p_chunksize


def row(recipe_data: Mapping[str, Any], size: Mapping[str, Any], gpu: str,
        compute_dtype: str, where: str) -> Row:
    """The row's plugin inputs; RequestError when upstream has no base config for it."""
    perf = size["perf"]
    configs = perf["base_configs"].get(gpu) or {}
    if compute_dtype not in configs:
        fp8 = compute_dtype.startswith("fp8_")
        name, value = ("FP8_RECIPE", compute_dtype[4:]) if fp8 else ("DTYPE", compute_dtype)
        has = [c[4:] for c in configs if c.startswith("fp8_")] if fp8 else list(configs)
        raise RequestError(f"{name}={value} is not supported by {where} on {gpu}: Megatron-Bridge "
                           f"has no workload base config for compute dtype {compute_dtype}; "
                           f"allowed: {', '.join(has) or 'none'}")
    return Row(str(recipe_data["bridge"]["model_family_name"]), str(size["recipe_name"]), gpu,
               compute_dtype, BaseConfig.of(configs[compute_dtype]),
               {str(k): str(v) for k, v in (perf.get("env") or {}).items()},
               perf.get("p2p_chunksize"))


def layout(base: BaseConfig, args: Sequence[str]) -> dict[str, int]:
    """TP, CP, PP, EP as the plugin sees them: the arguments' (the last one given), else the
    base config's."""
    sizes = {"tp": base.tp, "pp": base.pp, "cp": base.cp, "ep": base.ep}
    for i, arg in enumerate(args):
        flag, eq, value = arg.partition("=")
        if flag in LAYOUT_FLAGS and (eq or i + 1 < len(args)):
            sizes[LAYOUT_FLAGS[flag]] = int(value if eq else args[i + 1])
    return sizes


def perf_env(env: Mapping[str, str], r: Row, args: Sequence[str]) -> dict[str, str]:
    """The job's environment after PerfEnvPlugin.setup, its steps in the plugin's order."""
    out = dict(env)
    base, sizes = r.base, layout(r.base, args)
    ep_dispatch = base.dispatcher in EP_DISPATCHERS
    out.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", str(max_connections(r, sizes)))
    margin = "20" if ep_dispatch else "16"
    out["NVTE_FWD_LAYERNORM_SM_MARGIN"] = out["NVTE_BWD_LAYERNORM_SM_MARGIN"] = margin
    if base.dispatcher == "hybridep":
        out.update(nvlink_domain(r.gpu, sizes["ep"]))
    if sizes["pp"] > 1 and r.p2p_chunksize is not None:
        out["NCCL_P2P_NET_CHUNKSIZE"] = str(r.p2p_chunksize)
    _model_specific(out, r)
    if r.compute_dtype == "nvfp4":
        out["NVTE_USE_FAST_MATH"] = "1"
    return out


def max_connections(r: Row, sizes: Mapping[str, int]) -> int:
    """CUDA_DEVICE_MAX_CONNECTIONS: 32 on SM100 and newer or with an EP dispatcher; on older
    GPUs 1 when TP or CP overlaps communication without MoE all-to-all overlap; else 8."""
    if r.gpu in SM100_OR_NEWER:
        return 32
    if (sizes["tp"] > 1 or sizes["cp"] > 1) and not r.base.a2a_overlap:
        return 1
    return 32 if r.base.dispatcher in EP_DISPATCHERS else 8


def nvlink_domain(gpu: str, ep: int) -> dict[str, str]:
    """The hybrid-EP dispatcher's NVLink domain: 8 GPUs (h100, b200, b300) or 72."""
    if gpu in NVL8:
        domain = {"NVLINK_DOMAIN_SIZE": "8", "USE_MNNVL": "0",
                  "NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN": str(min(ep, 8))}
    elif ep > NVL72:
        raise RequestError(f"EP={ep} is not supported on {gpu}: Megatron-Bridge's hybrid-EP "
                           f"dispatcher spans at most {NVL72} GPUs of an NVLink domain")
    else:
        domain = {"NVLINK_DOMAIN_SIZE": str(NVL72), "USE_MNNVL": "1",
                  "NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN": str(ep)}
    return {**domain, "NUM_OF_TOKENS_PER_CHUNK_COMBINE_API": "128"}


def _model_specific(out: dict[str, str], r: Row) -> None:
    """The plugin's model-specific step: the size's variables, the full-iteration CUDA graph's
    allocator settings, the CuTe DSL grouped MLP's, no allocator settings with NCCL user
    buffers or Llama's Megatron FSDP, the row's own variables, the cuDNN layer-norm variables
    only where the plugin keeps them, NCCL_IGNORE_CPU_AFFINITY on b300."""
    base = r.base
    out.update(r.model_env)
    if base.full_iteration_graph:
        cur = out.get("PYTORCH_CUDA_ALLOC_CONF", "")
        if "graph_capture_record_stream_reuse" not in cur:
            sep = "," if cur else ""
            out["PYTORCH_CUDA_ALLOC_CONF"] = f"{cur}{sep}graph_capture_record_stream_reuse:True"
        out["TORCH_NCCL_AVOID_RECORD_STREAMS"] = "0"
    if base.cutedsl:
        out["NVTE_CUTEDSL_FUSED_GROUPED_MLP"] = "1"
        if base.a2a_overlap:
            out["CUDNNFE_CLUSTER_OVERLAP_MARGIN"] = "8"
    if base.nccl_ub or (r.family == "llama" and base.fsdp):
        for name in ("PYTORCH_CUDA_ALLOC_CONF", "NCCL_GRAPH_REGISTER"):
            out.pop(name, None)
    out.update(base.env)
    if not base.cudnn_norm:
        for name in ("NVTE_NORM_FWD_USE_CUDNN", "NVTE_NORM_BWD_USE_CUDNN"):
            out.pop(name, None)
    if r.gpu == "b300":
        out["NCCL_IGNORE_CPU_AFFINITY"] = "1"


# --- nsys (ENABLE_PROFILE) --------------------------------------------------------------------

def profile_args(bridge: Mapping[str, Any], start: int, stop: int, num_gpus: int,
                 gpu_metrics: bool) -> list[str]:
    """launch.sh's profiling flags: --enable_nsys, the step range, every rank, the recipe's
    trace and extra nsys arguments (`profile_args`), --profiling_gpu_metrics."""
    ranks = ",".join(str(r) for r in range(num_gpus))
    return ["--enable_nsys", f"--profiling_start_step={start}",
            f"--profiling_stop_step={stop}", f"--profiling_ranks={ranks}",
            *(str(a) for a in bridge["profile_args"]),
            *(["--profiling_gpu_metrics"] if gpu_metrics else [])]


def nsys_overrides(start: int, stop: int, num_gpus: int) -> list[str]:
    """NsysPlugin's overrides of run_script.py's configuration."""
    ranks = ",".join(str(r) for r in range(num_gpus))
    return ["profiling.use_nsys_profiler=true", f"profiling.profile_step_start={start}",
            f"profiling.profile_step_end={stop}", f"profiling.profile_ranks=[{ranks}]",
            "profiling.record_shapes=false"]


def _listed(args: Sequence[str], flag: str) -> list[str] | None:
    """A comma-separated list flag's value (the argument parser's list_of_strings)."""
    values = [a.split("=", 1)[1].split(",") for a in args if a.startswith(f"{flag}=")]
    return values[-1] if values else None


def nsys_launcher(bridge: Mapping[str, Any], default_extra: Sequence[str],
                  gpu_metrics: bool) -> dict[str, Any]:
    """The attributes NsysPlugin sets on nemo-run's launcher: its trace, the recipe's extra
    arguments before nemo-run's defaults (`default_extra`), the report's name, GPU metrics."""
    args = [str(a) for a in bridge["profile_args"]]
    return {"nsys_profile": True,
            "nsys_trace": _listed(args, "--nsys_trace") or list(NSYS_DEFAULT_TRACE),
            "nsys_extra_args": [*(_listed(args, "--nsys_extra_args") or []), *default_extra],
            "nsys_filename": NSYS_FILENAME, "nsys_gpu_metrics": gpu_metrics}
