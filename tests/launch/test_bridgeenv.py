"""llmb.launch.bridgeenv: Megatron-Bridge's PerfEnvPlugin and NsysPlugin (commit b50da4c7,
scripts/performance/perf_plugins.py) as llmb applies them. Each rule of the plugin is checked
on a real row of a recipe's metadata.yaml that takes its branch, and on one that does not."""

from __future__ import annotations

import io

import pytest
from launchrequests import env_for
from llmb.launch import bridgeenv, bridgejob
from llmb.launch.request import RequestError
from llmb.recipes import catalog
from llmb.recipes.bridgeschema import BaseConfig

STAMP = 1_000_000_000_000_000_000
pytestmark = pytest.mark.filterwarnings("ignore")  # nemo-run's imports' deprecations


def job(workload: str, **extra: str) -> bridgejob.BridgeJob:
    return bridgejob.from_environment(catalog.find_recipe(workload), env_for(**extra))


def env_of(workload: str, gpu: str, size: str, dtype: str, gpus: int, **extra: str) -> dict:
    return dict(job(workload, GPU_TYPE=gpu, MODEL_SIZE=size, DTYPE=dtype,
                    JOB_TOTAL_GPUS=str(gpus), **extra).env)


LLAMA, QWEN, DEEPSEEK = "llama3.1-bridge", "pretrain_qwen3", "pretrain_deepseek-v3"


@pytest.mark.parametrize("row,connections", [
    ((LLAMA, "gb300", "405b", "fp8", 512), "32"),  # SM100 or newer: 32
    ((LLAMA, "h100", "70b", "bf16", 512), "1"),  # TP 4 on h100, no all-to-all overlap: 1
    ((QWEN, "h100", "235b", "bf16", 512), "8"),  # TP 2 with all-to-all overlap: 8
    ((QWEN, "h100", "30b", "bf16", 64), "32"),  # the hybrid-EP dispatcher: 32
    (("pretrain_gpt_oss", "h100", "120b", "bf16", 512), "8"),  # PP and EP only: 8
], ids=lambda v: "_".join(map(str, v)) if isinstance(v, tuple) else v)
def test_cuda_device_max_connections(row: tuple, connections: str) -> None:
    assert env_of(*row)["CUDA_DEVICE_MAX_CONNECTIONS"] == connections


def test_a_cuda_device_max_connections_already_set_is_kept() -> None:
    r = bridgeenv.Row("llama", "llama3_70b", "h100", "bf16", BaseConfig(tp=4), {}, None)
    assert bridgeenv.perf_env({"CUDA_DEVICE_MAX_CONNECTIONS": "4"}, r, [])[
        "CUDA_DEVICE_MAX_CONNECTIONS"] == "4"
    assert bridgeenv.perf_env({}, r, [])["CUDA_DEVICE_MAX_CONNECTIONS"] == "1"


def test_layernorm_sm_margin_is_20_with_an_ep_dispatcher_else_16() -> None:
    moe = env_of(QWEN, "gb300", "235b", "bf16", 512)
    dense = env_of(LLAMA, "gb300", "405b", "fp8", 512)
    assert moe["NVTE_FWD_LAYERNORM_SM_MARGIN"] == moe["NVTE_BWD_LAYERNORM_SM_MARGIN"] == "20"
    assert dense["NVTE_FWD_LAYERNORM_SM_MARGIN"] == dense["NVTE_BWD_LAYERNORM_SM_MARGIN"] == "16"


def test_hybrid_ep_nvlink_domain_of_8_or_72() -> None:
    nvl8 = env_of(QWEN, "h100", "30b", "bf16", 64)  # EP 16 on an NVLink domain of 8
    nvl72 = env_of(QWEN, "gb300", "235b", "bf16", 512)  # EP 32 of 72
    assert (nvl8["NVLINK_DOMAIN_SIZE"], nvl8["USE_MNNVL"],
            nvl8["NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN"]) == ("8", "0", "8")
    assert (nvl72["NVLINK_DOMAIN_SIZE"], nvl72["USE_MNNVL"],
            nvl72["NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN"]) == ("72", "1", "32")
    assert nvl8["NUM_OF_TOKENS_PER_CHUNK_COMBINE_API"] == "128"
    assert "NVLINK_DOMAIN_SIZE" not in env_of(LLAMA, "gb300", "405b", "fp8", 512)
    small = env_of(QWEN, "gb300", "235b", "bf16", 512, EP="4")  # EP from the arguments
    assert small["NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN"] == "4"


