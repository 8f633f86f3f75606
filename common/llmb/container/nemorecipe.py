"""The NeMo 2 pre-train recipe of a plan (llmb.container.train.plan), and its nemo-run YAML.

Runs in the container (nemo-toolkit 2.3.1, nemo-run 0.4.0) or in `make test-nemo`'s venv, never
on the login node: every NeMo, nemo_run, fiddle and torch import is inside a function.

- `build_recipe(plan)`: `nemo.collections.llm.<recipe>.pretrain_recipe(...)` with every setting
  of the plan applied, not yet run.
- `config_yaml(recipe)`: the recipe as nemo-run YAML, what `train --print-config` prints and
  what tests/nemo/golden holds.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import ModuleType
from typing import TYPE_CHECKING, Any

from llmb.shared.errors import LlmbError

if TYPE_CHECKING:
    from llmb.container.train import Plan


class UnknownName(LlmbError):
    """A recipe or userbuffer layout this NeMo does not have (one line for people)."""


def _lookup(module: ModuleType, name: str, what: str) -> Any:  # a NeMo name: untyped
    found = getattr(module, name, None) if not name.startswith("_") else None
    if found is None:
        raise UnknownName(f"{what} {name!r} is not in {module.__name__} of this NeMo")
    return found


def _tokenizer_config(tok: Mapping[str, object]):  # -> run.Config
    import nemo_run as run

    if tok["library"] == "huggingface":
        from nemo.collections.common.tokenizers.huggingface import AutoTokenizer

        return run.Config(AutoTokenizer, pretrained_model_name=tok["model_name"], use_fast=True)
    from nemo.collections.nlp.modules.common.tokenizer_utils import get_nmt_tokenizer

    return run.Config(get_nmt_tokenizer, library=tok["library"], model_name=tok["model_name"],
                      vocab_size=tok["vocab_size"])


def _userbuffers_config(name: str):  # -> run.Config
    """NeMo's userbuffer layout `name`; the layouts are dataclass instances, and as fiddle
    configs they serialize."""
    import fiddle as fdl
    import fiddle._src.experimental.dataclasses as fdl_dc
    import nemo_run as run
    from nemo.collections.llm.recipes.tp_overlap_configs import userbuffers

    layout = _lookup(userbuffers, name, "userbuffer layout")
    return fdl.cast(run.Config, fdl_dc.convert_dataclasses_to_configs(layout))


def _find(callbacks: list[object], cls: type) -> list[int]:
    return [i for i, c in enumerate(callbacks) if getattr(c, "__fn_or_cls__", None) is cls]


def _apply(target: object, values: Mapping[str, object]) -> None:
    for key, value in values.items():
        setattr(target, key, value)


def _callbacks(existing: list[object], model_config: object, data_config: object,
               p: Plan) -> list[object]:
    """Exactly the callbacks the plan names, in its order; the recipe's own configs (its
    trainer's callbacks) reused.

    ModelCheckpoint only ever through the logger (Nemotron-H's recipe puts one on the trainer).
    """
    import nemo_run as run
    from nemo.lightning.pytorch.callbacks import GarbageCollectionCallback, NsysCallback
    from nemo.lightning.pytorch.callbacks.flops_callback import FLOPsMeasurementCallback
    from nemo.lightning.pytorch.callbacks.megatron_comm_overlap import MegatronCommOverlapCallback
    from nemo.utils.exp_manager import TimingCallback

    def reuse(cls: type, **defaults: object) -> object:
        found = _find(existing, cls)
        return existing[found[0]] if found else run.Config(cls, **defaults)

    def comm_overlap() -> object:
        comm = reuse(MegatronCommOverlapCallback)
        for key, value in (p["comm_overlap"] or {}).items():
            if key == "tp_comm_overlap_cfg":
                value = _userbuffers_config(str(value)) if value else None
            setattr(comm, key, value)
        return comm

    def nsys() -> object:
        n = p["nsys"]
        if n is None:
            raise ValueError("the plan names NsysCallback without its nsys settings")
        return run.Config(NsysCallback, start_step=n["start_step"], end_step=n["end_step"],
                          ranks=list(n["ranks"]), gen_shape=n["gen_shape"])

    built = {
        "TimingCallback": lambda: reuse(TimingCallback),
        "GarbageCollectionCallback": lambda: _configured(reuse(GarbageCollectionCallback),
                                                         p["gc"] or {}),
        "MegatronCommOverlapCallback": comm_overlap,
        "FLOPsMeasurementCallback": lambda: run.Config(
            FLOPsMeasurementCallback, model_config=model_config, data_config=data_config,
            model_name=p["flops_model_name"]),
        "NsysCallback": nsys,
    }
    return [built[name]() for name in p["callbacks"]]


def _configured(config: object, values: Mapping[str, object]) -> object:
    _apply(config, values)
    return config


def build_recipe(p: Plan):  # -> nemo_run.Partial
    """The NeMo 2 pre-train recipe with every setting of the plan `p` applied."""
    import nemo_run as run
    import torch
    from nemo import lightning as nl
    from nemo.collections import llm
    from nemo.collections.llm.recipes.precision import mixed_precision
    from nemo.lightning.pytorch.strategies.utils import RestoreConfig

    recipe = _lookup(llm, p["nemo_recipe"], "recipe").pretrain_recipe(**p["recipe_args"])
    trainer, strategy = recipe.trainer, recipe.trainer.strategy

    _apply(trainer, p["trainer"])
    for key, value in p["strategy"].items():
        if key == "pipeline_dtype":
            value = getattr(torch, str(value)) if value else strategy.pipeline_dtype
        setattr(strategy, key, value)
    _apply(strategy.ddp, p["ddp"])

    prec = dict(p["precision"])
    plugin = getattr(mixed_precision, str(prec.pop("plugin")))()
    _apply(plugin, prec)
    trainer.plugins = plugin

    _apply(recipe.model.config, p["model"])
    recipe.data.tokenizer = _tokenizer_config(p["data"]["tokenizer"])
    recipe.model.tokenizer = recipe.data.tokenizer
    _apply(recipe.data, {k: v for k, v in p["data"].items() if k != "tokenizer"})
    _apply(recipe.optim.config, p["optim"])
    trainer.callbacks = _callbacks(list(trainer.callbacks or []), recipe.model.config,
                                   recipe.data, p)

    log = p["log"]
    _apply(recipe.log, {k: log[k] for k in ("log_dir", "name", "use_datetime_version",
                                            "tensorboard", "wandb")})
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
    restore = run.Config(RestoreConfig, **res["restore"]) if res["restore"] else None
    recipe.resume = run.Config(nl.AutoResume, resume_if_exists=res["resume_if_exists"],
                               resume_ignore_no_checkpoint=True, restore_config=restore)
    return recipe


def config_yaml(recipe: object) -> str:
    """The recipe as nemo-run YAML (the container's nemo-run serializer)."""
    from nemo_run.core.serialization.yaml import YamlSerializer

    return YamlSerializer().serialize(recipe)
