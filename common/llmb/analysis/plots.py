"""The report's plots, drawn with matplotlib (imported here, lazily: nothing else needs it).

One figure per recipe / size / dtype / GPU type / scaling (a "family" of configurations that
differ only in GPU count), three panels against the GPU count:

  step time   each successful run (dots), the median with the runs' min-max, the published
              reference and the tolerance band above it (a median inside the band passes)
  MFU         the median MFU, and the MFU the reference step time would give
  efficiency  scaling efficiency: MFU at N GPUs over MFU at the smallest scale (tokens/s per
              GPU when there is no MFU, e.g. a smoke test); 100% is perfect scaling

Figures are PNG bytes from matplotlib's Agg canvas (no display, no pyplot state).
"""

from __future__ import annotations

import io
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from llmb.analysis.record import Configuration

if TYPE_CHECKING:
    from matplotlib.axes import Axes

FAMILY_FIELDS = ("recipe", "model_size", "dtype", "gpu_type", "scaling", "smoke_test")
DPI = 100
SIZE = (13.0, 3.8)  # inches
FamilyKey = tuple[object, ...]  # a family's FAMILY_FIELDS
COLOURS = {"run": "#9aa5b1", "median": "#1f5fa8", "reference": "#c2410c", "band": "#fdba74",
           "mfu": "#15803d", "efficiency": "#7c3aed"}


def family_key(config: Configuration) -> FamilyKey:
    fields: Mapping[str, object] = config
    return tuple(fields.get(f) for f in FAMILY_FIELDS)


def family_title(key: FamilyKey) -> str:
    recipe, size, dtype, gpu, scaling, smoke = key
    text = f"{recipe} {size} {dtype} on {gpu}"
    text += f", {scaling} scaling" if scaling else ", scaling unknown"
    return text + (" (smoke test)" if smoke else "")


def plain(text: str) -> str:
    """Text drawn as written: matplotlib reads $...$ as math (a lone $ or a bad formula from a
    manifest's value ends the whole figure in a ValueError)."""
    return text.replace("$", r"\$")


def slug(key: FamilyKey) -> str:
    parts = [str(p) for p in key[:5] if p] + (["smoke"] if key[5] else [])
    return re.sub(r"[^A-Za-z0-9.]+", "_", "-".join(parts)).strip("_") or "plot"


def families(configs: Sequence[Configuration]) -> dict[FamilyKey, list[Configuration]]:
    """Identified configurations with a figure or a reference, grouped, each sorted by GPUs."""
    out: dict[FamilyKey, list[Configuration]] = {}
    for c in configs:
        if c.get("recipe") and c.get("num_gpus") and (
                c.get("time_median") or c.get("reference_step_time")):
            out.setdefault(family_key(c), []).append(c)
    return {k: sorted(v, key=_gpus) for k, v in out.items()}


def _gpus(config: Configuration) -> int:
    return config.get("num_gpus") or 0  # (a configuration that is plotted has its count)


def efficiency(configs: Sequence[Configuration]) -> list[tuple[int, float]]:
    """(GPUs, scaling efficiency in %) relative to the smallest scale with a figure."""
    by_mfu = any(c.get("mfu_median") for c in configs)
    points = []
    for c in configs:
        gpus = _gpus(c)
        if by_mfu and (mfu := c.get("mfu_median")):
            points.append((gpus, mfu))
        elif not by_mfu and (tokens := c.get("tokens_per_second_median")):
            points.append((gpus, tokens / gpus))
    if not points:
        return []
    base = points[0][1]
    return [(n, v / base * 100) for n, v in points]


