"""In-container half of a pretrain entrypoint: run manifest -> NeMo 2 recipe -> training.

The login node and the container run different nemo-run versions (0.11.1 and 0.4.0), so no
serialized nemo-run/fiddle config crosses between them. The launcher writes a plain JSON run
manifest, whose `nemo` block is the row's NeMo job from metadata.yaml (llmb.recipes.nemojob); this
module turns it into the NeMo recipe itself, in two steps:

- `plan(manifest)`: every override as plain data (no NeMo needed; unit-tested in the normal suite).
- llmb.container.nemorecipe `build_recipe(plan)`: the `nemo.collections.llm` pre-train recipe with
the
  plan applied, not yet run (checked by `make test-nemo` against NeMo 2.3.1); `build(manifest)`
  here does both.

`run(manifest)` builds and trains in this process (one process per GPU, started by srun or
torchrun; Lightning takes the ranks from SLURM_* / torchrun variables); `print_config` prints
the recipe as nemo-run YAML and trains nothing. NeMo, nemo_run and fiddle are imported only by
llmb.container.nemorecipe, and only when a recipe is built.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypedDict

from llmb import manifest as run_manifest
from llmb.container import nemolog
from llmb.manifest import Manifest, ManifestError, Options
from llmb.recipes import nemojob

# Per model family, the FLOPs formula name FLOPsMeasurementCallback knows (None: it has none;
# NeMo 2.3.1 would silently match "nemotronh" to the dense Nemotron-4 formula and log a wrong
# TFLOPS_per_GPU, which seed 000 calls invalid, so Nemotron-H logs no TFLOPS_per_GPU and the
# analyzer computes it from the catalog's model FLOPs).
FLOPS_MODEL_NAMES: dict[str, str | None] = {"llama": "llama3", "nemotron4": "nemotron",
                                            "nemotronh": None}

# Ranks nsys profiles: the first eight (one H100/B200 node). The seeds say "MPI Ranks: 0-8";
# read as Python's range(0, 8), which is one whole node, not eight ranks plus a lone rank of
# the second node.
NSYS_RANKS = 8
# GarbageCollectionCallback interval (steps) of NeMo's performance-mode recipes: Python's GC
# runs only every 100 steps, i.e. not during a 50-step benchmark.
GC_INTERVAL = 100
# FP8 (as the published jobs run it: bf16 with fp8 mixed, per-tensor delayed scaling): NeMo's
# bf16_with_fp8_mixed() defaults, spelled out so a change in NeMo shows up in make test-nemo.
FP8 = {"fp8": "hybrid", "fp8_recipe": "delayed", "fp8_margin": 0, "fp8_amax_history_len": 1024,
       "fp8_amax_compute_algo": "max", "fp8_param_gather": True}

class Layout(TypedDict):
    """The manifest's parallelism and batch sizes, checked against its GPU count."""

    tp: int
    pp: int
    cp: int
    vp: int | None  # None: no virtual pipeline (the manifest's null or 1)
    ep: int
    mbs: int
    gbs: int
    dp: int
    num_gpus: int
    num_layers: int


class Nsys(TypedDict):
    start_step: int
    end_step: int
    ranks: list[int]
    gen_shape: bool
    gpu_metrics: bool


class Data(TypedDict):
    seq_length: int
    micro_batch_size: int
    global_batch_size: int
    num_train_samples: int
    tokenizer: dict[str, object]  # the row's tokenizer (llmb.recipes.nemojob)


class Checkpoint(TypedDict):
    save: bool
    dir: str | None
    every_n_train_steps: int | None
    save_top_k: int | None
    load_path: str | None


class Restore(TypedDict):
    path: str
    load_model_state: bool
    load_optim_state: bool
    load_artifacts: bool


class Resume(TypedDict):
    resume_if_exists: bool
    restore: Restore | None


class Plan(TypedDict):
    """What `plan` gives and llmb.container.nemorecipe applies: the flat sections are a NeMo
    config's attributes by name (trainer, strategy, ddp, the precision plugin's, the model
    config's, the data module's, the optimizer config's, the log's)."""

    nemo_recipe: str
    recipe_args: dict[str, object]
    trainer: dict[str, object]
    strategy: dict[str, object]
    ddp: dict[str, object]
    precision: dict[str, object]
    model: dict[str, object]
    data: Data
    optim: dict[str, object]
    comm_overlap: dict[str, object] | None
    callbacks: list[str]
    flops_model_name: str | None
    gc: dict[str, int] | None
    nsys: Nsys | None
    nccl_trace: bool
    log: dict[str, object]
    checkpoint: Checkpoint
    resume: Resume


