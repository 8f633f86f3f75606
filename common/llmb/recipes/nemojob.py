"""The NeMo job of a published row, as data: which recipe settings reproduce the upstream run.

A recipe's metadata.yaml holds these settings under `nemo:` at three levels, merged in order:
the recipe (top level), a size (`sizes.<size>.nemo`) and a `configs` entry (`configs[i].nemo`,
one GPU type / scaling group). The README's "Fidelity" section says where each value comes
from. Keys (every one is applied by llmb.container.train to the NeMo recipe):

    performance_mode            pretrain_recipe(performance_mode=...): the recipe's own extras
                                (garbage-collection and communication-overlap callbacks)
    cuda_graphs                 model.enable_cuda_graph and strategy.use_te_rng_tracker
    cross_entropy_fusion_impl   model.cross_entropy_fusion_impl (te | native)
    precision_aware_optimizer   optim.config.use_precision_aware_optimizer
    tokenizer                   {library: huggingface, model_name} or
                                {library: "null", model_name: NullTokenizer, vocab_size}
    comm_overlap                MegatronCommOverlapCallback arguments (performance mode only):
                                userbuffers (a layout of NeMo's tp_overlap_configs.userbuffers),
                                defer_embedding_wgrad_compute, wgrad_deferral_limit,
                                align_param_gather, tp_comm_bootstrap_backend; a key not given
                                keeps the NeMo recipe's own value
    checkpoint_load, runai      settings that change when the run loads a checkpoint / runs on
                                Run:ai (any of the keys above)

`precision_aware_optimizer` and `comm_overlap.userbuffers` may be given per dtype:
`{bf16: ..., fp8: ...}`. Standard library only: the container imports this module.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeGuard

from llmb.shared.errors import LlmbError

DTYPES = ("bf16", "fp8")
CONDITIONS = ("checkpoint_load", "runai")
REQUIRED = ("performance_mode", "cuda_graphs", "cross_entropy_fusion_impl",
            "precision_aware_optimizer", "tokenizer")
CROSS_ENTROPY_IMPLS = ("te", "native")
BOOTSTRAP_BACKENDS = ("nccl", "mpi", "gloo")
TOKENIZER_KEYS = {"huggingface": ("library", "model_name"),
                  "null": ("library", "model_name", "vocab_size")}
# A Hugging Face repository id (org/name) or a NeMo tokenizer name.
TOKENIZER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*(/[A-Za-z0-9][A-Za-z0-9_.-]*)?")
# A layout of nemo.collections.llm.recipes.tp_overlap_configs.userbuffers.
LAYOUT_NAME = re.compile(r"userbuffers_[a-z0-9_]+")
MAX_INT = 10_000_000  # beyond any step count, deferral limit or vocabulary


class SettingsError(LlmbError):
    """A `nemo:` block that is wrong; the message names the key and what is allowed."""


def _bool(key: str, value: object) -> None:
    if not isinstance(value, bool):
        raise SettingsError(f"{key}={value!r} is not true or false")


def _positive_int(key: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_INT:
        raise SettingsError(f"{key}={value!r} is not an integer from 1 to {MAX_INT}")


def _choice(allowed: Sequence[str]):
    def check(key: str, value: object) -> None:
        if value not in allowed:
            raise SettingsError(f"{key}={value!r} is not one of {', '.join(allowed)}")
    return check


def _layout(key: str, value: object) -> None:
    if value is not None and (not isinstance(value, str) or not LAYOUT_NAME.fullmatch(value)):
        raise SettingsError(f"{key}={value!r} is not a userbuffers_* layout name (or null)")


def _tokenizer(key: str, value: object) -> None:
    if not isinstance(value, Mapping) or value.get("library") not in TOKENIZER_KEYS:
        raise SettingsError(f"{key} must be a mapping whose library is one of "
                            f"{', '.join(TOKENIZER_KEYS)} (quote \"null\" in YAML)")
    expected = TOKENIZER_KEYS[value["library"]]
    if set(value) != set(expected):
        raise SettingsError(f"{key} with library {value['library']} needs exactly the keys "
                            f"{', '.join(expected)}")
    name = value["model_name"]
    if not isinstance(name, str) or not TOKENIZER_NAME.fullmatch(name):
        raise SettingsError(f"{key}.model_name={name!r} is not a tokenizer name or a Hugging "
                            "Face repository id (org/name)")
    if "vocab_size" in value:
        _positive_int(f"{key}.vocab_size", value["vocab_size"])


COMM_OVERLAP = {
    "userbuffers": _layout,
    "defer_embedding_wgrad_compute": _bool,
    "wgrad_deferral_limit": _positive_int,
    "align_param_gather": _bool,
    "tp_comm_bootstrap_backend": _choice(BOOTSTRAP_BACKENDS),
}


def _comm_overlap(key: str, value: object) -> None:
    _mapping_of(key, value, COMM_OVERLAP)


SETTINGS = {
    "performance_mode": _bool,
    "cuda_graphs": _bool,
    "cross_entropy_fusion_impl": _choice(CROSS_ENTROPY_IMPLS),
    "precision_aware_optimizer": _bool,
    "tokenizer": _tokenizer,
    "comm_overlap": _comm_overlap,
}
# Keys whose value may be given per dtype, {bf16: ..., fp8: ...}.
BY_DTYPE = {"precision_aware_optimizer", "comm_overlap.userbuffers"}
# Mapping-valued keys that later levels update rather than replace.
MERGED = {"comm_overlap", *CONDITIONS}


Check = Callable[[str, object], None]  # one setting's check: its key and value


def _is_by_dtype(value: object) -> TypeGuard[Mapping[str, object]]:
    return isinstance(value, Mapping) and bool(value) and set(value) <= set(DTYPES)


def _mapping_of(where: str, block: object, checks: Mapping[str, Check], prefix: str = "") -> None:
    if not isinstance(block, Mapping):
        raise SettingsError(f"{where or 'nemo'} must be a mapping")
    for key, value in block.items():
        path = f"{prefix}{key}"
        check = checks.get(key)
        if check is None:
            raise SettingsError(f"unknown key {path!r}; allowed: {', '.join(checks)}")
        if path in BY_DTYPE and _is_by_dtype(value):
            for dtype, one in value.items():
                check(f"{path}.{dtype}", one)
        elif path == "comm_overlap":
            _mapping_of(path, value, COMM_OVERLAP, "comm_overlap.")
        else:
            check(path, value)


def check(block: object, complete: bool = False) -> None:
    """Validate one `nemo:` block (complete=True: a merged, resolved row, every key present)."""
    if not isinstance(block, Mapping):
        raise SettingsError("must be a mapping")
    for condition in CONDITIONS:
        if condition in block:
            _mapping_of(condition, block[condition], SETTINGS)
    _mapping_of("", {k: v for k, v in block.items() if k not in CONDITIONS}, SETTINGS)
    if complete:
        missing = [k for k in REQUIRED if k not in block]
        if missing:
            raise SettingsError(f"no level sets {', '.join(missing)}")
        for path in BY_DTYPE:
            head, _, tail = path.partition(".")
            value = block.get(head, {}).get(tail) if tail else block.get(head)
            if _is_by_dtype(value):
                raise SettingsError(f"{path} is still given per dtype")


def _merge(base: Mapping[str, object], over: Mapping[str, object]) -> dict[str, object]:
    out = dict(base)
    for key, value in over.items():
        here = out.get(key)
        if key in MERGED and isinstance(value, Mapping) and isinstance(here, Mapping):
            out[key] = _merge(here, value)
        else:
            out[key] = value
    return out


def _pick(value: object, dtype: str, path: str) -> object:
    if not _is_by_dtype(value):
        return value
    if dtype not in value:
        raise SettingsError(f"{path} gives no value for {dtype}")
    return value[dtype]


def _for_dtype(block: object, dtype: str) -> dict[str, object]:
    out: dict[str, object] = dict(block) if isinstance(block, Mapping) else {}
    if "precision_aware_optimizer" in out:
        out["precision_aware_optimizer"] = _pick(out["precision_aware_optimizer"], dtype,
                                                 "precision_aware_optimizer")
    comm = out.get("comm_overlap")
    if isinstance(comm, Mapping) and "userbuffers" in comm:
        out["comm_overlap"] = {**comm, "userbuffers": _pick(comm["userbuffers"], dtype,
                                                            "comm_overlap.userbuffers")}
    return out


def resolve(layers: Sequence[Mapping[str, Any]], dtype: str) -> dict[str, Any]:
    """Merge the levels (recipe, size, configs entry) and pick the per-dtype values."""
    merged: dict[str, object] = {"comm_overlap": {}, **{c: {} for c in CONDITIONS}}
    for layer in layers:
        merged = _merge(merged, layer)
    merged = _for_dtype(merged, dtype)
    for condition in CONDITIONS:
        merged[condition] = _for_dtype(merged[condition], dtype)
    order = [*REQUIRED, "comm_overlap", *CONDITIONS]  # a stable order for the manifest
    return {**{k: merged[k] for k in order if k in merged},
            **{k: v for k, v in merged.items() if k not in order}}


def for_run(settings: Mapping[str, Any], cluster_type: str,
            checkpoint_load: bool) -> dict[str, Any]:
    """A row's settings for one run: its `runai` / `checkpoint_load` blocks applied."""
    out = {k: v for k, v in settings.items() if k not in CONDITIONS}
    if cluster_type == "runai":
        out = _merge(out, settings.get("runai") or {})
    if checkpoint_load:
        out = _merge(out, settings.get("checkpoint_load") or {})
    return out
