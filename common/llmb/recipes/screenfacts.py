"""gpus.yaml `screen:`: what `llmb-run screen` expects of one healthy GPU of each type.

    screen:
      matmul: {tolerance, source}                        expected: the type's peak_tflops
      memory_gbps: {expected, tolerance, source}         device memory bandwidth, GB/s
      nvlink_busbw_gbps: {expected, tolerance, source}   all-reduce busbw across a node's GPUs

`expectations(gpu)` gives each measured figure (matmul_<dtype>_tflops, memory_gbps,
nvlink_busbw_gbps) its Expectation: the figure, its public source, and the floor below which
the screen names it, expected x (1 - tolerance). `problem()` says in one line what is wrong
with a block (the catalog raises it when it loads gpus.yaml).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

FIGURES = {"matmul": {"tolerance", "source"},
           "memory_gbps": {"expected", "tolerance", "source"},
           "nvlink_busbw_gbps": {"expected", "tolerance", "source"}}


# The dtypes the screen multiplies matrices in (llmb.container.screenrun): a peak of another
# (nvfp4) is no screen figure.
MATMUL_DTYPES = ("bf16", "fp8")


class GpuFacts(Protocol):
    """What of a GPU type (llmb.recipes.catalog.GpuType) the expectations need."""

    @property
    def peak_tflops(self) -> Mapping[str, float]: ...

    @property
    def screen(self) -> Mapping[str, Mapping[str, str | float]] | None: ...


@dataclass(frozen=True)
class Expectation:
    """A figure one healthy GPU reaches (its public source), and how far below it still
    passes: the floor is expected x (1 - tolerance)."""

    expected: float
    tolerance: float
    source: str

    @property
    def floor(self) -> float:
        return self.expected * (1 - self.tolerance)


def expectations(gpu: GpuFacts) -> dict[str, Expectation]:
    """The expected figure per measured figure name; {} when gpus.yaml gives none."""
    out: dict[str, Expectation] = {}
    for name, entry in (gpu.screen or {}).items():
        if name == "matmul":
            for dtype, peak in gpu.peak_tflops.items():
                if dtype not in MATMUL_DTYPES:
                    continue
                out[f"matmul_{dtype}_tflops"] = Expectation(
                    float(peak), float(entry["tolerance"]), str(entry["source"]))
        else:
            out[name] = Expectation(float(entry["expected"]), float(entry["tolerance"]),
                                    str(entry["source"]))
    return out


def _keys(where: str, data: object, required: set[str]) -> str | None:
    if not isinstance(data, Mapping):
        return f"{where}: expected a mapping, got {type(data).__name__}"
    missing, unknown = required - set(data), set(data) - required
    if missing:
        return f"{where}: missing key(s) {', '.join(sorted(missing))}"
    if unknown:
        return f"{where}: unknown key(s) {', '.join(sorted(map(str, unknown)))}"
    return None


def problem(where: str, block: object) -> str | None:
    """One line on what is wrong with a `screen:` block (None: nothing, or no block): known
    figures, each with a positive expected figure, a tolerance from 0 to 1 and a source."""
    if block is None:
        return None
    if not isinstance(block, Mapping):
        return f"{where}: expected a mapping, got {type(block).__name__}"
    if unknown := set(block) - set(FIGURES):
        return f"{where}: unknown key(s) {', '.join(sorted(map(str, unknown)))}"
    for figure, entry in block.items():
        if found := _keys(f"{where}.{figure}", entry, FIGURES[figure]):
            return found
        numbers = {k: entry[k] for k in ("expected", "tolerance") if k in entry}
        if any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in numbers.values()):
            return f"{where}.{figure}: expected and tolerance must be numbers"
        if numbers.get("expected", 1) <= 0 or not 0 <= numbers["tolerance"] < 1:
            return (f"{where}.{figure}: expected must be positive and tolerance at least 0 and "
                    "below 1")
        if not isinstance(entry["source"], str) or not entry["source"].strip():
            return f"{where}.{figure}: source must name where the figure comes from"
    return None