def _positive(name: str, value: int | None) -> int:
    if value is None or value < 1:  # None: a Megatron-Bridge run's layout, not NeMo's
        raise ManifestError(f"manifest {name}={value!r} is not a positive integer")
    return value


def nemo_log_dir(manifest: Manifest) -> str | None:
    """Where NeMo writes its logs and checkpoints: <job dir>/code/nemo_experiments.

    That is NeMo's default (nemo_experiments/ in the working directory) for a job whose working
    directory is nemo-run's <job dir>/code, made explicit so it does not depend on the working
    directory. The manifest's job_dir is <run dir>/<exp>. None without a job_dir: NeMo's
    default under the working directory.
    """
    job_dir = manifest["job_dir"]
    return str(Path(job_dir) / nemolog.NEMO_EXPERIMENTS_DIR) if job_dir else None


def _supported(m: Manifest) -> None:
    """The manifest's family and dtype, when this module plans for them."""
    if m["family"] not in FLOPS_MODEL_NAMES:
        raise ManifestError(f"manifest family={m['family']!r} is not supported; "
                            f"supported: {', '.join(FLOPS_MODEL_NAMES)}")
    if m["dtype"] not in nemojob.DTYPES:
        raise ManifestError(f"manifest dtype={m['dtype']!r} is not supported; allowed: "
                            f"{', '.join(nemojob.DTYPES)}")


def _layout(m: Manifest) -> Layout:
    """The manifest's parallelism and batch sizes, checked against its GPU count."""
    par = m["parallelism"]
    tp, pp, cp = (_positive(f"parallelism.{k}", par[k]) for k in ("tp", "pp", "cp"))
    mbs, gbs, dp = (_positive(f"parallelism.{k}", par[k]) for k in ("mbs", "gbs", "dp"))
    vp = par["vp"] if par["vp"] not in (None, 1) else None
    if vp is not None:
        _positive("parallelism.vp", vp)
    num_gpus = _positive("num_gpus", m["num_gpus"])
    if tp * pp * cp * dp != num_gpus:
        raise ManifestError(f"manifest parallelism: TP x PP x CP x DP = {tp * pp * cp * dp} "
                            f"is not num_gpus={num_gpus}")
    if gbs % (mbs * dp):
        raise ManifestError(f"manifest parallelism.gbs={gbs} is not divisible by MBS x DP "
                            f"= {mbs * dp}")
    return {"tp": tp, "pp": pp, "cp": cp, "vp": vp, "ep": par["ep"] or 1, "mbs": mbs,
            "gbs": gbs, "dp": dp, "num_gpus": num_gpus,
            "num_layers": _positive("parallelism.num_layers", par["num_layers"])}


def _settings(m: Manifest, checkpoint_load: bool) -> dict[str, Any]:
    """The row's NeMo job (manifest `nemo`) for this run: Run:ai / checkpoint-load variants."""
    try:
        nemojob.check(m["nemo"], complete=True)
        settings = nemojob.for_run(m["nemo"], m["cluster_type"] or "slurm", checkpoint_load)
        nemojob.check(settings, complete=True)
    except nemojob.SettingsError as err:
        raise ManifestError(f"manifest nemo: {err}") from None
    return settings


def _nsys(opt: Options, num_gpus: int) -> Nsys | None:
    if not opt["profile"]:
        return None
    start, stop = opt["profile_start_step"], opt["profile_stop_step"]
    if start < 0 or stop < start:
        raise ManifestError(f"manifest options.profile_start_step={start!r} and "
                            f"profile_stop_step={stop!r} are not steps 0 <= start <= stop")
    return {"start_step": start, "end_step": stop,
            "ranks": list(range(min(NSYS_RANKS, num_gpus))), "gen_shape": False,
            "gpu_metrics": bool(opt["gpu_metrics"])}


def _comm_overlap(settings: Mapping[str, Any], lay: Layout,
                  checkpointing: bool) -> dict[str, object]:
    """MegatronCommOverlapCallback's arguments (the row's extras win over NeMo's recipe)."""
    extras = dict(settings["comm_overlap"])
    tp_overlap = lay["tp"] > 1  # with sequence parallelism, which TP > 1 always turns on
    layout = extras.pop("userbuffers", None)
    return {
        "tp_comm_overlap": tp_overlap,
        # A userbuffer layout is tuned for one TP size; without TP overlap it has no use.
        "tp_comm_overlap_cfg": layout if tp_overlap else None,
        # Overlapping the parameter all-gather with the optimizer step needs DP, PP and VP
        # (NeMo's performance scripts); it breaks checkpointing, so not with save/load.
        "overlap_param_gather_with_optimizer_step":
            lay["dp"] > 1 and lay["pp"] > 1 and lay["vp"] is not None and not checkpointing,
        **extras,
    }


