"""Fidelity: every published row's configured NeMo recipe is the upstream job (make test-nemo).

For every published row of every recipe, in every run variant upstream distinguishes (plain,
checkpoint save, checkpoint load, Run:ai where upstream has a Run:ai job), llmb.container.train
builds the NeMo 2.3.1 recipe it would train; the performance-relevant fields of that configured
recipe and the job's environment must equal tests/helpers/upstream_jobs.py, the table of what
NVIDIA's published jobs set (each value cited by repository, tag or commit and path), except where
the table lists a deliberate deviation, whose value is checked instead.
"""

from __future__ import annotations

from typing import Any

import pytest
import upstream_jobs
from llmb.container import train
from llmb.launch import jobenv
from llmb.recipes import catalog
from trainmanifests import CASES, make_manifest, name_of


def _attention_backend(config: Any) -> str:
    value = config.attention_backend
    return getattr(value, "name", value)


def recipe_view(recipe_meta: catalog.Recipe, cfg: catalog.Config, manifest: dict[str, Any],
                recipe: Any) -> dict[str, Any]:
    """upstream_jobs.FIELDS, read from the configured recipe (and the job's environment)."""
    import fiddle as fdl

    p = train.plan(manifest)
    cbs = {name_of(c): c for c in recipe.trainer.callbacks}
    comm = cbs.get("MegatronCommOverlapCallback")
    gc = cbs.get("GarbageCollectionCallback")
    plugin = recipe.trainer.plugins
    config = recipe.model.config
    strategy = recipe.trainer.strategy
    tok = recipe.data.tokenizer
    layout = fdl.build(comm.tp_comm_overlap_cfg) if comm and comm.tp_comm_overlap_cfg else None
    view: dict[str, Any] = {
        # Which recipe function built it shows in the model config class and the callbacks.
        "nemo_recipe": p["nemo_recipe"],
        "performance_mode": p["recipe_args"]["performance_mode"],
        "model_config": name_of(config),
        "callbacks": tuple(name_of(c) for c in recipe.trainer.callbacks),
        "gc_interval": (gc.gc_interval_train, gc.gc_interval_val) if gc else None,
        "tp_overlap_fprop": (layout.proj_fprop.method, layout.fc2_fprop.method)
        if layout else None,
        "ddp_overlap_grad_reduce": strategy.ddp.overlap_grad_reduce,
        "ddp_overlap_param_gather": strategy.ddp.overlap_param_gather,
        "enable_cuda_graph": config.enable_cuda_graph,
        "use_te_rng_tracker": strategy.use_te_rng_tracker,
        "cross_entropy_fusion_impl": config.cross_entropy_fusion_impl,
        "attention_backend": _attention_backend(config),
        "fp8": plugin.fp8, "fp8_recipe": plugin.fp8_recipe,
        "fp8_amax": (plugin.fp8_amax_history_len, plugin.fp8_amax_compute_algo),
        "fp8_param_gather": plugin.fp8_param_gather,
        # The precision plugin's value is the one MegatronStrategy applies to the DDP config.
        "grad_reduce_in_fp32": plugin.grad_reduce_in_fp32,
        "use_precision_aware_optimizer": recipe.optim.config.use_precision_aware_optimizer,
        "tokenizer": (getattr(tok, "library", "huggingface"),
                      getattr(tok, "model_name", None) or tok.pretrained_model_name,
                      getattr(tok, "vocab_size", None)),
    }
    for key in ("tp_comm_overlap", "defer_embedding_wgrad_compute", "wgrad_deferral_limit",
                "align_param_gather", "overlap_param_gather_with_optimizer_step",
                "tp_comm_bootstrap_backend"):
        view[key] = getattr(comm, key) if comm else None
    view["tp_comm_overlap_cfg"] = _layout_name(layout, p)
    env = jobenv.job_env(recipe_meta, cfg, workload="/w")
    view |= {f"env.{name}": env.get(name) for name in upstream_jobs.ENV}
    return view


def _layout_name(layout: Any, p: dict[str, Any]) -> str | None:
    """The name of NeMo's userbuffer layout the callback holds (None: none)."""
    if layout is None:
        return None
    from nemo.collections.llm.recipes.tp_overlap_configs import userbuffers

    name = p["comm_overlap"]["tp_comm_overlap_cfg"]
    return name if layout == getattr(userbuffers, name) else "<a layout not named in the plan>"


def test_every_published_row_is_the_upstream_job(nemo_llm: Any) -> None:
    compared, problems = 0, []
    for _, recipe_meta, cfg in CASES:
        for variant in upstream_jobs.variants(recipe_meta.name, cfg.model_size):
            manifest = make_manifest(recipe_meta, cfg, **upstream_jobs.VARIANT_OPTIONS[variant])
            view = recipe_view(recipe_meta, cfg, manifest, train.build(manifest))
            row = upstream_jobs.row_of(cfg, variant)
            problems += [f"{cfg.experiment_name} {variant}: {m}"
                         for m in upstream_jobs.mismatches(row, view)]
            compared += 1
    assert not problems, "\n".join(problems[:40]) + f"\n({len(problems)} in all)"
    assert compared > 300


@pytest.mark.parametrize(("key", "field", "wrong"), [
    (("llama3.1", "8b", "bf16", "h100", 8), "defer_embedding_wgrad_compute", True),
    (("llama3.1", "70b", "fp8", "h100", 64), "wgrad_deferral_limit", 50),
    (("nemotron", "340b", "fp8", "b200", 128), "enable_cuda_graph", False),
    (("nemotronh", "56b", "fp8", "h100", 32), "gc_interval", (100, 100)),
    (("llama3.1", "70b", "fp8", "h100", 64), "tp_overlap_fprop", ("pipeline", "pipeline")),
])
def test_a_wrong_value_fails(nemo_llm: Any, key: tuple, field: str, wrong: Any) -> None:
    """The comparison is able to fail: each of these values is what llmb configured before
    this table existed (llama31_* performance mode, no CUDA graphs on Blackwell, Nemotron-H in
    performance mode) or upstream's value where llmb deviates."""
    recipe_meta = catalog.find_recipe(key[0])
    cfg = recipe_meta.resolve(*key[1:])
    manifest = make_manifest(recipe_meta, cfg)
    view = recipe_view(recipe_meta, cfg, manifest, train.build(manifest))
    row = upstream_jobs.row_of(cfg)
    assert upstream_jobs.mismatches(row, view) == []
    found = upstream_jobs.mismatches(row, {**view, field: wrong})
    assert [m.split(" ")[0] for m in found] == [field], found
