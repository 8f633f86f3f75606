"""In-container half of a pretrain entrypoint: run manifest -> NeMo 2 recipe -> training.

The login node and the container run different nemo-run versions (0.11.1 and 0.4.0), so no
serialized nemo-run/fiddle config crosses between them. The launcher writes a plain JSON run
manifest; this module turns it into the NeMo recipe itself, in two steps:

- `plan(manifest)`: every override as plain data (no NeMo needed; unit-tested in the normal suite).
- `build_recipe(manifest)`: the `nemo.collections.llm` pre-train recipe in performance mode with
  the plan applied, not yet run (checked by `make test-nemo` against NeMo 2.3.1).

`run(manifest)` builds and trains in this process (one process per GPU, started by srun or
torchrun; Lightning takes the ranks from SLURM_* / torchrun variables). NeMo, nemo_run and
fiddle are imported only inside `build_recipe` and `run`.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from llmb import nemolog

# Per model family: the FLOPs formula name FLOPsMeasurementCallback knows (None: it has none;
# NeMo 2.3.1 would silently match "nemotronh" to the dense Nemotron-4 formula and log a wrong
# TFLOPS_per_GPU, which seed 000 calls invalid, so Nemotron-H logs no TFLOPS_per_GPU and the
# analyzer computes it from the catalog's model FLOPs) and the tokenizer the mock data uses
# (its vocabulary sets the embedding size; the data itself is synthetic).
FAMILIES: dict[str, dict[str, Any]] = {
    "llama": {
        "flops_model_name": "llama3",
        # The Llama 3.1 tokenizer from Hugging Face: why llama3.1 runs need HF_TOKEN.
        "tokenizer": {"library": "huggingface", "model_name": "meta-llama/Llama-3.1-{SIZE}"},
    },
    "nemotron4": {
        "flops_model_name": "nemotron",
        "tokenizer": {"library": "null", "model_name": "NullTokenizer", "vocab_size": 256000},
    },
    "nemotronh": {
        "flops_model_name": None,
        # The recipe's own tokenizer (public nvidia/Nemotron-H-8B-Base-8K, vocabulary 131072).
        "tokenizer": None,
    },
}

# Transformer Engine userbuffer layouts for TP communication overlap (the GEMM overlap methods
# and SM counts; the buffers' shapes come from the model), by NeMo recipe and GPU architecture:
# the ones NeMo 2.3.1's own performance scripts pick (scripts/performance/llm/pretrain_*.py),
# named as in nemo.collections.llm.recipes.tp_overlap_configs.userbuffers ({dtype}: bf16|fp8).
# No entry: Transformer Engine's default layout (e.g. Nemotron-4 on H100, as NeMo does).
# A layout is only used at the TP size it was tuned for. `make test-nemo` checks the names.
USERBUFFERS: dict[tuple[str, str], str] = {
    ("llama31_70b", "h100"): "userbuffers_{dtype}_h100_h8192_tp4_mbs1_seqlen8192",
    ("llama31_70b", "b200"): "userbuffers_{dtype}_b200_h8192_tp2_mbs1_seqlen8192",
    ("llama31_405b", "h100"): "userbuffers_{dtype}_h100_h16384_tp8_cp2_mbs1_seqlen8192",
    ("llama31_405b", "b200"): "userbuffers_{dtype}_b200_h16384_tp4_cp2_mbs1_seqlen8192",
    # NeMo uses the bf16 layout for both dtypes here.
    ("nemotron4_15b", "b200"): "userbuffers_bf16_b200_h6144_tp2_mbs1_seqlen4096",
    ("nemotron4_340b", "b200"): "userbuffers_{dtype}_b200_h18432_tp8_mbs1_seqlen4096",
}
# Userbuffer layouts are tuned per GPU architecture; GB200 uses the B200 ones.
USERBUFFER_ARCH = {"h100": "h100", "b200": "b200", "gb200": "b200"}

# Ranks nsys profiles: the first eight (one H100/B200 node). The seeds say "MPI Ranks: 0-8";
# read as Python's range(0, 8), which is one whole node, not eight ranks plus a lone rank of
# the second node.
NSYS_RANKS = 8
# GarbageCollectionCallback interval (steps): Python's GC runs only every 100 steps, i.e. not
# during a 50-step benchmark, as in NeMo's performance recipes.
GC_INTERVAL = 100
# FP8 (seeds and SPEC: bf16 with fp8 mixed, per-tensor delayed scaling): NeMo's
# bf16_with_fp8_mixed() defaults, spelled out so a change in NeMo shows up in make test-nemo.
FP8 = {"fp8": "hybrid", "fp8_recipe": "delayed", "fp8_margin": 0, "fp8_amax_history_len": 1024,
       "fp8_amax_compute_algo": "max", "fp8_param_gather": True}

MANIFEST_KEYS = ("schema", "recipe", "experiment", "model_size", "dtype", "gpu_type", "num_gpus",
                 "gpus_per_node", "nodes", "seq_length", "family", "nemo_recipe", "model",
                 "parallelism", "options")
PARALLEL_KEYS = ("tp", "pp", "cp", "vp", "mbs", "gbs", "dp", "num_layers")
OPTION_KEYS = ("max_steps", "profile", "profile_start_step", "profile_stop_step", "gpu_metrics",
               "nccl_trace", "checkpoint_save", "checkpoint_load_path")


class ManifestError(ValueError):
    """A run manifest this module cannot turn into a recipe (one line for people)."""


def _require(where: str, data: object, keys: tuple[str, ...]) -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        raise ManifestError(f"manifest {where} is not a JSON object")
    missing = [k for k in keys if k not in data]
    if missing:
        raise ManifestError(f"manifest {where} lacks {', '.join(missing)}")
    return data


def _positive(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ManifestError(f"manifest {name}={value!r} is not a positive integer")
    return value


def userbuffer_config(nemo_recipe: str, gpu_type: str, dtype: str, tp: int) -> str | None:
    """The name of NeMo's userbuffer layout for this run, or None (Transformer Engine default)."""
    name = USERBUFFERS.get((nemo_recipe, USERBUFFER_ARCH.get(gpu_type, gpu_type)))
    if name is None or f"_tp{tp}_" not in name:
        return None
    return name.format(dtype=dtype)