def plan(manifest: Manifest) -> Plan:
    """Every setting the in-container half applies to the NeMo recipe, as plain JSON data.
    The manifest's fields have their types (llmb.manifest checked them as it read it); here
    their values are checked: supported, positive, a layout that adds up."""
    m, opt = manifest, manifest["options"]
    _supported(m)
    lay = _layout(m)
    max_steps = _positive("options.max_steps", opt["max_steps"])
    seq_length = _positive("seq_length", m["seq_length"])
    save = bool(opt["checkpoint_save"])
    load_path = opt["checkpoint_load_path"] or None
    settings = _settings(m, load_path is not None)
    performance = settings["performance_mode"]
    cuda_graphs = settings["cuda_graphs"]
    flops_model_name = FLOPS_MODEL_NAMES[m["family"]]
    log_dir = nemo_log_dir(m)
    nsys = _nsys(opt, lay["num_gpus"])
    return {
        "nemo_recipe": m["nemo_recipe"],
        "recipe_args": {"performance_mode": performance,
                        "num_nodes": _positive("nodes", m["nodes"]),
                        "num_gpus_per_node": _positive("gpus_per_node", m["gpus_per_node"])},
        "trainer": _trainer(m, max_steps, save),
        "strategy": _strategy(lay, cuda_graphs),
        "ddp": {"grad_reduce_in_fp32": False},
        "precision": _precision(m["dtype"]),
        "model": {"num_layers": lay["num_layers"], "seq_length": seq_length,
                  "cross_entropy_fusion_impl": settings["cross_entropy_fusion_impl"],
                  "enable_cuda_graph": cuda_graphs},
        "data": _data(lay, seq_length, max_steps, settings["tokenizer"]),
        "optim": {"use_precision_aware_optimizer": settings["precision_aware_optimizer"]},
        "comm_overlap": (_comm_overlap(settings, lay, save or load_path is not None)
                         if performance else None),
        "callbacks": _callbacks(performance, flops_model_name, nsys),
        "flops_model_name": flops_model_name,
        "gc": ({"gc_interval_train": GC_INTERVAL, "gc_interval_val": GC_INTERVAL}
               if performance else None),
        "nsys": nsys,
        # NCCL trace needs nothing in here: the launcher sets NCCL_DEBUG* and max_steps 5.
        "nccl_trace": bool(opt["nccl_trace"]),
        "log": {"log_dir": log_dir, "name": "default", "use_datetime_version": False,
                "tensorboard": None, "wandb": None},
        "checkpoint": _checkpoint(save, load_path, log_dir, max_steps),
        "resume": _resume(load_path),
    }


def _trainer(m: Manifest, max_steps: int, save: bool) -> dict[str, object]:
    return {
        "num_nodes": m["nodes"], "devices": m["gpus_per_node"], "max_steps": max_steps,
        # Validation off: never reached, no batches, no sanity check.
        "val_check_interval": max_steps, "limit_val_batches": 0, "limit_test_batches": 0,
        "num_sanity_val_steps": 0,
        "log_every_n_steps": 1,
        "enable_checkpointing": save,
        # No TensorBoard: it costs step time and nobody reads it here.
        "logger": False,
    }


def _strategy(lay: Layout, cuda_graphs: bool) -> dict[str, object]:
    return {
        "tensor_model_parallel_size": lay["tp"], "pipeline_model_parallel_size": lay["pp"],
        "context_parallel_size": lay["cp"],
        "virtual_pipeline_model_parallel_size": lay["vp"],
        "expert_model_parallel_size": lay["ep"], "sequence_parallel": lay["tp"] > 1,
        "pipeline_dtype": "bfloat16" if lay["pp"] > 1 else None,
        # CUDA graphs need Transformer Engine's RNG tracker (NeMo's performance scripts).
        "use_te_rng_tracker": cuda_graphs,
    }


def _data(lay: Layout, seq_length: int, max_steps: int, tokenizer: Mapping[str, object]) -> Data:
    return {"seq_length": seq_length, "micro_batch_size": lay["mbs"],
            "global_batch_size": lay["gbs"],
            # Exactly one epoch of synthetic samples for the whole run.
            "num_train_samples": max_steps * lay["gbs"],
            "tokenizer": dict(tokenizer)}


