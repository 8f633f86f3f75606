"""The performance environment of a job (SPEC §4), computed from data.

Inputs: the resolved Config (TP/PP/CP, GPU type, size), common/gpus.yaml (per-GPU facts such as
CUDA_DEVICE_MAX_CONNECTIONS and GB200's NCCL_NET_GDR_LEVEL) and the recipe's metadata.yaml
(recipe-level `env`, e.g. Nemotron-H NVTE_FUSED_ATTN=0, and `sizes.<size>.env`, e.g. the cuDNN
norm kernels for 405b/340b). Later sources override earlier ones: base < GPU < recipe < size.
"""

from __future__ import annotations

from collections.abc import Mapping

from llmb import catalog

# Every job, every recipe.
BASE_ENV: dict[str, str] = {
    "TORCH_NCCL_AVOID_RECORD_STREAMS": "1",
    "NCCL_NVLS_ENABLE": "0",
    "NVTE_FLASH_ATTN": "1",
    "NVTE_FUSED_ATTN": "1",
    "TOKENIZERS_PARALLELISM": "False",
    "NEMO_LOG_MEMORY_USAGE": "1",
    "NVTE_FWD_LAYERNORM_SM_MARGIN": "16",
    "NVTE_BWD_LAYERNORM_SM_MARGIN": "16",
}
PIPELINE_ENV = {"NCCL_P2P_NET_CHUNKSIZE": "2097152"}  # when PP > 1
NCCL_TRACE_ENV = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "COLL,P2P,NET"}


def job_env(recipe: catalog.Recipe, config: catalog.Config,
            nccl_trace: bool = False) -> dict[str, str]:
    """The environment variables every rank of this job gets (sorted by name)."""
    gpu = catalog.get_gpu_type(config.gpu_type)
    env = dict(BASE_ENV)
    if config.tp > 1 or config.cp > 1:
        env["CUDA_DEVICE_MAX_CONNECTIONS"] = str(gpu.cuda_device_max_connections)
    if config.pp > 1:
        env.update(PIPELINE_ENV)
    env.update(_strings(gpu.env))
    env.update(_strings(recipe.data.get("env") or {}))
    env.update(_strings(recipe.size(config.model_size).get("env") or {}))
    if nccl_trace:
        env.update(NCCL_TRACE_ENV)
    return dict(sorted(env.items()))


def _strings(mapping: Mapping[str, object]) -> dict[str, str]:
    return {str(k): str(v) for k, v in mapping.items()}
