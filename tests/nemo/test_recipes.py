"""The in-container half against the real NeMo 2.3.1 recipes (make test-nemo).

For every published row of every recipe (dtype and GPU variants included) and every run option
(profile with and without GPU metrics, NCCL trace, checkpoint save, checkpoint load), build the
NeMo recipe llmb.container.train would train and check the trainer, strategy, data, model,
precision, communication overlap, callbacks, logging and resume settings on the configured objects,
build the pieces that can be built without a GPU, and compare a few serialized recipes with goldens
(LLMB_UPDATE_GOLDEN=1 rewrites them). Building the model itself needs Transformer Engine, so the
model config is checked as configured (including Megatron's pipeline layer split rules).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from llmb.container import train
from llmb.recipes import catalog
from trainmanifests import CASES, OPTION_VARIANTS, find, make_manifest, name_of

GOLDEN = Path(__file__).parent / "golden"
# Model config class per NeMo recipe (what the recipe's model() factory configures).
MODEL_CONFIG = {
    "llama3_8b": "Llama3Config8B", "llama3_70b": "Llama3Config70B",
    "llama31_405b": "Llama31Config405B", "nemotron4_15b": "Nemotron4Config15B",
    "nemotron4_340b": "Nemotron4Config340B", "nemotronh_56b": "NemotronHConfig56B",
}


def callbacks_by_name(recipe: Any) -> dict[str, Any]:
    return {name_of(c): c for c in recipe.trainer.callbacks}


def check_layer_split(strategy: Any, num_layers: int) -> None:
    """Megatron-core 0.12's rule: layers (plus embedding/loss stages when accounted for) must
    split evenly over PP stages, and each stage's share over VP chunks."""
    pp = strategy.pipeline_model_parallel_size
    vp = strategy.virtual_pipeline_model_parallel_size
    args = strategy.__arguments__
    layers = (num_layers + bool(args.get("account_for_embedding_in_pipeline_split"))
              + bool(args.get("account_for_loss_in_pipeline_split")))
    assert layers % pp == 0, f"{layers} layers over PP {pp}"
    if vp:
        assert (layers // pp) % vp == 0, f"{layers // pp} layers per stage over VP {vp}"


def check_recipe(recipe: Any, manifest: dict[str, Any], llm: Any) -> None:
    import torch
    from nemo.collections.llm.recipes.tp_overlap_configs import userbuffers

    p = train.plan(manifest)
    par, opt = manifest["parallelism"], manifest["options"]
    where = f"{manifest['experiment']} {opt}"
    assert recipe.__fn_or_cls__ is llm.pretrain, where

    trainer = recipe.trainer
    assert (trainer.num_nodes, trainer.devices) == (manifest["nodes"],
                                                    manifest["gpus_per_node"]), where
    assert trainer.max_steps == opt["max_steps"] == trainer.val_check_interval, where
    assert (trainer.limit_val_batches, trainer.num_sanity_val_steps) == (0, 0), where
    assert trainer.log_every_n_steps == 1, where
    assert trainer.logger is False, where
    assert trainer.enable_checkpointing is bool(opt["checkpoint_save"]), where

    s = trainer.strategy
    assert name_of(s) == "MegatronStrategy"
    assert (s.tensor_model_parallel_size, s.pipeline_model_parallel_size,
            s.context_parallel_size) == (par["tp"], par["pp"], par["cp"]), where
    assert s.virtual_pipeline_model_parallel_size == (par["vp"] or None), where
    assert s.sequence_parallel is (par["tp"] > 1), where
    if par["pp"] > 1:
        assert s.pipeline_dtype is torch.bfloat16, where
    assert s.ddp.grad_reduce_in_fp32 is False, where
    assert manifest["num_gpus"] == par["tp"] * par["pp"] * par["cp"] * par["dp"]

    config = recipe.model.config
    assert name_of(config) == MODEL_CONFIG[manifest["nemo_recipe"]], where
    assert config.num_layers == par["num_layers"] == manifest["parallelism"]["num_layers"]
    assert config.seq_length == manifest["seq_length"], where
    assert config.cross_entropy_fusion_impl == p["model"]["cross_entropy_fusion_impl"]
    assert config.enable_cuda_graph is p["model"]["enable_cuda_graph"] is s.use_te_rng_tracker
    check_layer_split(s, config.num_layers)

    data = recipe.data
    assert name_of(data) == "MockDataModule", where
    assert (data.seq_length, data.micro_batch_size, data.global_batch_size) == (
        manifest["seq_length"], par["mbs"], par["gbs"]), where
    assert data.num_train_samples == opt["max_steps"] * par["gbs"]
    tok, want = data.tokenizer, p["data"]["tokenizer"]
    if want["library"] == "huggingface":
        assert name_of(tok) == "AutoTokenizer"
        assert tok.pretrained_model_name == want["model_name"]
    else:
        assert name_of(tok) == "get_nmt_tokenizer"
        assert (tok.library, tok.model_name, tok.vocab_size) == (
            "null", "NullTokenizer", want["vocab_size"])
    assert recipe.model.tokenizer == tok

    plugin = trainer.plugins
    assert name_of(plugin) == "MegatronMixedPrecision", where
    assert plugin.precision == "bf16-mixed" and plugin.grad_reduce_in_fp32 is False
    args = plugin.__arguments__
    if manifest["dtype"] == "fp8":
        assert (plugin.fp8, plugin.fp8_recipe) == ("hybrid", "delayed"), where
        assert (plugin.fp8_amax_history_len, plugin.fp8_amax_compute_algo) == (1024, "max")
        assert plugin.fp8_param_gather is True
        assert "first_last_layers_bf16" not in args  # no current-scaling leftovers
    else:
        assert "fp8" not in args, where
    assert recipe.optim.config.use_precision_aware_optimizer is (
        p["optim"]["use_precision_aware_optimizer"])

    cbs = callbacks_by_name(recipe)
    assert [name_of(c) for c in trainer.callbacks] == p["callbacks"], where
    assert "ModelCheckpoint" not in cbs
    if p["comm_overlap"] is None:
        assert "MegatronCommOverlapCallback" not in cbs and "GarbageCollectionCallback" not in cbs
    else:
        comm = cbs["MegatronCommOverlapCallback"]
        assert comm.tp_comm_overlap is (par["tp"] > 1), where
        ub = p["comm_overlap"]["tp_comm_overlap_cfg"]
        if ub is None:
            assert comm.tp_comm_overlap_cfg is None, where
        else:
            import fiddle as fdl

            assert fdl.build(comm.tp_comm_overlap_cfg) == getattr(userbuffers, ub), where
        for key, value in p["comm_overlap"].items():
            if key != "tp_comm_overlap_cfg":
                assert getattr(comm, key) == value, (where, key)
        gc = cbs["GarbageCollectionCallback"]
        assert (gc.gc_interval_train, gc.gc_interval_val) == (100, 100)
    if "FLOPsMeasurementCallback" in cbs:
        flops = cbs["FLOPsMeasurementCallback"]
        assert flops.model_config is config and flops.data_config is data
        assert flops.model_name == {"llama": "llama3", "nemotron4": "nemotron"}[
            manifest["family"]]
    else:
        assert manifest["family"] == "nemotronh"
    if opt["profile"]:
        nsys = cbs["NsysCallback"]
        assert (nsys.start_step, nsys.end_step) == (opt["profile_start_step"],
                                                    opt["profile_stop_step"])
        assert nsys.ranks == list(range(min(8, manifest["num_gpus"])))
        assert nsys.gen_shape is False
    else:
        assert "NsysCallback" not in cbs

    log = recipe.log
    log_dir = train.nemo_log_dir(manifest)
    assert (log.log_dir, log.name, log.use_datetime_version) == (log_dir, "default", False)
    assert log.tensorboard is None and log.wandb is None
    if opt["checkpoint_save"]:
        ckpt = log.ckpt
        assert name_of(ckpt) == "ModelCheckpoint"
        assert ckpt.dirpath == f"{log_dir}/default/checkpoints"
        assert ckpt.every_n_train_steps == opt["max_steps"]
        assert (ckpt.save_top_k, ckpt.save_last, ckpt.monitor) == (1, False, None)
        assert ckpt.save_optim_on_train_end is True
    else:
        assert log.ckpt is None

    resume = recipe.resume
    assert name_of(resume) == "AutoResume" and resume.resume_if_exists is False
    if opt["checkpoint_load_path"]:
        restore = resume.restore_config
        assert name_of(restore) == "RestoreConfig"
        assert restore.path == opt["checkpoint_load_path"]
        assert (restore.load_model_state, restore.load_optim_state,
                restore.load_artifacts) == (True, True, False)
    else:
        assert resume.restore_config is None


def build_cpu_parts(recipe: Any) -> None:
    """Build what needs no GPU and no Transformer Engine: precision plugin, logger with its
    checkpoint callback, resume and every callback but the FLOPs one (it builds the model
    config). Constructors validate their arguments (NsysCallback's step types, Lightning's
    ModelCheckpoint monitor/top-k rules)."""
    import fiddle as fdl

    for part in (recipe.trainer.plugins, recipe.log, recipe.resume):
        fdl.build(part)
    for cb in recipe.trainer.callbacks:
        if name_of(cb) != "FLOPsMeasurementCallback":
            fdl.build(cb)


@pytest.mark.parametrize("variant", sorted(OPTION_VARIANTS))
def test_every_published_row_builds_the_right_recipe(nemo_llm: Any, variant: str) -> None:
    built = 0
    for _, recipe_meta, cfg in CASES:
        manifest = make_manifest(recipe_meta, cfg, **OPTION_VARIANTS[variant])
        recipe = train.build(manifest)
        check_recipe(recipe, manifest, nemo_llm)
        built += 1
    assert built == len(CASES) > 50


@pytest.mark.parametrize("variant", sorted(OPTION_VARIANTS))
def test_cpu_buildable_parts_build(nemo_llm: Any, variant: str) -> None:
    seen = set()
    for _, recipe_meta, cfg in CASES:
        key = (cfg.recipe, cfg.model_size, cfg.dtype, cfg.gpu_type)
        if key in seen:
            continue
        seen.add(key)
        build_cpu_parts(train.build(make_manifest(recipe_meta, cfg, **OPTION_VARIANTS[variant])))


def test_recipe_facts_llmb_relies_on(nemo_llm: Any) -> None:
    """What NeMo 2.3.1's recipes bring with and without performance mode (llmb.container.train's
    plan names these callbacks and reuses their configs)."""
    for nemo_recipe in MODEL_CONFIG:
        recipe = getattr(nemo_llm, nemo_recipe).pretrain_recipe(performance_mode=True)
        cbs = callbacks_by_name(recipe)
        assert "MegatronCommOverlapCallback" in cbs, nemo_recipe
        assert "TimingCallback" in cbs
        assert name_of(recipe.data) == "MockDataModule"
        assert recipe.resume.resume_if_exists is True  # why train.py turns it off
        assert recipe.log.log_dir is None  # i.e. <cwd>/nemo_experiments: made explicit
        if nemo_recipe != "nemotronh_56b":
            gc = cbs["GarbageCollectionCallback"]
            assert (gc.gc_interval_train, gc.gc_interval_val) == (100, 100)
    base = nemo_llm.nemotronh_56b.pretrain_recipe()
    # Without performance mode: no garbage collection, no communication overlap; a checkpoint
    # callback of its own (llmb drops it) and NeMo's DDP overlap settings.
    assert sorted(callbacks_by_name(base)) == ["ModelCheckpoint", "TimingCallback"]
    assert (base.trainer.strategy.ddp.overlap_grad_reduce,
            base.trainer.strategy.ddp.overlap_param_gather) == (True, False)
    # Nemotron-H's default is FP8 current scaling; the benchmark uses delayed scaling.
    assert base.trainer.plugins[0].fp8_recipe == "tensorwise"
    strategy = nemo_llm.llama31_405b.pretrain_recipe(performance_mode=True).trainer.strategy
    assert strategy.account_for_embedding_in_pipeline_split is True
    assert strategy.account_for_loss_in_pipeline_split is True


@pytest.mark.parametrize(("size", "llama3", "llama31"), [
    ("8b", "Llama3Config8B", "Llama31Config8B"), ("70b", "Llama3Config70B", "Llama31Config70B")])
def test_llama3_recipes_keep_the_shapes_the_flops_come_from(nemo_llm: Any, size: str,
                                                             llama3: str, llama31: str) -> None:
    """Llama 8b/70b run NeMo's llama3_* recipes as upstream did; the shapes NeMo's llama3 FLOPs
    formula (FLOPsMeasurementCallback) and the catalog's model FLOPs read are Llama 3.1's."""
    shape = catalog.find_recipe("llama3.1").size(size)["model"]
    fields = {"num_layers": "num_layers", "hidden_size": "hidden_size",
              "ffn_hidden_size": "ffn_hidden_size", "num_attention_heads": "num_attention_heads",
              "num_query_groups": "num_query_groups"}
    import nemo_run as run

    for name in (llama3, llama31):
        config = run.Config(getattr(nemo_llm, name))  # defaults; building needs TE
        assert {k: getattr(config, v) for k, v in fields.items()} == {
            k: shape[k] for k in fields}, name
    r, cfg = find("llama3.1", size, "fp8", "h100", 64)
    flops = callbacks_by_name(train.build(make_manifest(r, cfg)))["FLOPsMeasurementCallback"]
    assert name_of(flops.model_config) == llama3 and flops.model_name == "llama3"
    # The sequence length the formula reads is the data's, 8192 either way.
    assert flops.data_config.seq_length == flops.model_config.seq_length == 8192


def test_userbuffer_layouts_exist(nemo_llm: Any) -> None:
    from nemo.collections.llm.recipes.tp_overlap_configs import userbuffers

    names = {train.plan(make_manifest(r, cfg))["comm_overlap"]["tp_comm_overlap_cfg"]
             for _, r, cfg in CASES if r.name != "nemotronh"} - {None}
    assert len(names) == 6
    for name in names:
        assert isinstance(getattr(userbuffers, name, None),
                          userbuffers.TransformerLayerTPOverlapCfg), name


def test_flops_model_names_are_known_to_nemo(nemo_llm: Any) -> None:
    from nemo.lightning.pytorch.callbacks import flops_callback

    known = flops_callback._model_flops_map
    for name in train.FLOPS_MODEL_NAMES.values():
        assert name is None or name in known
    # Nemotron-H has no formula of its own: "nemotronh" would match the dense "nemotron" one.
    assert "nemotronh" not in known


def test_mock_data_builds_with_the_null_tokenizer(nemo_llm: Any) -> None:
    import fiddle as fdl

    r, cfg = find("nemotron", "15b", "bf16", "h100", 16)
    data = fdl.build(train.build(make_manifest(r, cfg)).data)
    # NeMo's NullTokenizer adds an end-of-document token to the 256000 of Nemotron-4 (as in
    # NeMo's own Nemotron-4 performance scripts); the model pads it to a multiple of 128.
    assert data.tokenizer.vocab_size == 256001
    assert (data.seq_length, data.micro_batch_size, data.global_batch_size) == (4096, 2, 64)


GOLDEN_CASES = [
    ("llama3.1", "8b", "fp8", "h100", 16, "weak", variant) for variant in sorted(OPTION_VARIANTS)
] + [
    ("llama3.1", "8b", "bf16", "h100", 8, "weak", "plain"),
    ("llama3.1", "70b", "bf16", "h100", 64, "weak", "plain"),
    ("llama3.1", "70b", "fp8", "h100", 64, "weak", "plain"),
    ("llama3.1", "405b", "fp8", "h100", 64, "weak", "plain"),
    ("llama3.1", "405b", "bf16", "h100", 512, "weak", "plain"),
    ("nemotron", "15b", "fp8", "h100", 16, "weak", "plain"),
    ("nemotron", "340b", "bf16", "h100", 128, "weak", "plain"),
    ("nemotron", "340b", "fp8", "gb200", 512, "strong", "plain"),
    ("nemotronh", "56b", "fp8", "h100", 32, "weak", "plain"),
]


def golden_path(case: tuple) -> Path:
    return GOLDEN / f"{'_'.join(map(str, case))}.yaml"


@pytest.mark.parametrize("case", GOLDEN_CASES, ids=lambda c: "-".join(map(str, c)))
def test_print_config_matches_golden(nemo_llm: Any, case: tuple, capsys) -> None:
    """What `train --manifest PATH --print-config` prints (llmb.container.train.print_config, the
    same code the CLI runs) is the golden; LLMB_UPDATE_GOLDEN=1 regenerates the goldens from it."""
    *key, variant = case
    r, cfg = find(*key)
    assert train.print_config(make_manifest(r, cfg, **OPTION_VARIANTS[variant])) == 0
    text = capsys.readouterr().out
    path = golden_path(case)
    if os.environ.get("LLMB_UPDATE_GOLDEN") == "1" or not path.exists():
        path.write_text(text)
        if os.environ.get("LLMB_UPDATE_GOLDEN") != "1":
            pytest.fail(f"wrote missing golden {path.name}; check it and commit it")
    assert text == path.read_text(), f"{path.name} differs (LLMB_UPDATE_GOLDEN=1 rewrites it)"


def test_every_golden_has_a_case() -> None:
    """A golden no case writes any more would never be checked again."""
    assert sorted(GOLDEN.glob("*.yaml")) == sorted(golden_path(c) for c in GOLDEN_CASES)


def test_the_entrypoint_prints_the_config(tmp_path: Path) -> None:
    """The command a user runs in the image: the recipe's entrypoint, `train --manifest PATH
    --print-config`, prints the golden on stdout and trains nothing."""
    case = ("nemotron", "340b", "fp8", "gb200", 512, "strong", "plain")
    r, cfg = find(*case[:-1])
    manifest = tmp_path / "llmb_manifest.json"
    manifest.write_text(json.dumps(make_manifest(r, cfg)))
    entry = r.directory / str(r.data["entrypoint"])
    done = subprocess.run([sys.executable, str(entry), "train", "--manifest", str(manifest),
                           "--print-config"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == golden_path(case).read_text()


@pytest.mark.parametrize(("change", "message"), [
    (lambda m: m.update(nemo_recipe="llama99_8b"),
     "manifest: recipe 'llama99_8b' is not in nemo.collections.llm of this NeMo"),
    (lambda m: m["nemo"]["comm_overlap"].update(userbuffers="userbuffers_fp8_h100_nope"),
     "manifest: userbuffer layout 'userbuffers_fp8_h100_nope' is not in "
     "nemo.collections.llm.recipes.tp_overlap_configs.userbuffers of this NeMo"),
])
def test_a_name_this_nemo_lacks_is_one_line(nemo_llm: Any, change: Any, message: str,
                                            capsys) -> None:
    r, cfg = find("llama3.1", "70b", "fp8", "h100", 64)
    manifest = make_manifest(r, cfg)
    change(manifest)
    assert train.print_config(manifest) == 2
    assert capsys.readouterr().err == f"llmb: {message}\n"


def test_every_recipe_has_rows(nemo_llm: Any) -> None:
    assert {r.name for r in catalog.all_recipes() if not r.is_bridge} == {  # NeMo's recipes
        "llama3.1", "nemotron", "nemotronh"}
