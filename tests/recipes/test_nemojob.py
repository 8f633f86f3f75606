"""llmb.recipes.nemojob: a `nemo:` block checked key by key (one line naming the key, the value
and what is allowed), the three levels merged and the per-dtype values picked, and a run's
`runai` / `checkpoint_load` blocks applied. tests/recipes/test_metadata_schema.py checks the
same rules through metadata.yaml files; this file checks the module's own contract."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from llmb.recipes import nemojob
from llmb.recipes.nemojob import SettingsError

NULL_TOKENIZER = {"library": "null", "model_name": "NullTokenizer", "vocab_size": 256000}
HF_TOKENIZER = {"library": "huggingface", "model_name": "meta-llama/Meta-Llama-3-70B"}
UB_BF16 = "userbuffers_bf16_b200_h18432_tp8_mbs1_seqlen4096"
UB_FP8 = "userbuffers_fp8_b200_h18432_tp8_mbs1_seqlen4096"

# A recipe-level block shaped like Nemotron-4's metadata.yaml.
RECIPE = {
    "performance_mode": True,
    "cuda_graphs": False,
    "cross_entropy_fusion_impl": "te",
    "precision_aware_optimizer": {"bf16": True, "fp8": False},
    "tokenizer": NULL_TOKENIZER,
    "checkpoint_load": {"precision_aware_optimizer": False},
    "runai": {"comm_overlap": {"tp_comm_bootstrap_backend": "nccl"}},
}
SIZE = {"comm_overlap": {"defer_embedding_wgrad_compute": True, "wgrad_deferral_limit": 22}}
CONFIG = {"cuda_graphs": True,
          "comm_overlap": {"userbuffers": {"bf16": UB_BF16, "fp8": UB_FP8},
                           "align_param_gather": True}}


def with_(key: str, value: Any) -> dict[str, Any]:
    """RECIPE with `key` (dotted: comm_overlap.userbuffers) set to value."""
    block = copy.deepcopy(RECIPE)
    head, _, tail = key.partition(".")
    if tail:
        block.setdefault(head, {})[tail] = value
    else:
        block[head] = value
    return block


@pytest.mark.parametrize(("block", "message"), [
    ([], "must be a mapping"),
    (with_("performance_mode", 1), "performance_mode=1 is not true or false"),
    (with_("cross_entropy_fusion_impl", "apex"),
     "cross_entropy_fusion_impl='apex' is not one of te, native"),
    (with_("tokenizer", {**HF_TOKENIZER, "vocab_size": 128256}),
     "tokenizer with library huggingface needs exactly the keys library, model_name"),
    (with_("tokenizer", {"library": "null", "model_name": "NullTokenizer"}),
     "tokenizer with library null needs exactly the keys library, model_name, vocab_size"),
    (with_("tokenizer", {"library": "sentencepiece", "model_name": "x"}),
     'tokenizer must be a mapping whose library is one of huggingface, null (quote "null" in '
     "YAML)"),
    (with_("tokenizer", {"library": "huggingface", "model_name": "../../etc/passwd"}),
     "tokenizer.model_name='../../etc/passwd' is not a tokenizer name or a Hugging Face "
     "repository id (org/name)"),
    (with_("tokenizer", {**NULL_TOKENIZER, "vocab_size": True}),
     "tokenizer.vocab_size=True is not an integer from 1 to 10000000"),
    (with_("tokenizer", {**NULL_TOKENIZER, "vocab_size": 10_000_001}),
     "tokenizer.vocab_size=10000001 is not an integer from 1 to 10000000"),
    (with_("comm_overlap", ["userbuffers"]), "comm_overlap must be a mapping"),
    (with_("comm_overlap.overlap", True),
     "unknown key 'comm_overlap.overlap'; allowed: userbuffers, defer_embedding_wgrad_compute, "
     "wgrad_deferral_limit, align_param_gather, tp_comm_bootstrap_backend"),
    (with_("comm_overlap.wgrad_deferral_limit", 22.0),
     "comm_overlap.wgrad_deferral_limit=22.0 is not an integer from 1 to 10000000"),
    (with_("comm_overlap.userbuffers", {"bf16": UB_BF16, "fp8": "ub_fp8"}),
     "comm_overlap.userbuffers.fp8='ub_fp8' is not a userbuffers_* layout name (or null)"),
    (with_("precision_aware_optimizer", {"bf16": "yes", "fp8": False}),
     "precision_aware_optimizer.bf16='yes' is not true or false"),
    # only bf16/fp8 keys make a per-dtype value; anything else is the value itself
    (with_("precision_aware_optimizer", {"fp16": True}),
     "precision_aware_optimizer={'fp16': True} is not true or false"),
    # only the two keys in BY_DTYPE may be given per dtype
    (with_("cuda_graphs", {"bf16": True, "fp8": False}),
     "cuda_graphs={'bf16': True, 'fp8': False} is not true or false"),
    (with_("runai", "nccl"), "runai must be a mapping"),
    (with_("checkpoint_load", {"runai": {}}),
     "unknown key 'runai'; allowed: performance_mode, cuda_graphs"),
    (with_("runai", {"comm_overlap": {"tp_comm_bootstrap_backend": "tcp"}}),
     "comm_overlap.tp_comm_bootstrap_backend='tcp' is not one of nccl, mpi, gloo"),
])
def test_a_wrong_block_is_one_line(block: object, message: str) -> None:
    with pytest.raises(SettingsError) as err:
        nemojob.check(block)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("block", [
    RECIPE, SIZE, CONFIG, {},
    with_("comm_overlap.userbuffers", None),  # null: no userbuffer layout
    with_("comm_overlap.userbuffers", {"bf16": None, "fp8": UB_FP8}),
    with_("tokenizer", HF_TOKENIZER),
])
def test_a_partial_block_of_any_level_passes(block: dict[str, Any]) -> None:
    nemojob.check(block)


@pytest.mark.parametrize(("block", "message"), [
    (SIZE, "no level sets performance_mode, cuda_graphs, cross_entropy_fusion_impl, "
           "precision_aware_optimizer, tokenizer"),
    ({k: v for k, v in RECIPE.items() if k != "tokenizer"}, "no level sets tokenizer"),
    (RECIPE, "precision_aware_optimizer is still given per dtype"),
    ({**nemojob.resolve([RECIPE], "fp8"), **CONFIG},
     "comm_overlap.userbuffers is still given per dtype"),
])
def test_a_complete_row_sets_every_key_once(block: dict[str, Any], message: str) -> None:
    nemojob.check(block)  # fine as one level
    with pytest.raises(SettingsError, match=message):
        nemojob.check(block, complete=True)


def test_levels_merge_in_order_and_the_dtype_is_picked() -> None:
    layers = [copy.deepcopy(x) for x in (RECIPE, SIZE, CONFIG)]
    fp8 = nemojob.resolve(layers, "fp8")
    assert fp8 == {
        "performance_mode": True,
        "cuda_graphs": True,  # the configs entry over the recipe
        "cross_entropy_fusion_impl": "te",
        "precision_aware_optimizer": False,
        "tokenizer": NULL_TOKENIZER,
        # comm_overlap is merged key by key across the levels
        "comm_overlap": {"defer_embedding_wgrad_compute": True, "wgrad_deferral_limit": 22,
                         "userbuffers": UB_FP8, "align_param_gather": True},
        "checkpoint_load": {"precision_aware_optimizer": False},
        "runai": {"comm_overlap": {"tp_comm_bootstrap_backend": "nccl"}},
    }
    assert list(fp8) == [*nemojob.REQUIRED, "comm_overlap", *nemojob.CONDITIONS]
    bf16 = nemojob.resolve(layers, "bf16")
    assert (bf16["precision_aware_optimizer"], bf16["comm_overlap"]["userbuffers"]) == (
        True, UB_BF16)
    assert layers == [RECIPE, SIZE, CONFIG]  # the levels themselves are left alone
    nemojob.check(fp8, complete=True)
    nemojob.check(bf16, complete=True)


def test_a_later_tokenizer_replaces_the_earlier_one_whole() -> None:
    """Only comm_overlap and the condition blocks merge: a size's Hugging Face tokenizer must
    not inherit the recipe's vocab_size."""
    resolved = nemojob.resolve([RECIPE, {"tokenizer": HF_TOKENIZER}], "bf16")
    assert resolved["tokenizer"] == HF_TOKENIZER
    nemojob.check(resolved, complete=True)


