"""A GPU's health from what nvidia-smi said during the screen (llmb.container.gpuhealth), and
what it names.

A GPU is a suspect before it is slow when its memory is failing: it is named (kind `gpu`,
figure `health`, verdict `unhealthy`) whatever its speed for
- uncorrectable ECC errors since the driver loaded (ecc.errors.uncorrected.volatile.total > 0),
- a retired page or a remapped row waiting for a reset (retired_pages.pending,
  remapped_rows.pending), or a row remap that failed (remapped_rows.failure).

What slows a GPU without breaking it is named with the figure it explains (`explained_by` on
that figure's entry, and in its reason), never alone, since it may be the moment's:
- an active throttle reason (clocks_throttle_reasons.active: software power cap, hardware
  slowdown, software or hardware thermal slowdown, hardware power brake: NVML's bits
  0x4, 0x8, 0x20, 0x40, 0x80) and a power limit below the default (enforced.power.limit under
  POWER_CAPPED x power.default_limit) explain a slow matrix multiply or memory bandwidth;
- a PCIe link narrower or slower than it can be (pcie.link.width/gen current < max, the
  generation only when sampled while the GPU worked: an idle link steps down) explains a
  slow network: a node's pairs, or a link.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from llmb.llmbrun.screen.document import MAX_FIGURE, NAME, GpuHealth, Named, ScreenNode
from llmb.shared import records

THROTTLES = {0x4: "software power cap", 0x8: "hardware slowdown",
             0x20: "software thermal slowdown", 0x40: "hardware thermal slowdown",
             0x80: "hardware power brake"}
POWER_CAPPED = 0.95
YES = {"yes", "1", "true", "active"}
NAME_LENGTH = NAME.text or 256
MAX_UNKNOWN = 64  # fields nvidia-smi did not know, named


def _int(value: object) -> int | None:
    """A whole number nvidia-smi said, within what a record holds; None otherwise."""
    try:
        got = int(str(value)[:64], 0)
    except (TypeError, ValueError):
        return None
    return got if abs(got) <= records.MAX_WHOLE else None


def _float(value: object) -> float | None:
    """A number nvidia-smi said: finite and within a figure's range (never its `inf`, `nan`
    or `[N/A]`); None otherwise."""
    try:
        got = float(str(value)[:64])
    except (TypeError, ValueError):
        return None
    return got if math.isfinite(got) and abs(got) <= MAX_FIGURE else None


def _name(value: object) -> str | None:
    return value if isinstance(value, str) and len(value) <= NAME_LENGTH else None


def _yes(value: object) -> bool | None:
    return None if value is None else str(value).strip().lower() in YES


def facts(raw: Mapping[str, object]) -> GpuHealth:
    """nvidia-smi's strings as facts (None where it did not say)."""
    mask = _int(raw.get("clocks_throttle_reasons.active"))
    sampled, unknown = raw.get("sampled"), raw.get("unknown_fields")
    return {
        "ecc_uncorrected": _int(raw.get("ecc.errors.uncorrected.volatile.total")),
        "retired_pages_pending": _yes(raw.get("retired_pages.pending")),
        "remapped_rows_pending": _yes(raw.get("remapped_rows.pending")),
        "remapped_rows_failed": _yes(raw.get("remapped_rows.failure")),
        "throttle": None if mask is None else [w for bit, w in THROTTLES.items() if mask & bit],
        "power_limit_w": _float(raw.get("enforced.power.limit") or raw.get("power.limit")),
        "power_default_w": _float(raw.get("power.default_limit")),
        "clock_sm_mhz": _int(raw.get("clocks.sm")), "clock_max_sm_mhz": _int(raw.get(
            "clocks.max.sm")),
        "pcie_gen": [_int(raw.get("pcie.link.gen.current")), _int(raw.get("pcie.link.gen.max"))],
        "pcie_width": [_int(raw.get("pcie.link.width.current")),
                       _int(raw.get("pcie.link.width.max"))],
        "temperature_c": _int(raw.get("temperature.gpu")),
        "sampled": _name(sampled),
        "unknown_fields": [u for u in unknown[:MAX_UNKNOWN] if _name(u) is not None]
        if isinstance(unknown, list) else [],
    }


def errors(f: GpuHealth) -> list[str]:
    """What names a GPU whatever its speed."""
    out = []
    if (f.get("ecc_uncorrected") or 0) > 0:
        out.append(f"{f['ecc_uncorrected']} uncorrectable ECC error(s) since the driver loaded")
    if f.get("retired_pages_pending"):
        out.append("a retired memory page waits for a GPU reset")
    if f.get("remapped_rows_pending"):
        out.append("a remapped memory row waits for a GPU reset")
    if f.get("remapped_rows_failed"):
        out.append("a memory row remap failed")
    return out


def slows_compute(f: GpuHealth) -> list[str]:
    """What explains a slow matrix multiply or memory bandwidth."""
    out = [f"{w} active" for w in f.get("throttle") or []]
    limit, default = f.get("power_limit_w"), f.get("power_default_w")
    if limit is not None and default and limit < POWER_CAPPED * default:
        out.append(f"power limit {limit:g} W of its default {default:g} W")
    return out


def slows_network(f: GpuHealth) -> list[str]:
    """What explains a slow network from this GPU: its PCIe link below what it can be."""
    (gen, gen_max), (width, width_max) = f.get("pcie_gen") or [None, None], \
        f.get("pcie_width") or [None, None]
    narrow = width is not None and width_max is not None and width < width_max
    slower = gen is not None and gen_max is not None and gen < gen_max and \
        f.get("sampled") == "while busy"
    return [f"PCIe link Gen{gen} x{width} of Gen{gen_max} x{width_max}"] if narrow or slower \
        else []


def named(nodes: Sequence[ScreenNode]) -> list[Named]:
    """Each GPU that a health fact names (its verdict `unhealthy`, the reason added)."""
    out = []
    for node in nodes:
        for gpu in node["gpus"]:
            problems = errors(gpu.get("health", {}))
            if not problems:
                continue
            gpu["verdict"] = "unhealthy"
            gpu.setdefault("reasons", []).append("; ".join(problems))
            out.append(Named(kind="gpu", name=f"{node['node']} GPU {gpu.get('local_rank')}",
                             figure="health", value=None, floor=None, expected=None,
                             peers_median=None, why="; ".join(problems)))
    return out


def explain(entries: Sequence[Named], nodes: Sequence[ScreenNode]) -> None:
    """Add to each named figure what the health facts say explains it (`explained_by`)."""
    gpus = {f"{n['node']} GPU {g.get('local_rank')}": g.get("health", GpuHealth())
            for n in nodes for g in n["gpus"]}
    by_node = {n["node"]: [g.get("health", GpuHealth()) for g in n["gpus"]] for n in nodes}
    for entry in entries:
        name, figure = str(entry["name"]), str(entry.get("figure") or "")
        why: list[str] = []
        if entry["kind"] == "gpu" and name in gpus and figure != "health":
            why = slows_compute(gpus[name])
        elif "pairs" in figure or entry["kind"] == "link":
            for node in name.split(" - "):
                why += [f"{node}: {w}" for f in by_node.get(node, []) for w in slows_network(f)]
        if why:
            entry["explained_by"] = sorted(set(why))
            entry["why"] = f"{entry['why']}; explained by: {', '.join(sorted(set(why)))}"