def figure_png(key: FamilyKey, configs: Sequence[Configuration],
               runs: Mapping[str, Sequence[float]], tolerance: float) -> bytes:
    """The three panels for one family; runs maps config_key -> successful runs' means."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=SIZE, dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    ax_time, ax_mfu, ax_eff = fig.subplots(1, 3)
    fig.suptitle(plain(family_title(key)), fontsize=12, fontweight="bold")
    _time_panel(ax_time, configs, runs, tolerance)
    _mfu_panel(ax_mfu, configs)
    _efficiency_panel(ax_eff, key, configs)
    _gpu_axes((ax_time, ax_mfu, ax_eff), [_gpus(c) for c in configs])
    out = io.BytesIO()
    fig.savefig(out, format="png", metadata={"Software": None})
    return out.getvalue()


def _time_panel(ax: Axes, configs: Sequence[Mapping[str, Any]],
                runs: Mapping[str, Sequence[float]], tolerance: float) -> None:
    """Each run, the median with the runs' min-max, the reference and its tolerance band."""
    refs = [(c["num_gpus"], c["reference_step_time"]) for c in configs
            if c.get("reference_step_time")]
    if refs:
        xs, ys = zip(*refs, strict=True)
        ax.fill_between(xs, ys, [y / (1 - tolerance / 100) for y in ys],
                        color=COLOURS["band"], alpha=0.45, linewidth=0,
                        label=f"within {tolerance:g}% of reference")
        ax.plot(xs, ys, "--", marker="x", color=COLOURS["reference"], label="reference")
    for c in configs:
        points = runs.get(c["config_key"], [])
        ax.plot([c["num_gpus"]] * len(points), points, "o", markersize=4,
                color=COLOURS["run"], alpha=0.8, zorder=3)
    measured = [c for c in configs if c.get("time_median")]
    if measured:
        gpus_measured = [c["num_gpus"] for c in measured]
        med = [c["time_median"] for c in measured]
        low = [c["time_median"] - c["time_min"] for c in measured]
        high = [c["time_max"] - c["time_median"] for c in measured]
        ax.errorbar(gpus_measured, med, yerr=[low, high], fmt="-o", color=COLOURS["median"],
                    capsize=4, label="median (min-max of runs)", zorder=4)
    ax.plot([], [], "o", color=COLOURS["run"], markersize=4, label="each run")
    ax.set_title("step time")
    ax.set_ylabel("seconds per step")


def _mfu_panel(ax: Axes, configs: Sequence[Mapping[str, Any]]) -> None:
    """The median MFU, and the MFU the reference step time would give."""
    with_mfu = [c for c in configs if c.get("mfu_median")]
    if with_mfu:
        ax.plot([c["num_gpus"] for c in with_mfu], [c["mfu_median"] * 100 for c in with_mfu],
                "-o", color=COLOURS["mfu"], label="median")
        ref_mfu = [(c["num_gpus"], c["mfu_median"] * c["time_median"] / c["reference_step_time"]
                    * 100) for c in with_mfu if c.get("reference_step_time")]
        if ref_mfu:
            xs, ys = zip(*ref_mfu, strict=True)
            ax.plot(xs, ys, "--", marker="x", color=COLOURS["reference"],
                    label="at the reference")
    else:
        ax.text(0.5, 0.5, "no MFU (model FLOPs unknown\nor a smoke test)",
                ha="center", va="center", transform=ax.transAxes, color="#555555")
    ax.set_title("MFU")
    ax.set_ylabel("% of peak")


def _efficiency_panel(ax: Axes, key: FamilyKey, configs: Sequence[Configuration]) -> None:
    eff = efficiency(configs)
    if eff:
        xs, ys = zip(*eff, strict=True)
        ax.axhline(100, color=COLOURS["run"], linestyle=":", label="ideal")
        ax.plot(xs, ys, "-o", color=COLOURS["efficiency"], label="measured")
    ax.set_title(plain(f"{key[4] or ''} scaling efficiency".strip()))
    ax.set_ylabel(f"% of {eff[0][0]} GPUs" if eff else "%")


def _gpu_axes(axes: Sequence[Axes], gpus: list[int]) -> None:
    """Every panel against the GPU count, in powers of two, with its grid and legend."""
    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.set_xticks(gpus, [str(n) for n in gpus])
        ax.minorticks_off()
        ax.set_xlabel("GPUs")
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8, loc="best")
    if len(set(gpus)) == 1:  # one scale: keep the axis readable
        for ax in axes:
            ax.set_xlim(gpus[0] / 1.5, gpus[0] * 1.5)
