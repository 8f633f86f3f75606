"""llmb.launch.jobenv: the performance environment of the published jobs for every published row."""

from __future__ import annotations

import pytest
from llmb.launch import jobenv
from llmb.recipes import catalog

ROWS = [(r, c) for r in catalog.all_recipes()
        if not r.is_bridge for c in r.rows()]  # bridge/*: tests/launch/test_bridgejob.py


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


def test_a_hugging_face_tokenizer_gets_a_shared_cache_the_others_stay_offline() -> None:
    for recipe, cfg in ROWS:
        env = jobenv.job_env(recipe, cfg, workload="/lustre/llmb/workloads/w")
        if recipe.name == "llama3.1":  # the Llama 3 / 3.1 tokenizers, downloaded once
            assert env["TRANSFORMERS_OFFLINE"] == "0"
            assert env["HF_HOME"] == "/lustre/llmb/workloads/w/hf_home"
        else:  # NullTokenizer: nothing to download
            assert env["TRANSFORMERS_OFFLINE"] == "1" and "HF_HOME" not in env
        assert "HF_HOME" not in jobenv.job_env(recipe, cfg)  # no workload: the image's


def test_container_env_names_every_variable_the_job_sets() -> None:
    """pyxis lets the image's own ENV win unless srun names the variable in --container-env."""
    llama = catalog.find_recipe("llama3.1")
    env = jobenv.job_env(llama, llama.resolve("70b", "fp8", "h100", 64), workload="/w")
    arg = jobenv.container_env_arg(llama, env)
    names = arg.removeprefix("--container-env=").split(",")
    # HF_TOKEN reaches the job from the submitting environment, never written into the script.
    assert names == sorted([*env, "HF_TOKEN"])
    nemotron = catalog.find_recipe("nemotron")
    env = jobenv.job_env(nemotron, nemotron.resolve("340b", "fp8", "gb200", 256, "strong"),
                         nccl_trace=True)
    arg = jobenv.container_env_arg(nemotron, env)
    assert arg == "--container-env=" + ",".join(sorted(env))
    assert "NCCL_DEBUG" in env and "HF_TOKEN" not in arg
