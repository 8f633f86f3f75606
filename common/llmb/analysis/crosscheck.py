"""What a run's identity says against what its log states, and the physical limits of a GPU.

A run is identified by its manifest or its experiment name (llmb.analysis.identify); its log
states facts of its own. Where they disagree, per field:

- world size: the start-up lines state how many processes trained (Lightning's
  `Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/16`, `Starting with 16 processes`,
  torchrun's `global_world_sizes=[16, ...]`, Megatron-LM's `using world size: 16`). One
  process per GPU, so a manifest or name that says another GPU count is not this log's:
  Invalid, naming both. Two different world sizes in one log's start-up: Invalid. Without
  such a line, the configuration's `data_parallel_size` times the TP, PP and CP the manifest
  or name states is the world size.
- global batch size: every step line prints it (NeMo's `global_batch_size`, Megatron's
  `global batch size`). A GBS the manifest or
  the name states that differs: Invalid, naming both; one that changes within the log:
  Invalid. An old-style name (`..._8b_bf16_16`) states no GBS and the published row's was
  assumed: the log's wins (scaling and reference follow it). A smoke test trains a tiny
  stand-in whose batch is its own: its GBS is not compared.
- the layer count: the launcher writes the catalog row's into the manifest; a manifest that
  says another one: Invalid, naming both.
- the model: NeMo's FLOPsMeasurementCallback logs TFLOPS_per_GPU from the model it built, so
  TFLOPS x GPUs x step time / GBS is that model's FLOPs per sample. More than MODEL_FACTOR
  away from the FLOPs of the identified model (size, and the manifest's layer count): Invalid,
  naming both. Only where the recipe's logged TFLOPS are right (`logged_tflops` in its
  metadata.yaml) and never for a smoke test.
- the final iteration: the log's count (`iteration i/49`) wins over the manifest's max_steps;
  a difference is said in the reason.

Physical limits: a TFLOPS_per_GPU logged above the GPU type's dense peak for the dtype
(common/gpus.yaml), or above every GPU's peak when the run is not identified, cannot be true,
and neither can an MFU above 100%: Invalid, saying which GPU type the figure would fit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from llmb import manifest
from llmb.analysis import timing

if TYPE_CHECKING:
    from llmb.analysis.identify import Identifier, Identity

# The model FLOPs a log implies may differ this much from the catalog's (NeMo's formula
# versions differ by up to ~15%: causal attention counted half or not); a wrong layer count
# or model size is off by far more.
MODEL_FACTOR = 1.5


@dataclass
class Checked:
    """The identity after the log's facts, and what the checks found."""

    ident: Identity | None
    invalid: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _source(ident: Identity) -> str:
    return f"its {manifest.NAME}" if ident["by"] == "manifest" else "its experiment name"


def log_facts(scan: timing.LogScan, ident: Identity | None, identifier: Identifier | None
              ) -> Checked:
    """World size, global batch size and final iteration: the identity against the log."""
    checked = Checked(ident)
    sizes = list(scan.world_sizes.items())
    if len(sizes) > 1:
        checked.invalid.append(f"the log's start-up states two world sizes ({sizes[0][0]}: "
                               f"{sizes[0][1]!r}; {sizes[1][0]}: {sizes[1][1]!r})")
    if scan.gbs_change is not None:
        at, value = scan.gbs_change
        checked.invalid.append(f"{scan.name('gbs')} changes from {scan.gbs} to {value} at "
                               f"iteration {scan.label(at)}")
    if ident is None:
        return checked
    world = scan.world_size
    if world is not None and len(sizes) == 1 and world != ident["num_gpus"]:
        checked.invalid.append(f"{_source(ident)} says {ident['num_gpus']} GPUs, the log "
                               f"{world} processes ({sizes[0][1]!r}): the log is not this "
                               "configuration's")
    elif world is None and scan.data_parallel and ident["parallel"]:
        tp, pp, cp = ident["parallel"]
        if (implied := scan.data_parallel * tp * pp * cp) != ident["num_gpus"]:
            checked.invalid.append(
                f"{_source(ident)} says {ident['num_gpus']} GPUs, the log's data_parallel_size "
                f"{scan.data_parallel} x TP {tp} x PP {pp} x CP {cp} is {implied}: the log is "
                "not this configuration's")
    _gbs(scan, checked, identifier)
    if identifier is not None and ident["by"] == "manifest" and ident["num_layers"] \
            and not ident["smoke"]:
        layers = identifier.catalog_layers(ident)
        if layers is not None and layers != ident["num_layers"]:
            checked.invalid.append(
                f"{_source(ident)} says num_layers {ident['num_layers']}, the catalog's "
                f"{ident['recipe'].name} {ident['model_size']} {ident['dtype']} on "
                f"{ident['num_gpus']} {ident['gpu_type']} GPUs has {layers} (metadata.yaml)")
    hint = ident["final_index"]
    if scan.final_index is not None and hint is not None and scan.final_index != hint:
        checked.notes.append(f"the log counts to iteration {scan.label(scan.final_index)}, "
                             f"{_source(ident)}'s max_steps to {scan.label(hint)}; the log's "
                             "count is used")
    return checked