def test_condition_blocks_merge_across_levels_and_pick_their_dtype() -> None:
    size = {"checkpoint_load": {"cuda_graphs": False,
                                "comm_overlap": {"userbuffers": {"bf16": None, "fp8": UB_FP8}}}}
    resolved = nemojob.resolve([RECIPE, size], "fp8")
    assert resolved["checkpoint_load"] == {"precision_aware_optimizer": False,
                                           "cuda_graphs": False,
                                           "comm_overlap": {"userbuffers": UB_FP8}}
    assert nemojob.resolve([RECIPE, size], "bf16")["checkpoint_load"]["comm_overlap"] == {
        "userbuffers": None}


def test_every_level_may_be_silent_on_the_optional_blocks() -> None:
    bare = {k: v for k, v in RECIPE.items() if k not in nemojob.CONDITIONS}
    resolved = nemojob.resolve([bare], "bf16")
    assert (resolved["comm_overlap"], resolved["checkpoint_load"], resolved["runai"]) == (
        {}, {}, {})


@pytest.mark.parametrize(("layers", "dtype", "message"), [
    ([with_("precision_aware_optimizer", {"bf16": True})], "fp8",
     "precision_aware_optimizer gives no value for fp8"),
    ([RECIPE, {"comm_overlap": {"userbuffers": {"fp8": UB_FP8}}}], "bf16",
     "comm_overlap.userbuffers gives no value for bf16"),
    ([RECIPE, {"checkpoint_load": {"precision_aware_optimizer": {"fp8": True}}}], "bf16",
     "precision_aware_optimizer gives no value for bf16"),
])
def test_a_dtype_without_a_value_is_named(layers: list[dict[str, Any]], dtype: str,
                                          message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        nemojob.resolve(layers, dtype)


@pytest.mark.parametrize(("cluster_type", "checkpoint_load", "changed"), [
    ("slurm", False, {}),
    ("local", False, {}),
    ("runai", False, {"comm_overlap": {"defer_embedding_wgrad_compute": True,
                                       "wgrad_deferral_limit": 22, "userbuffers": UB_BF16,
                                       "align_param_gather": True,
                                       "tp_comm_bootstrap_backend": "nccl"}}),
    ("slurm", True, {"precision_aware_optimizer": False}),
])
def test_a_run_applies_its_runai_and_checkpoint_load_blocks(
        cluster_type: str, checkpoint_load: bool, changed: dict[str, Any]) -> None:
    row = nemojob.resolve([RECIPE, SIZE, CONFIG], "bf16")
    settings = nemojob.for_run(row, cluster_type, checkpoint_load)
    plain = {k: v for k, v in row.items() if k not in nemojob.CONDITIONS}
    assert settings == {**plain, **changed}
    nemojob.check(settings, complete=True)


def test_checkpoint_load_is_applied_after_runai() -> None:
    row = nemojob.resolve([RECIPE, {
        "runai": {"cuda_graphs": True, "comm_overlap": {"align_param_gather": False}},
        "checkpoint_load": {"cuda_graphs": False}}], "fp8")
    both = nemojob.for_run(row, "runai", True)
    assert both["cuda_graphs"] is False  # the checkpoint_load block wins
    assert both["comm_overlap"] == {"tp_comm_bootstrap_backend": "nccl",
                                    "align_param_gather": False}
    assert not set(both) & set(nemojob.CONDITIONS)