def test_an_ep_beyond_the_nvlink_domain_is_refused_in_one_line() -> None:
    with pytest.raises(RequestError, match=r"^EP=144 is not supported on gb300: .* at most 72 "
                                           r"GPUs of an NVLink domain$"):
        job(QWEN, GPU_TYPE="gb300", JOB_TOTAL_GPUS="512", EP="144")


def test_p2p_chunksize_for_llama_70b_and_405b_with_pipeline_parallelism() -> None:
    assert env_of(LLAMA, "gb300", "405b", "fp8", 512)["NCCL_P2P_NET_CHUNKSIZE"] == "2097152"
    assert "NCCL_P2P_NET_CHUNKSIZE" not in env_of(LLAMA, "gb300", "70b", "fp8", 512)  # PP 1
    piped = env_of(LLAMA, "gb300", "70b", "fp8", 512, PP="2")  # PP from the arguments
    assert piped["NCCL_P2P_NET_CHUNKSIZE"] == "2097152"
    assert "NCCL_P2P_NET_CHUNKSIZE" not in env_of(QWEN, "gb300", "235b", "bf16", 512)  # PP 4


def test_full_iteration_cuda_graph_and_cutedsl_grouped_mlp() -> None:
    graph = env_of(QWEN, "gb300", "235b", "fp8", 512)  # fp8_mx: full iteration, CuTe DSL
    assert graph["PYTORCH_CUDA_ALLOC_CONF"] == \
        "expandable_segments:True,graph_capture_record_stream_reuse:True"
    assert graph["TORCH_NCCL_AVOID_RECORD_STREAMS"] == "0"
    assert graph["NVTE_CUTEDSL_FUSED_GROUPED_MLP"] == "1"
    assert graph["CUDNNFE_CLUSTER_OVERLAP_MARGIN"] == "8"
    plain = env_of(QWEN, "gb300", "235b", "bf16", 512)
    assert plain["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    assert plain["TORCH_NCCL_AVOID_RECORD_STREAMS"] == "1"
    assert "NVTE_CUTEDSL_FUSED_GROUPED_MLP" not in plain
    # CuTe DSL without all-to-all overlap: no cluster overlap margin
    r = bridgeenv.Row("qwen", "qwen3_235b_a22b", "gb300", "bf16", BaseConfig(cutedsl=True), {},
                      None)
    out = bridgeenv.perf_env({}, r, [])
    assert out["NVTE_CUTEDSL_FUSED_GROUPED_MLP"] == "1"
    assert "CUDNNFE_CLUSTER_OVERLAP_MARGIN" not in out


def test_allocator_settings_dropped_with_llama_fsdp_or_nccl_user_buffers() -> None:
    fsdp = env_of(LLAMA, "gb300", "70b", "fp8", 512)  # fp8_cs: Megatron FSDP
    assert "PYTORCH_CUDA_ALLOC_CONF" not in fsdp and "NCCL_GRAPH_REGISTER" not in fsdp
    kept = env_of(LLAMA, "gb300", "405b", "fp8", 512)
    assert kept["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    start = {"PYTORCH_CUDA_ALLOC_CONF": "x", "NCCL_GRAPH_REGISTER": "0"}
    ub = bridgeenv.Row("qwen", "q", "gb300", "bf16", BaseConfig(nccl_ub=True), {}, None)
    other_fsdp = bridgeenv.Row("qwen", "q", "gb300", "bf16", BaseConfig(fsdp=True), {}, None)
    assert "PYTORCH_CUDA_ALLOC_CONF" not in bridgeenv.perf_env(start, ub, [])
    assert bridgeenv.perf_env(start, other_fsdp, [])["PYTORCH_CUDA_ALLOC_CONF"] == "x"


def test_cudnn_layernorm_variables_only_where_the_plugin_keeps_them() -> None:
    kept = env_of(LLAMA, "gb300", "405b", "fp8", 512)  # fp8_cs on gb300
    dropped = env_of(LLAMA, "b300", "405b", "fp8", 512)
    assert kept["NVTE_NORM_FWD_USE_CUDNN"] == kept["NVTE_NORM_BWD_USE_CUDNN"] == "1"
    assert "NVTE_NORM_FWD_USE_CUDNN" not in dropped and "NVTE_NORM_BWD_USE_CUDNN" not in dropped


def test_model_specific_variables() -> None:
    h100_8b = env_of(LLAMA, "h100", "8b", "fp8", 16)  # the row's own: NCCL_CTA_POLICY
    assert h100_8b["NCCL_CTA_POLICY"] == "1" and h100_8b["NVTE_NORM_FWD_USE_CUDNN"] == "1"
    assert "NCCL_CTA_POLICY" not in env_of(LLAMA, "h100", "8b", "bf16", 16)
    deepseek = env_of(DEEPSEEK, "gb300", "671b", "bf16", 512)  # the size's: every row
    assert deepseek["NVTE_ALLOW_NONDETERMINISTIC_ALGO"] == "0"
    assert "NVTE_ALLOW_NONDETERMINISTIC_ALGO" not in env_of(QWEN, "gb300", "235b", "bf16", 512)


def test_b300_ignores_cpu_affinity_and_nvfp4_uses_fast_math() -> None:
    b300 = env_of(LLAMA, "b300", "405b", "nvfp4", 512)
    assert b300["NCCL_IGNORE_CPU_AFFINITY"] == "1" and b300["NVTE_USE_FAST_MATH"] == "1"
    gb300 = env_of(LLAMA, "gb300", "405b", "fp8", 512)
    assert "NCCL_IGNORE_CPU_AFFINITY" not in gb300 and "NVTE_USE_FAST_MATH" not in gb300


def test_layout_takes_the_last_flag_of_either_form() -> None:
    base = BaseConfig(tp=4, pp=8, ep=2)
    assert bridgeenv.layout(base, []) == {"tp": 4, "pp": 8, "cp": 1, "ep": 2}
    assert bridgeenv.layout(base, ["-tp", "2", "--pipeline_model_parallel_size=4", "-tp", "1",
                                   "--context_parallel_size", "2"]) == \
        {"tp": 1, "pp": 4, "cp": 2, "ep": 2}


def test_deepseek_layout_rules_reach_the_plugin() -> None:
    """deepseek-v3 on gb300 at 128 GPUs: launch.sh's -ep 32 (not the base config's) sizes the
    hybrid-EP domain."""
    at_128 = env_of(DEEPSEEK, "gb300", "671b", "bf16", 128)
    assert at_128["NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN"] == "32"
    assert env_of(DEEPSEEK, "gb300", "671b", "bf16", 512)[
        "NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN"] == "64"


def test_a_row_without_a_base_config_is_refused_in_one_line() -> None:
    with pytest.raises(RequestError) as err:
        job("pretrain_nemotron_3", GPU_TYPE="gb300", MODEL_SIZE="30b", DTYPE="fp8",
            FP8_RECIPE="cs", JOB_TOTAL_GPUS="64")
    assert str(err.value) == ("FP8_RECIPE=cs is not supported by nemotron3 30b on gb300: "
                              "Megatron-Bridge has no workload base config for compute dtype "
                              "fp8_cs; allowed: mx")


def test_manual_gc_ends_the_arguments() -> None:
    bj = job(QWEN, GPU_TYPE="gb300", JOB_TOTAL_GPUS="512")
    assert bj.args[-2:] == ("train.manual_gc=true", "train.manual_gc_interval=100")
    assert not any(a.startswith("profiling.") or a == "--enable_nsys" for a in bj.args)


# --- ENABLE_PROFILE ---------------------------------------------------------------------------

def test_profile_arguments_and_overrides() -> None:
    bj = job(LLAMA, GPU_TYPE="gb300", MODEL_SIZE="8b", JOB_TOTAL_GPUS="8",
             ENABLE_PROFILE="true", PROFILE_START_STEP="20", PROFILE_STOP_STEP="25")
    args = list(bj.args)
    flags = ["--enable_nsys", "--profiling_start_step=20", "--profiling_stop_step=25",
             "--profiling_ranks=0,1,2,3,4,5,6,7", "--nsys_trace=cuda,nvtx",
             "--nsys_extra_args=--nvtx-domain-include=NCCL"]
    at = args.index("--enable_nsys")
    assert args[at:at + len(flags)] == flags
    assert "--profiling_gpu_metrics" not in args
    assert args[args.index("--max_steps") + 1] == "25"  # llmb's rule: a profile stops there
    assert args[-7:] == ["train.manual_gc=true", "train.manual_gc_interval=100",
                         "profiling.use_nsys_profiler=true", "profiling.profile_step_start=20",
                         "profiling.profile_step_end=25",
                         "profiling.profile_ranks=[0,1,2,3,4,5,6,7]",
                         "profiling.record_shapes=false"]
    assert "GPU_METRICS_NODES" not in bj.env


def test_nsys_launcher_settings() -> None:
    bridge = {"profile_args": ["--nsys_trace=cuda", "--nsys_extra_args=--a,--b"]}
    got = bridgeenv.nsys_launcher(bridge, ["--force-overwrite=true"], True)
    assert got == {"nsys_profile": True, "nsys_trace": ["cuda"],
                   "nsys_extra_args": ["--a", "--b", "--force-overwrite=true"],
                   "nsys_filename": bridgeenv.NSYS_FILENAME, "nsys_gpu_metrics": True}
    assert bridgeenv.nsys_launcher({"profile_args": []}, [], False)["nsys_trace"] == \
        ["cuda-sw", "nvtx"]


def dry_run(bj: bridgejob.BridgeJob) -> str:
    out = io.StringIO()
    bridgejob.dry_run(bj, bj.paths(stamp=STAMP), out)
    return out.getvalue()


def test_enable_profile_dry_run_shows_nsys_and_where_its_reports_go() -> None:
    bj = job(DEEPSEEK, GPU_TYPE="gb300", JOB_TOTAL_GPUS="512", ENABLE_PROFILE="true")
    text = dry_run(bj)
    job_dir = bj.paths(stamp=STAMP).job_dir
    assert (f"# ENABLE_PROFILE: nsys writes each rank's report into {job_dir}/nsys_profile "
            "(/nemo_run/nsys_profile in the job), named "
            "profile_%p_%q{SLURM_JOB_ID}_node%q{SLURM_NODEID}_rank%q{SLURM_PROCID}.nsys-rep") \
        in text
    srun = next(line for line in text.splitlines() if line.startswith("srun "))
    assert (" nsys profile -s none -t cuda -o /nemo_run/nsys_profile/profile_%p_"
            "%q{SLURM_JOB_ID}_node%q{SLURM_NODEID}_rank%q{SLURM_PROCID} "
            "--nvtx-domain-include=NCCL --force-overwrite=true --capture-range=cudaProfilerApi "
            "--capture-range-end=stop --cuda-graph-trace=node --cuda-event-trace=false "
            "bash /nemo_run/scripts/") in srun
    assert f"{job_dir}:/nemo_run" in srun  # the reports' folder is the job directory's
    assert "profiling.use_nsys_profiler=true" in text
    assert "nsys" not in dry_run(job(DEEPSEEK, GPU_TYPE="gb300", JOB_TOTAL_GPUS="512"))


def test_gpu_metrics_name_the_first_node() -> None:
    bj = job(QWEN, GPU_TYPE="gb300", JOB_TOTAL_GPUS="512", ENABLE_PROFILE="true",
             ENABLE_GPU_METRICS="true")
    assert bj.env["GPU_METRICS_NODES"] == "0" and "--profiling_gpu_metrics" in bj.args
    text = dry_run(bj)
    assert "export GPU_METRICS_NODES=0" in text
    assert 'grep -q -w "${SLURM_NODEID}"; then GPU_METRICS_FLAG=' in text


def test_a_profiled_run_at_1024_gpus_has_a_valid_manifest() -> None:
    """Every rank is profiled: the rank lists (1024 numbers, twice) stay within the run
    manifest's bounds, which hold what run_script.py is asked."""
    from llmb import manifest as run_manifest

    bj = job(DEEPSEEK, GPU_TYPE="h100", JOB_TOTAL_GPUS="1024", ENABLE_PROFILE="true")
    checked = run_manifest.check(bridgejob.manifest(bj, bj.paths(stamp=STAMP),
                                                    created="2026-01-01T00:00:00Z"))
    assert checked["options"]["profile"] is True
    assert f"--profiling_ranks={','.join(map(str, range(1024)))}" in checked["bridge"]["args"]