def nemo_log_dir(manifest: Mapping[str, Any]) -> str | None:
    """Where NeMo writes its logs and checkpoints: <job dir>/code/nemo_experiments.

    That is NeMo's default (nemo_experiments/ in the working directory) for a job whose working
    directory is nemo-run's <job dir>/code, made explicit so it does not depend on the working
    directory. The manifest's job_dir is <run dir>/<exp>. None without a job_dir: NeMo's
    default under the working directory.
    """
    job_dir = manifest.get("job_dir")
    return str(Path(job_dir) / nemolog.NEMO_EXPERIMENTS_DIR) if job_dir else None


def plan(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """Every setting the in-container half applies to the NeMo recipe, as plain JSON data."""
    m = _require("", manifest, MANIFEST_KEYS)
    if m["schema"] != 1:
        raise ManifestError(f"manifest schema={m['schema']!r} is not supported; supported: 1")
    par = _require("parallelism", m["parallelism"], PARALLEL_KEYS)
    opt = _require("options", m["options"], OPTION_KEYS)
    family = FAMILIES.get(m["family"])
    if family is None:
        raise ManifestError(f"manifest family={m['family']!r} is not supported; "
                            f"supported: {', '.join(FAMILIES)}")
    if m["dtype"] not in ("bf16", "fp8"):
        raise ManifestError(f"manifest dtype={m['dtype']!r} is not supported; allowed: bf16, fp8")
    tp, pp, cp = (_positive(f"parallelism.{k}", par[k]) for k in ("tp", "pp", "cp"))
    mbs, gbs, dp = (_positive(f"parallelism.{k}", par[k]) for k in ("mbs", "gbs", "dp"))
    vp = par["vp"] if par["vp"] not in (None, 1) else None
    if vp is not None:
        _positive("parallelism.vp", vp)
    ep = par.get("ep") or 1
    num_gpus = _positive("num_gpus", m["num_gpus"])
    max_steps = _positive("options.max_steps", opt["max_steps"])
    seq_length = _positive("seq_length", m["seq_length"])
    num_layers = _positive("parallelism.num_layers", par["num_layers"])
    if tp * pp * cp * dp != num_gpus:
        raise ManifestError(f"manifest parallelism: TP x PP x CP x DP = {tp * pp * cp * dp} "
                            f"is not num_gpus={num_gpus}")
    if gbs % (mbs * dp):
        raise ManifestError(f"manifest parallelism.gbs={gbs} is not divisible by MBS x DP "
                            f"= {mbs * dp}")
    save = bool(opt["checkpoint_save"])
    load_path = opt["checkpoint_load_path"] or None
    sequence_parallel = tp > 1
    tp_overlap = tp > 1 and sequence_parallel
    size = str(m["model_size"])

    tokenizer = family["tokenizer"]
    if tokenizer is not None:
        tokenizer = {k: (v.replace("{SIZE}", size.upper()) if isinstance(v, str) else v)
                     for k, v in tokenizer.items()}

    log_dir = nemo_log_dir(m)

    callbacks = ["TimingCallback", "GarbageCollectionCallback", "MegatronCommOverlapCallback"]
    if family["flops_model_name"]:
        callbacks.append("FLOPsMeasurementCallback")
    nsys = None
    if opt["profile"]:
        start, stop = opt["profile_start_step"], opt["profile_stop_step"]
        if not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0
                   for s in (start, stop)) or stop < start:
            raise ManifestError(f"manifest options.profile_start_step={start!r} and "
                                f"profile_stop_step={stop!r} are not steps 0 <= start <= stop")
        nsys = {"start_step": start, "end_step": stop,
                "ranks": list(range(min(NSYS_RANKS, num_gpus))), "gen_shape": False,
                "gpu_metrics": bool(opt["gpu_metrics"])}
        callbacks.append("NsysCallback")

    if m["dtype"] == "fp8":
        precision = {"plugin": "bf16_with_fp8_mixed", **FP8, "grad_reduce_in_fp32": False}
    else:
        precision = {"plugin": "bf16_mixed", "grad_reduce_in_fp32": False}

    return {
        "nemo_recipe": m["nemo_recipe"],
        "recipe_args": {"performance_mode": True, "num_nodes": _positive("nodes", m["nodes"]),
                        "num_gpus_per_node": _positive("gpus_per_node", m["gpus_per_node"])},
        "trainer": {
            "num_nodes": m["nodes"], "devices": m["gpus_per_node"], "max_steps": max_steps,
            # Validation off: never reached, no batches, no sanity check.
            "val_check_interval": max_steps, "limit_val_batches": 0, "limit_test_batches": 0,
            "num_sanity_val_steps": 0,
            "log_every_n_steps": 1,
            "enable_checkpointing": save,
            # No TensorBoard: it costs step time and nobody reads it here.
            "logger": False,
        },
        "strategy": {
            "tensor_model_parallel_size": tp, "pipeline_model_parallel_size": pp,
            "context_parallel_size": cp, "virtual_pipeline_model_parallel_size": vp,
            "expert_model_parallel_size": ep, "sequence_parallel": sequence_parallel,
            "pipeline_dtype": "bfloat16" if pp > 1 else None,
        },
        "ddp": {"grad_reduce_in_fp32": False},
        "precision": precision,
        "model": {"num_layers": num_layers, "seq_length": seq_length,
                  "cross_entropy_fusion_impl": "te"},
        "data": {"seq_length": seq_length, "micro_batch_size": mbs, "global_batch_size": gbs,
                 # Exactly one epoch of synthetic samples for the whole run.
                 "num_train_samples": max_steps * gbs, "tokenizer": tokenizer},
        "optim": {"use_precision_aware_optimizer": m["dtype"] == "bf16"},
        "comm_overlap": {
            "tp_comm_overlap": tp_overlap,
            "tp_comm_overlap_cfg": userbuffer_config(m["nemo_recipe"], m["gpu_type"],
                                                     m["dtype"], tp) if tp_overlap else None,
            # Overlapping the parameter all-gather with the optimizer step needs DP, PP and VP;
            # NeMo's recipes warn it breaks checkpointing, so not with save/load.
            "overlap_param_gather_with_optimizer_step":
                dp > 1 and pp > 1 and vp is not None and not save and load_path is None,
        },
        "callbacks": callbacks,
        "flops_model_name": family["flops_model_name"],
        "gc": {"gc_interval_train": GC_INTERVAL, "gc_interval_val": GC_INTERVAL},
        "nsys": nsys,
        # NCCL trace needs nothing in here: the launcher sets NCCL_DEBUG* and max_steps 5.
        "nccl_trace": bool(opt["nccl_trace"]),
        "log": {"log_dir": log_dir, "name": "default", "use_datetime_version": False,
                "tensorboard": None, "wandb": None},
        "checkpoint": {
            "save": save,
            "dir": str(Path(log_dir) / "default" / "checkpoints") if save and log_dir else None,
            # One checkpoint, at the last step, with the optimizer state (what a restart needs).
            "every_n_train_steps": max_steps if save else None,
            "save_top_k": 1 if save else None,
            "load_path": load_path,
        },
        # Loading restores weights and optimizer state into a fresh trainer (global step 0),
        # so max_steps (1 for a load run) counts steps after the load. Never auto-resume.
        "resume": {"resume_if_exists": False,
                   "restore": {"path": load_path, "load_model_state": True,
                               "load_optim_state": True, "load_artifacts": False}
                   if load_path else None},
    }