def _gbs(scan: timing.LogScan, checked: Checked, identifier: Identifier | None) -> None:
    ident = checked.ident
    assert ident is not None
    if scan.gbs is None or scan.gbs == ident["gbs"] or ident["smoke"]:
        return
    if identifier is not None and ident["by"] == "name" \
            and ident.get("gbs_from") == "published row":
        checked.ident = identifier.with_gbs(ident, scan.gbs)
        return
    checked.invalid.append(f"{_source(ident)} says GBS {ident['gbs']}, the step lines' "
                           f"{scan.name('gbs')} {scan.gbs}: the log is not this configuration's")


def implied_flops(scan: timing.LogScan, idx: list[int], gpus: int, gbs: int) -> float | None:
    """Model FLOPs per sample the logged TFLOPS_per_GPU imply: the median over the window."""
    values = [scan.steps[i].tflops * 1e12 * gpus * scan.steps[i].time / gbs  # type: ignore[operator]
              for i in idx if scan.steps[i].tflops is not None]
    return timing.median(values) if values else None


def model_check(scan: timing.LogScan, ident: Identity, idx: list[int],
                flops: float | None) -> str | None:
    """Why the model NeMo built is not the identified one, or None."""
    if flops is None or ident["smoke"] or not ident["recipe"].logged_tflops:
        return None
    gpus = scan.world_size or ident["num_gpus"]
    gbs = scan.gbs or ident["gbs"]
    implied = implied_flops(scan, idx, gpus, gbs) if gpus and gbs else None
    if implied is None or 1 / MODEL_FACTOR <= implied / flops <= MODEL_FACTOR:
        return None
    layers = f", {ident['num_layers']} layers" if ident.get("num_layers") else ""
    return (f"the log's {scan.name('tflops')} imply {implied:.3g} model FLOPs per sample "
            f"(GBS {gbs} on {gpus} GPUs), {_source(ident)}'s model ({ident['recipe'].name} "
            f"{ident['model_size']}{layers}) has {flops:.3g}: the log is not this "
            "configuration's")


def _fits(ident: dict[str, Any], identifier: Any, ratio: float, peak: float) -> str:
    """`: wrong GPU type? ...` when another GPU type's peak would hold the figure, else that
    no GPU's would."""
    gpu = ident["gpu_type"]
    for other in identifier.catalog.gpu_types():
        other_peak = identifier.peak_tflops(ident, other)
        if other != gpu and other_peak and ratio * peak / other_peak <= 1:
            how = (f"pass --gpu-type={other}" if ident["by"] == "name"
                   else f"its {manifest.NAME} says {gpu}")
            return (f": wrong GPU type? on {other} it would be "
                    f"{ratio * peak / other_peak * 100:.0f}% ({how})")
    return (f" and of every GPU's: the log is not this configuration's (wrong log, or "
            f"wrong {'manifest' if ident['by'] == 'manifest' else 'experiment name'})")


def impossible_mfu(ident: dict[str, Any], identifier: Any, mfu: float, peak: float) -> str:
    """MFU above 100%: a GPU type under which it would fit says wrong GPU type, else the log
    does not belong to this configuration."""
    shown_pct = f"{mfu * 100:.0f}%" if mfu < 1e4 else "far"
    text = (f"MFU {shown_pct} is above 100% of the {ident['gpu_type']} {ident['dtype']} peak "
            f"({peak:g} TFLOPS)")
    return text + _fits(ident, identifier, mfu, peak)


def tflops_above_peak(scan: timing.LogScan, ident: dict[str, Any] | None, identifier: Any
                      ) -> str | None:
    """A logged TFLOPS_per_GPU above what the GPU can do, or None."""
    if scan.tflops_max is None or identifier is None:
        return None
    value, at, text = scan.tflops_max
    if ident is None:
        peak = max((float(p) for g in identifier.catalog.all_gpu_types()
                    for p in g.peak_tflops.values()),
                   default=None)
        if peak is None or value <= peak:
            return None
        return (f"{scan.name('tflops')} {text} at iteration {scan.label(at)} is above every "
                f"GPU's peak ({peak:g} TFLOPS)")
    if not ident["smoke"] and not ident["recipe"].logged_tflops:
        return None  # NeMo logs a wrong figure for this model, and it is not used
    peak = identifier.peak_tflops(ident)
    if not peak or value <= peak:
        return None
    return (f"{scan.name('tflops')} {text} at iteration {scan.label(at)} is above the "
            f"{ident['gpu_type']} {ident['dtype']} peak ({peak:g} TFLOPS)"
            + _fits(ident, identifier, value / peak, peak).replace(" and of every GPU's", ""))
