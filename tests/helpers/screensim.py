"""Synthetic screens for the judge: what llmb.llmbrun.screen.results hands the judge (nodes with
their GPUs' figures and repeats, each node's all-reduce, the pairs), built from a stated noise
model with one fault injected, without a job. `make bench-screen` (tests/bench/bench_screen.py)
runs the real judge over many of them; the judge's tests use a few.

The noise model: every repeat of a figure is its true value x (1 + e), e drawn from a normal
distribution with a standard deviation of NOISE[kind] (1 % for a GPU's figures and a node's
all-reduce, 2 % for a pair's), independently for every repeat; a healthy element's true value
is the figure's healthy value (HEALTHY), the same on every element. As many repeats as the
screen's job measures on GPUs (llmb.llmbrun.screen.job.GPU_PARAMS), the pairs by the job's
own round-robin schedule (llmb.container.screenrun).

A fault slows one element by a fraction (0.05: 5 % slow): `gpu` one figure of one GPU (drawn
from its three), `node` one node's own all-reduce (NVLink), `network` every pair of one node,
`link` one pair. `outcome` says whether the judge named the fault and what else it named.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llmb.container import screenrun
from llmb.llmbrun.screen import job, judge
from llmb.recipes import catalog, screenfacts

FAULTS = ("gpu", "node", "network", "link")
PER_NODE = 8
NOISE = {"gpu": 0.01, "node": 0.01, "pair": 0.02}
HEALTHY = {"matmul_bf16_tflops": 700.0, "matmul_fp8_tflops": 1300.0, "memory_gbps": 3000.0,
           "node": 360.0, "pair": 45.0}
GPU_FIGURES = ("matmul_bf16_tflops", "matmul_fp8_tflops", "memory_gbps")
REPEATS = int(job.GPU_PARAMS["repeats"])
ALLREDUCE_REPEATS = int(job.GPU_PARAMS["allreduce_repeats"])
EXPECTATIONS = screenfacts.expectations(catalog.get_gpu_type("h100"))


@dataclass(frozen=True)
class Fault:
    kind: str  # none | gpu | node | network | link
    slowdown: float
    node: str | None = None
    gpu: int | None = None
    figure: str | None = None
    pair: tuple[str, str] | None = None

    def matches(self, named: dict[str, Any]) -> bool:
        """Whether `named` (an entry of the judge's `named`) is this fault."""
        if self.kind == "gpu":
            return named["kind"] == "gpu" and named["name"] == f"{self.node} GPU {self.gpu}"
        if self.kind in ("node", "network"):
            figure = "all-reduce" if self.kind == "node" else "pairs"
            return (named["kind"], named["name"]) == ("node", self.node) and \
                str(named["figure"]).startswith(figure)
        if self.kind == "link" and self.pair is not None:
            return named["kind"] == "link" and named["name"] == " - ".join(self.pair)
        return False

    def touches(self, named: dict[str, Any]) -> bool:
        """Whether `named` involves the slow element, at another level than the fault's own:
        a link of a node whose network is slow (one of its two pairs fell below the floor,
        the other did not), the node of a slow GPU or link."""
        if self.kind == "link" and self.pair is not None:
            return named["name"] in self.pair
        if self.node is None:
            return False
        if named["kind"] == "link":
            return self.kind == "network" and self.node in str(named["name"]).split(" - ")
        return str(named["name"]).split(" GPU ")[0] == self.node

    @property
    def suspect(self) -> str | None:
        """The node a suspect list should hold (a link names none)."""
        return self.node if self.kind in ("gpu", "node", "network") else None


def _noisy(rng: Any, value: Any, noise: float, count: int) -> Any:
    """Repeats of `value` (an array: one row of `count` repeats per element)."""
    import numpy as np

    value = np.asarray(value, dtype=float)
    return value[..., None] * (1 + rng.normal(0.0, noise, (*value.shape, count)))


def _values(repeats: Any) -> Any:
    """precision.value_of (the median) over the last axis, for whole arrays at once."""
    import numpy as np

    return np.median(repeats, axis=-1)


def names(count: int) -> list[str]:
    return [f"node{i:04d}" for i in range(count)]


def pick_fault(rng: Any, kind: str, slowdown: float, nodes: list[str],
               pairs: list[tuple[str, str]]) -> Fault:
    if kind == "none":
        return Fault("none", 0.0)
    node = nodes[int(rng.integers(len(nodes)))]
    if kind == "gpu":
        return Fault(kind, slowdown, node, int(rng.integers(PER_NODE)),
                     GPU_FIGURES[int(rng.integers(len(GPU_FIGURES)))])
    if kind == "link":
        return Fault(kind, slowdown, pair=pairs[int(rng.integers(len(pairs)))])
    return Fault(kind, slowdown, node)


def screen(count: int, fault_kind: str, slowdown: float, seed: int
           ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], Fault]:
    """A screen of `count` nodes x PER_NODE GPUs with one fault: (nodes, pairs, the fault)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    nodes = names(count)
    schedule = screenrun.pair_rounds(nodes, screenrun.default_rounds(count))
    flat = [(a, b) for pairs in schedule for a, b in pairs]
    fault = pick_fault(rng, fault_kind, slowdown, nodes, flat)
    slow = 1 - fault.slowdown
    truth = np.array([[[HEALTHY[f] for f in GPU_FIGURES]] * PER_NODE] * count)
    if fault.kind == "gpu":
        truth[nodes.index(str(fault.node)), fault.gpu, GPU_FIGURES.index(str(fault.figure))] *= slow
    gpu_repeats = _noisy(rng, truth, NOISE["gpu"], REPEATS)
    gpu_values = _values(gpu_repeats)
    own_truth = np.full(count, HEALTHY["node"])
    if fault.kind == "node":
        own_truth[nodes.index(str(fault.node))] *= slow
    own_repeats = _noisy(rng, own_truth, NOISE["node"], ALLREDUCE_REPEATS)
    own_values = _values(own_repeats)
    out = []
    for i, name in enumerate(nodes):
        gpus = [{"rank": local, "local_rank": local, "index": local, "notes": [], "error": None,
                 "repeats": dict(zip(GPU_FIGURES, gpu_repeats[i, local].tolist(), strict=True)),
                 "figures": dict(zip(GPU_FIGURES, gpu_values[i, local].tolist(), strict=True))}
                for local in range(PER_NODE)]
        out.append({"node": name, "verdict": None, "reasons": [], "error": None, "gpus": gpus,
                    "allreduce": {"ranks": PER_NODE, "error": None,
                                  "repeats": own_repeats[i].tolist(),
                                  "busbw_gbps": float(own_values[i])}, "pairs": []})
    pair_truth = np.array([HEALTHY["pair"] * (slow if (fault.kind == "network" and fault.node
                                                        in pair) or fault.pair == pair else 1)
                           for pair in flat])
    pair_repeats = _noisy(rng, pair_truth, NOISE["pair"], ALLREDUCE_REPEATS)
    pair_values = _values(pair_repeats)
    rounds = [number for number, round_pairs in enumerate(schedule, 1) for _ in round_pairs]
    pairs = [{"round": number, "nodes": list(pair), "ranks": 2 * PER_NODE, "error": None,
              "repeats": pair_repeats[j].tolist(), "busbw_gbps": float(pair_values[j])}
             for j, (number, pair) in enumerate(zip(rounds, flat, strict=True))]
    return out, pairs, fault


@dataclass(frozen=True)
class Outcome:
    named: bool  # the fault was named
    false: tuple[str, ...]  # what was named or suspected that the fault does not touch
    elsewise: tuple[str, ...]  # what was named of the slow element at another level


def outcome(nodes: list[dict[str, Any]], pairs: list[dict[str, Any]], fault: Fault
            ) -> Outcome:
    """Judge the screen with the real judge (GPU mode, H100's expectations)."""
    verdicts = judge.judge(nodes, pairs, "gpu", EXPECTATIONS)
    named = any(fault.matches(n) for n in verdicts["named"])
    others = [n for n in verdicts["named"] if not fault.matches(n)]
    wrong = {f"{n['kind']} {n['name']}" for n in others if not fault.touches(n)}
    wrong |= {f"suspect {s}" for s in verdicts["suspects"] if s != fault.suspect}
    elsewise = {f"{n['kind']} {n['name']}" for n in others if fault.touches(n)}
    return Outcome(named, tuple(sorted(wrong)), tuple(sorted(elsewise)))