def _tokenizer_config(tok: Mapping[str, Any]):  # -> run.Config
    import nemo_run as run

    if tok["library"] == "huggingface":
        from nemo.collections.common.tokenizers.huggingface import AutoTokenizer

        return run.Config(AutoTokenizer, pretrained_model_name=tok["model_name"], use_fast=True)
    from nemo.collections.nlp.modules.common.tokenizer_utils import get_nmt_tokenizer

    return run.Config(get_nmt_tokenizer, library=tok["library"], model_name=tok["model_name"],
                      vocab_size=tok["vocab_size"])


def _find(callbacks: list, cls: type) -> list[int]:
    return [i for i, c in enumerate(callbacks) if getattr(c, "__fn_or_cls__", None) is cls]


def build_recipe(manifest: Mapping[str, Any]):  # -> nemo_run.Partial
    """The NeMo 2 pre-train recipe (performance mode) with every override of plan() applied."""
    p = plan(manifest)
    import fiddle as fdl
    import fiddle._src.experimental.dataclasses as fdl_dc
    import nemo_run as run
    import torch
    from nemo import lightning as nl
    from nemo.collections import llm
    from nemo.collections.llm.recipes.precision import mixed_precision
    from nemo.collections.llm.recipes.tp_overlap_configs import userbuffers
    from nemo.lightning.pytorch.callbacks import GarbageCollectionCallback, NsysCallback
    from nemo.lightning.pytorch.callbacks.flops_callback import FLOPsMeasurementCallback
    from nemo.lightning.pytorch.callbacks.megatron_comm_overlap import MegatronCommOverlapCallback
    from nemo.lightning.pytorch.strategies.utils import RestoreConfig
    from nemo.utils.exp_manager import TimingCallback

    recipe = getattr(llm, p["nemo_recipe"]).pretrain_recipe(**p["recipe_args"])
    trainer, strategy = recipe.trainer, recipe.trainer.strategy

    for key, value in p["trainer"].items():
        setattr(trainer, key, value)
    for key, value in p["strategy"].items():
        if key == "pipeline_dtype":
            value = getattr(torch, value) if value else strategy.pipeline_dtype
        setattr(strategy, key, value)
    for key, value in p["ddp"].items():
        setattr(strategy.ddp, key, value)

    prec = dict(p["precision"])
    plugin = getattr(mixed_precision, prec.pop("plugin"))()
    for key, value in prec.items():
        setattr(plugin, key, value)
    trainer.plugins = plugin

    for key, value in p["model"].items():
        setattr(recipe.model.config, key, value)
    data = dict(p["data"])
    tokenizer = data.pop("tokenizer")
    for key, value in data.items():
        setattr(recipe.data, key, value)
    if tokenizer is not None:
        recipe.data.tokenizer = _tokenizer_config(tokenizer)
        recipe.model.tokenizer = recipe.data.tokenizer
    recipe.optim.config.use_precision_aware_optimizer = p["optim"]["use_precision_aware_optimizer"]

    # Callbacks: exactly those the plan names, in its order; ModelCheckpoint only through the
    # logger below (Nemotron-H's recipe puts one on the trainer).
    existing = list(trainer.callbacks or [])

    def reuse(cls: type, **defaults: Any):
        found = _find(existing, cls)
        return existing[found[0]] if found else run.Config(cls, **defaults)

    comm = reuse(MegatronCommOverlapCallback)
    comm.tp_comm_overlap = p["comm_overlap"]["tp_comm_overlap"]
    cfg_name = p["comm_overlap"]["tp_comm_overlap_cfg"]
    # The userbuffer layouts are dataclass instances; as fiddle configs they serialize.
    comm.tp_comm_overlap_cfg = (
        fdl.cast(run.Config, fdl_dc.convert_dataclasses_to_configs(getattr(userbuffers, cfg_name)))
        if cfg_name else None)
    comm.overlap_param_gather_with_optimizer_step = (
        p["comm_overlap"]["overlap_param_gather_with_optimizer_step"])
    built = {
        "TimingCallback": lambda: reuse(TimingCallback),
        "GarbageCollectionCallback": lambda: reuse(GarbageCollectionCallback, **p["gc"]),
        "MegatronCommOverlapCallback": lambda: comm,
        "FLOPsMeasurementCallback": lambda: run.Config(
            FLOPsMeasurementCallback, model_config=recipe.model.config, data_config=recipe.data,
            model_name=p["flops_model_name"]),
        "NsysCallback": lambda: run.Config(
            NsysCallback, start_step=p["nsys"]["start_step"], end_step=p["nsys"]["end_step"],
            ranks=list(p["nsys"]["ranks"]), gen_shape=p["nsys"]["gen_shape"]),
    }
    trainer.callbacks = [built[name]() for name in p["callbacks"]]

    log = p["log"]
    recipe.log.log_dir = log["log_dir"]
    recipe.log.name = log["name"]
    recipe.log.use_datetime_version = log["use_datetime_version"]
    recipe.log.tensorboard = log["tensorboard"]
    recipe.log.wandb = log["wandb"]
    ckpt = p["checkpoint"]
    if ckpt["save"]:
        # monitor=None: no validation loss to rank by; NeMo names the checkpoint
        # default--None=0.0000-epoch=0-consumed_samples=<N> (as in the seeds).
        recipe.log.ckpt = run.Config(
            nl.ModelCheckpoint, monitor=None, save_last=False, save_top_k=ckpt["save_top_k"],
            every_n_train_steps=ckpt["every_n_train_steps"], save_on_train_epoch_end=False,
            save_optim_on_train_end=True, always_save_context=False,
            save_context_on_train_end=True, dirpath=ckpt["dir"])
    else:
        recipe.log.ckpt = None

    res = p["resume"]
    restore = (run.Config(RestoreConfig, **res["restore"]) if res["restore"] else None)
    recipe.resume = run.Config(nl.AutoResume, resume_if_exists=res["resume_if_exists"],
                               resume_ignore_no_checkpoint=True, restore_config=restore)
    return recipe


