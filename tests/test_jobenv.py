"""llmb.jobenv: the performance environment of SPEC §4 for every published row."""

from __future__ import annotations

import pytest
from llmb import catalog, jobenv

ROWS = [(r, c) for r in catalog.all_recipes() for c in r.rows()]


@pytest.mark.parametrize(("recipe", "cfg"), ROWS, ids=lambda x: getattr(x, "experiment_name",
                                                                         getattr(x, "name", "")))
def test_every_row(recipe: catalog.Recipe, cfg: catalog.Config) -> None:
    env = jobenv.job_env(recipe, cfg)
    assert env["TORCH_NCCL_AVOID_RECORD_STREAMS"] == "1"
    assert env["NCCL_NVLS_ENABLE"] == "0"
    assert env["NVTE_FLASH_ATTN"] == "1"
    assert env["NVTE_FUSED_ATTN"] == ("0" if recipe.name == "nemotronh" else "1")
    assert env["TOKENIZERS_PARALLELISM"] == "False"
    assert env["NEMO_LOG_MEMORY_USAGE"] == "1"
    assert env["NVTE_FWD_LAYERNORM_SM_MARGIN"] == env["NVTE_BWD_LAYERNORM_SM_MARGIN"] == "16"
    if cfg.tp > 1 or cfg.cp > 1:
        assert env["CUDA_DEVICE_MAX_CONNECTIONS"] == ("1" if cfg.gpu_type == "h100" else "32")
    else:
        assert "CUDA_DEVICE_MAX_CONNECTIONS" not in env
    assert (env.get("NCCL_P2P_NET_CHUNKSIZE") == "2097152") == (cfg.pp > 1)
    big = cfg.model_size in ("405b", "340b")
    assert (env.get("NVTE_NORM_FWD_USE_CUDNN") == "1") == big
    assert (env.get("NVTE_NORM_BWD_USE_CUDNN") == "1") == big
    assert (env.get("NCCL_NET_GDR_LEVEL") == "PHB") == (cfg.gpu_type == "gb200")
    assert "NCCL_DEBUG" not in env


def test_nccl_trace() -> None:
    recipe = catalog.find_recipe("llama3.1")
    env = jobenv.job_env(recipe, recipe.resolve("8b", "fp8", "h100", 8), nccl_trace=True)
    assert env["NCCL_DEBUG"] == "INFO" and env["NCCL_DEBUG_SUBSYS"] == "COLL,P2P,NET"


def test_size_env_overrides_and_recipe_env() -> None:
    nemotronh = catalog.find_recipe("nemotronh")
    assert jobenv.job_env(nemotronh, nemotronh.resolve("56b", "fp8", "h100", 32))[
        "NVTE_FUSED_ATTN"] == "0"
    nemotron = catalog.find_recipe("nemotron")
    env = jobenv.job_env(nemotron, nemotron.resolve("340b", "fp8", "gb200", 256, "strong"))
    assert env["CUDA_DEVICE_MAX_CONNECTIONS"] == "32" and env["NCCL_NET_GDR_LEVEL"] == "PHB"
