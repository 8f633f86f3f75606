"""The environment of a job, computed from data, and how it reaches the container.

Inputs: the resolved Config (TP/PP/CP, GPU type, size), common/gpus.yaml (per-GPU facts such as
CUDA_DEVICE_MAX_CONNECTIONS and GB200's NCCL_NET_GDR_LEVEL), the recipe's metadata.yaml
(recipe-level `env`, e.g. Nemotron-H NVTE_FUSED_ATTN=0, and `sizes.<size>.env`, e.g. the cuDNN
norm kernels for 405b/340b) and the row's tokenizer (llmb.recipes.nemojob): a Hugging Face tokenizer
is downloaded once into a cache shared by every rank (HF_HOME under the workload directory), any
other keeps the compute nodes offline. Later sources override earlier ones: base < tokenizer <
GPU < recipe < size.

pyxis lets a variable the container image sets win over the job's value unless the variable is
named in srun's --container-env, so every variable the job sets is named there
(`container_env_arg`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from llmb.recipes import catalog

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
# The shared Hugging Face cache, relative to the workload directory ($LLMB_WORKLOAD, which
# every job mounts): the first rank downloads the tokenizer, the others read it.
HF_HOME_DIR = "hf_home"
# Passed through from the submitting environment, never written into a job script.
SECRET_NAMES = ("HF_TOKEN",)


def job_env(recipe: catalog.Recipe, config: catalog.Config, nccl_trace: bool = False,
            workload: Path | str | None = None) -> dict[str, str]:
    """The environment variables every rank of this job gets (sorted by name).

    workload: the job's $LLMB_WORKLOAD as the container sees it; it holds the shared Hugging
    Face cache (without it, HF_HOME is left to the image).
    """
    gpu = config.gpu
    env = dict(BASE_ENV)
    tokenizer = recipe.nemo_settings(config)["tokenizer"]
    if tokenizer["library"] == "huggingface":
        env["TRANSFORMERS_OFFLINE"] = "0"
        if workload is not None:
            env["HF_HOME"] = str(Path(workload) / HF_HOME_DIR)
    else:
        env["TRANSFORMERS_OFFLINE"] = "1"
    if (config.tp or 1) > 1 or (config.cp or 1) > 1:  # None: a Megatron-Bridge row
        env["CUDA_DEVICE_MAX_CONNECTIONS"] = str(gpu.cuda_device_max_connections)
    if (config.pp or 1) > 1:
        env.update(PIPELINE_ENV)
    env.update(_strings(gpu.env))
    env.update(_strings(recipe.data.get("env") or {}))
    env.update(_strings(recipe.size(config.model_size).get("env") or {}))
    if nccl_trace:
        env.update(NCCL_TRACE_ENV)
    return dict(sorted(env.items()))


def container_env_arg(recipe: catalog.Recipe, env: Mapping[str, str]) -> str:
    """srun's `--container-env=NAME,...`: the job's variables (and the recipe's secrets, which
    reach the job from the submitting environment) override the image's own values."""
    names = set(env)
    if recipe.data.get("requires_hf_token"):
        names.update(SECRET_NAMES)
    return "--container-env=" + ",".join(sorted(names))


def _strings(mapping: Mapping[str, object]) -> dict[str, str]:
    return {str(k): str(v) for k, v in mapping.items()}
