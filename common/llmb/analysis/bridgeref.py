"""A Megatron-Bridge run against NVIDIA's published Megatron-Bridge numbers.

A Megatron-Bridge recipe leaves its layout (parallelism, batch sizes) to Megatron-Bridge, so
what a run ran is read from its log (llmb.analysis.bridgelayout) and the published row it
reproduces is the one that agrees with it in model, GPU type and count, precision, GBS, MBS,
sequence length and parallelism (llmb.recipes.published.match). Without one the run has no
reference, and the nearest published row is named in its reference_source with the fields it
differs in. The model is the size's Megatron-Bridge recipe name (metadata.yaml
sizes.<size>.recipe_name); the precision the run's compute dtype (its manifest's, or its
name's), else the recipe's first FP8 recipe for the GPU type.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from llmb.analysis import bridgelayout
from llmb.recipes import published

if TYPE_CHECKING:
    from llmb.analysis.identify import Identity
    from llmb.recipes.catalog import Recipe

NO_LAYOUT = ("no published reference: the log states no Megatron-Bridge configuration summary "
             "(parallelism, batch sizes) to compare with the published rows")


def applies(recipe: object) -> bool:
    """A Megatron-Bridge recipe (its runs are judged here, not by the recipe's references)."""
    return getattr(recipe, "is_bridge", False) is True


def precision(recipe: Recipe, dtype: str, gpu_type: str) -> str:
    """The compute dtype of a run of `dtype`: as given where it names the FP8 recipe (fp8_mx),
    else the recipe's first FP8 recipe for the GPU type."""
    if dtype != "fp8":
        return dtype
    recipes = recipe.data["bridge"]["fp8_recipes"].get(gpu_type) or ["cs"]
    return f"fp8_{recipes[0]}"


def with_reference(ident: Identity, log: Path) -> tuple[Identity, str | None]:
    """The identity with the published reference the log's layout matches (its GBS taken
    from the log where the identity has none), and what to say where there is none."""
    from llmb.recipes.catalog import Recipe, Reference

    recipe, gpus = ident["recipe"], ident["num_gpus"]
    layout = bridgelayout.read(log)
    if layout is None or gpus is None or not isinstance(recipe, Recipe) \
            or ident["model_size"] not in recipe.sizes:
        return ident, NO_LAYOUT
    gbs, seq = ident["gbs"] or layout.gbs, layout.seq_len or ident["seq_length"]
    ident = {**ident, "gbs": gbs, "gbs_from": ident["gbs_from"] if ident["gbs"] else "log",
             "scaling": ident["scaling"] or "weak"}
    if gbs is None or layout.mbs is None or seq is None:
        return ident, NO_LAYOUT
    run = published.Run(model=str(recipe.size(ident["model_size"])["recipe_name"]),
                        gpu_type=ident["gpu_type"], gpus=gpus,
                        precision=precision(recipe, ident["dtype"], ident["gpu_type"]),
                        gbs=gbs, mbs=layout.mbs, seq_len=seq, tp=layout.tp, pp=layout.pp,
                        cp=layout.cp, vp=layout.vp, ep=layout.ep)
    found = published.match(run)
    if found.reference is None:
        return ident, found.describe()
    row = found.reference
    ref = Reference(step_time=published.step_time(row), source=row.where(),
                    image=f"nvcr.io/nvidia/nemo:{row.container}")
    return {**ident, "reference": ref}, None