def _callbacks(performance: bool, flops_model_name: str | None, nsys: object) -> list[str]:
    """The recipe's own callbacks (performance mode adds garbage collection and communication
    overlap), then TFLOPS logging where NeMo has the model's formula, then nsys."""
    callbacks = ["TimingCallback"]
    if performance:
        callbacks += ["GarbageCollectionCallback", "MegatronCommOverlapCallback"]
    if flops_model_name:
        callbacks.append("FLOPsMeasurementCallback")
    if nsys:
        callbacks.append("NsysCallback")
    return callbacks


def _precision(dtype: str) -> dict[str, object]:
    if dtype == "fp8":
        return {"plugin": "bf16_with_fp8_mixed", **FP8, "grad_reduce_in_fp32": False}
    return {"plugin": "bf16_mixed", "grad_reduce_in_fp32": False}


def _checkpoint(save: bool, load_path: str | None, log_dir: str | None,
                max_steps: int) -> Checkpoint:
    return {
        "save": save,
        "dir": str(Path(log_dir) / "default" / "checkpoints") if save and log_dir else None,
        # One checkpoint, at the last step, with the optimizer state (what a restart needs).
        "every_n_train_steps": max_steps if save else None,
        "save_top_k": 1 if save else None,
        "load_path": load_path,
    }


def _resume(load_path: str | None) -> Resume:
    """Loading restores weights and optimizer state into a fresh trainer (global step 0), so
    max_steps (1 for a load run) counts steps after the load. Never auto-resume."""
    return {"resume_if_exists": False,
            "restore": {"path": load_path, "load_model_state": True,
                        "load_optim_state": True, "load_artifacts": False}
            if load_path else None}


# What building a recipe imports; without them this is not the benchmark image.
NEMO_MODULES = ("nemo", "nemo_run", "fiddle", "torch", "megatron", "lightning")


def build(manifest: Manifest):  # -> nemo_run.Partial
    """The NeMo recipe of a manifest (imports NeMo; the plan is checked before)."""
    p = plan(manifest)
    from llmb.container import nemorecipe

    try:
        return nemorecipe.build_recipe(p)
    except nemorecipe.UnknownName as err:
        raise ManifestError(f"manifest: {err}") from None
    except ImportError as err:  # a missing module, or a folder named like one (no NeMo)
        if (err.name or "").split(".")[0] not in NEMO_MODULES:
            raise
        raise ManifestError(f"building the NeMo recipe needs NeMo, and {err.name} is missing "
                            "here: run it inside the benchmark image (srun --container-image=..., "
                            "see the recipe README's Fidelity section)") from None


def run(manifest: Manifest) -> int:
    """Build the recipe and train in this process; the exit code for the entrypoint."""
    try:
        recipe = build(manifest)
    except ManifestError as exc:
        print(f"llmb: {exc}", file=sys.stderr)
        return 2
    import fiddle as fdl

    # What nemo_run.run(recipe, direct=True) does: build the configured pretrain() and call it.
    fdl.build(recipe)()
    return 0


def print_config(manifest: Manifest) -> int:
    """Print the recipe `run` would train, as nemo-run YAML; train nothing, need no GPU."""
    try:
        recipe = build(manifest)
    except ManifestError as exc:
        print(f"llmb: {exc}", file=sys.stderr)
        return 2
    from llmb.container import nemorecipe

    sys.stdout.write(nemorecipe.config_yaml(recipe))
    return 0


def main(argv: list[str] | None = None) -> int:
    """`python -m llmb.container.train MANIFEST` prints the plan; `--print-config` the NeMo recipe;
    `--train` builds and trains."""
    parser = argparse.ArgumentParser(prog="python -m llmb.container.train",
                                     description=main.__doc__)
    parser.add_argument("manifest", help="path of llmb_manifest.json")
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--train", action="store_true", help="build the NeMo recipe and train")
    what.add_argument("--print-config", action="store_true",
                      help="print the NeMo recipe as nemo-run YAML, train nothing")
    args = parser.parse_args(argv)
    try:
        manifest = run_manifest.read(args.manifest)
        if not (args.train or args.print_config):
            print(json.dumps(plan(manifest), indent=2, sort_keys=True))
            return 0
    except ManifestError as exc:
        print(f"llmb: {exc}", file=sys.stderr)
        return 2
    return print_config(manifest) if args.print_config else run(manifest)


if __name__ == "__main__":
    sys.exit(main())