def run(manifest: Mapping[str, Any]) -> int:
    """Build the recipe and train in this process; the exit code for the entrypoint."""
    try:
        recipe = build_recipe(manifest)
    except ManifestError as exc:
        print(f"llmb: {exc}", file=sys.stderr)
        return 2
    import fiddle as fdl

    # What nemo_run.run(recipe, direct=True) does: build the configured pretrain() and call it.
    fdl.build(recipe)()
    return 0


def load_manifest(path: str | Path) -> dict[str, Any]:
    try:
        return json.loads(Path(path).read_text())
    except OSError as exc:
        raise ManifestError(f"cannot read manifest {path}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise ManifestError(f"manifest {path} is not valid JSON: {exc}") from None


def main(argv: list[str] | None = None) -> int:
    """`python -m llmb.train MANIFEST` prints the plan; `--train` builds and trains."""
    parser = argparse.ArgumentParser(prog="python -m llmb.train", description=main.__doc__)
    parser.add_argument("manifest", help="path of llmb_manifest.json")
    parser.add_argument("--train", action="store_true", help="build the NeMo recipe and train")
    args = parser.parse_args(argv)
    try:
        manifest = load_manifest(args.manifest)
        if not args.train:
            print(json.dumps(plan(manifest), indent=2, sort_keys=True))
            return 0
    except ManifestError as exc:
        print(f"llmb: {exc}", file=sys.stderr)
        return 2
    return run(manifest)


if __name__ == "__main__":
    sys.exit(main())
