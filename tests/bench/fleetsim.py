"""A synthetic fleet for `make bench-screen`: what llmb.llmbrun.screen.results hands the judge
(nodes with their GPUs' figures and repeats, each node's all-reduce, the pairs), drawn from a
model of a real cluster whose every parameter is stated, with its source, in `Fleet`.

A fleet is drawn once (each healthy element's own persistent figure); each screen of it then
draws its repeats (noise, now and then a disturbed repeat), and a later screen may find the
whole cluster drifted. One fault slows one element by a fraction (0.05: 5 % slow): `gemm` one
GPU's matrix multiply (bf16 or fp8), `hbm` one GPU's memory bandwidth, `nvlink` one node's own
all-reduce, `network` one node's NIC (every pair it is in), `link` one pair.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from llmb.container import pairing
from llmb.llmbrun.screen import baseline, job, judge
from llmb.recipes import catalog, screenfacts

GPU_FIGURES = ("matmul_bf16_tflops", "matmul_fp8_tflops", "memory_gbps")
FAULTS = ("gemm", "hbm", "nvlink", "network", "link")
EXPECTATIONS = screenfacts.expectations(catalog.get_gpu_type("h200"))
HEALTHY = {"matmul_bf16_tflops": 660.0, "matmul_fp8_tflops": 1190.0, "memory_gbps": 4090.0,
           "node": 360.0, "pair": 45.0}  # H200 medians (tests/fixtures/screen), paper 360/45


@dataclass(frozen=True)
class Fleet:
    """The fleet model's parameters; every one relative (0.01 is 1 %)."""

    per_node: int = 8
    # Healthy GPUs of one type differ for good, from power and clock management: Sinha et al.,
    # "Not All GPUs Are Created Equal" (SC'22), 8 % mean variation of GEMM throughput across a
    # cluster's GPUs, up to 22 %: a standard deviation of about 1.5 %
    gemm_spread: float = 0.015
    # memory bandwidth varies less there (HBM runs at its own clock): about 0.7 %
    hbm_spread: float = 0.007
    # a node's NVLink all-reduce: about 1 % (the GPUs' spread, averaged over 8, plus the switch)
    nvlink_spread: float = 0.01
    # a node's NIC and a link's cables: not measured; taken as half and a third of NVLink's
    nic_spread: float = 0.005
    link_spread: float = 0.003
    # one repeat's noise, measured on one H200 with the screen's own probe
    # (tests/fixtures/screen/h200-probe-20261128*.json: sd 0.5-0.9 % bf16, 0.6-1.5 % fp8,
    # 0.6-1.0 % memory); the all-reduces' not measured, taken as 1 %
    noise: tuple[tuple[str, float], ...] = (
        ("matmul_bf16_tflops", 0.008), ("matmul_fp8_tflops", 0.012), ("memory_gbps", 0.008),
        ("node", 0.01), ("pair", 0.01))
    # now and then a repeat is disturbed: about 1 in 50 slowed by 5-20 % (FALCON, arXiv
    # 2410.12588: fail-slow stragglers in training clusters; Llama 3's report: a 1-2 % daily
    # swing of throughput with the temperature); the H200 probe saw 1 of 420 beyond 5 %
    disturb_rate: float = 0.02
    disturb: tuple[float, float] = (0.05, 0.20)
    # a pair across the spine is slower than one under a leaf of 32 nodes: users of NCCL have
    # reported inter-node all-reduce bus bandwidth of 88.4 GB/s under one switch against
    # 86.8 GB/s across switches (-1.8 %), and 43.5 against 39.9 GB/s (-8 %) on another
    # cluster: 4 %, between the two
    leaf_size: int = 32
    spine: float = 0.04
    # between a saved baseline and a later screen the whole cluster drifts: 1-2 % slower
    drift: tuple[float, float] = (0.01, 0.02)

    def noise_of(self, what: str) -> float:
        return dict(self.noise)[what]


# today's model before the fleet's: the same value on every element, 1 % noise per repeat
# (2 % for a pair), nothing disturbed, one tier, no drift
CLEAN = Fleet(gemm_spread=0.0, hbm_spread=0.0, nvlink_spread=0.0, nic_spread=0.0,
              link_spread=0.0, noise=(("matmul_bf16_tflops", 0.01), ("matmul_fp8_tflops", 0.01),
                                      ("memory_gbps", 0.01), ("node", 0.01), ("pair", 0.02)),
              disturb_rate=0.0, spine=0.0, drift=(0.0, 0.0))
ROUNDS = 4  # llmb-run screen --rounds 4: the partners the fit needs
REPEATS = int(job.GPU_PARAMS["repeats"])
ALLREDUCE_REPEATS = int(job.GPU_PARAMS["allreduce_repeats"])


@dataclass(frozen=True)
class Drawn:
    """One fleet's persistent figures."""

    model: Fleet
    nodes: list[str]
    leaves: dict[str, str]
    pairs: list[tuple[str, str]]
    gpu: Any  # [node, gpu, figure]
    own: Any  # [node]
    pair: Any  # [pair]


def draw(model: Fleet, count: int, rng: Any) -> Drawn:
    import numpy as np

    nodes = [f"node{i:04d}" for i in range(count)]
    leaves = {n: f"leaf{i // model.leaf_size}" for i, n in enumerate(nodes)}
    # the screen pairs under one leaf first (llmb.container.pairing), as its job does
    pairs = [p for r in pairing.pair_rounds(nodes, ROUNDS, leaves) for p in r]
    spread = np.array([model.gemm_spread, model.gemm_spread, model.hbm_spread])
    gpu = np.array([HEALTHY[f] for f in GPU_FIGURES]) * (
        1 + rng.normal(0.0, 1.0, (count, model.per_node, 3)) * spread)
    own = HEALTHY["node"] * (1 + rng.normal(0.0, model.nvlink_spread, count))
    nic = 1 + rng.normal(0.0, model.nic_spread, count)
    where = {n: i for i, n in enumerate(nodes)}
    pair = np.array([HEALTHY["pair"] * min(nic[where[a]], nic[where[b]])
                     * (1 - model.spine * (leaves[a] != leaves[b])) for a, b in pairs])
    pair *= 1 + rng.normal(0.0, model.link_spread, len(pairs))
    return Drawn(model, nodes, leaves, pairs, gpu, own, pair)


@dataclass(frozen=True)
class Fault:
    kind: str  # none | one of FAULTS
    slowdown: float = 0.0
    node: int = 0
    gpu: int = 0
    figure: int = 0
    pair: int = 0


def pick(rng: Any, fleet: Drawn, kind: str, slowdown: float) -> Fault:
    return Fault(kind, slowdown, int(rng.integers(len(fleet.nodes))),
                 int(rng.integers(fleet.model.per_node)),
                 int(rng.integers(2)) if kind == "gemm" else 2, int(rng.integers(len(fleet.pairs))))


def _repeats(rng: Any, truth: Any, noise: float, count: int, model: Fleet) -> Any:
    import numpy as np

    shape = (*truth.shape, count)
    got = truth[..., None] * (1 + rng.normal(0.0, noise, shape))
    hit = rng.random(shape) < model.disturb_rate
    return got * np.where(hit, 1 - rng.uniform(*model.disturb, shape), 1.0)


def screen(fleet: Drawn, fault: Fault, rng: Any, drift: float = 0.0
           ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """One screen of the fleet, `fault` injected, every figure `drift` slower."""
    import numpy as np

    m, keep = fleet.model, 1 - drift
    slow = 1 - fault.slowdown
    gpu, own, pair = fleet.gpu * keep, fleet.own * keep, fleet.pair * keep
    if fault.kind in ("gemm", "hbm"):
        gpu = gpu.copy()
        gpu[fault.node, fault.gpu, fault.figure] *= slow
    if fault.kind == "nvlink":
        own = own.copy()
        own[fault.node] *= slow
    if fault.kind in ("network", "link"):
        name = fleet.nodes[fault.node]
        pair = pair * np.array([slow if (fault.kind == "network" and name in p)
                                or (fault.kind == "link" and j == fault.pair) else 1.0
                                for j, p in enumerate(fleet.pairs)])
    gpu_rep = np.stack([_repeats(rng, gpu[..., f], m.noise_of(name), REPEATS, m)
                        for f, name in enumerate(GPU_FIGURES)], axis=2)
    own_rep = _repeats(rng, own, m.noise_of("node"), ALLREDUCE_REPEATS, m)
    pair_rep = _repeats(rng, pair, m.noise_of("pair"), ALLREDUCE_REPEATS, m)
    gpu_val, own_val, pair_val = (np.median(r, axis=-1) for r in (gpu_rep, own_rep, pair_rep))
    nodes = []
    for i, name in enumerate(fleet.nodes):
        gpus = [{"rank": g, "local_rank": g, "index": g, "notes": [], "error": None,
                 "repeats": dict(zip(GPU_FIGURES, gpu_rep[i, g].tolist(), strict=True)),
                 "figures": dict(zip(GPU_FIGURES, gpu_val[i, g].tolist(), strict=True))}
                for g in range(m.per_node)]
        nodes.append({"node": name, "verdict": None, "reasons": [], "error": None, "gpus": gpus,
                      "allreduce": {"ranks": m.per_node, "error": None,
                                    "repeats": own_rep[i].tolist(),
                                    "busbw_gbps": float(own_val[i])}, "pairs": []})
    pairs = [{"round": 1, "nodes": list(p), "ranks": 2 * m.per_node, "error": None,
              "repeats": pair_rep[j].tolist(), "busbw_gbps": float(pair_val[j])}
             for j, p in enumerate(fleet.pairs)]
    return nodes, pairs


def judged(fleet: Drawn, nodes: list[dict[str, Any]], pairs: list[dict[str, Any]],
           stamp: str) -> dict[str, Any]:
    """The screen judged by the real judge (its leaves known), as a screen.json document."""
    verdicts = judge.judge(nodes, pairs, "gpu", EXPECTATIONS, fleet.leaves)  # type: ignore
    return {"mode": "gpu", "gpus_per_node": fleet.model.per_node, "gpu_type": "h200",
            "measured_by": "torch.distributed", "params": dict(job.GPU_PARAMS),
            "stamp": stamp, "nodes": nodes, "pairs": pairs, "named": verdicts["named"],
            "suspects": verdicts["suspects"],
            "resolution": judge.resolution(nodes, pairs, "gpu", fleet.leaves)}  # type: ignore


def against(base_doc: dict[str, Any], doc: dict[str, Any]) -> list[dict[str, Any]]:
    """What the real baseline comparison names of `doc` held to `base_doc` kept as baseline."""
    kept = baseline.of_screen(base_doc)  # type: ignore[arg-type]
    return list(baseline.named_of(baseline.compare(doc, kept, "bench")))  # type: ignore


def matches(fleet: Drawn, fault: Fault, named: dict[str, Any], held: bool) -> bool:
    """Whether `named` is the fault (`held`: as the baseline comparison names it)."""
    node = fleet.nodes[fault.node]
    figure = str(named.get("figure") or "")
    if fault.kind in ("gemm", "hbm"):
        return named["kind"] == "gpu" and named["name"] == f"{node} GPU {fault.gpu}" and \
            figure.startswith(GPU_FIGURES[fault.figure])
    if fault.kind == "nvlink":
        return (named["kind"], named["name"]) == ("node", node) and \
            figure.startswith("all-reduce")
    if fault.kind == "network":
        return (named["kind"], named["name"]) == ("node", node) and figure.startswith(
            "network" if held else "pairs")
    a, b = fleet.pairs[fault.pair]
    want = baseline.link_name((a, b)) if held else f"{a} - {b}"
    return named["kind"] == "link" and named["name"] == want


def stated(doc: dict[str, Any], fault: Fault) -> float:
    """The resolution the screen states for a fault's figure."""
    kind = fault.kind
    want = {"gemm": ("gpu", GPU_FIGURES[fault.figure]), "hbm": ("gpu", "memory_gbps"),
            "nvlink": ("node", "all-reduce busbw_gbps"), "network": ("network", None),
            "link": ("link", None)}[kind]
    for r in doc["resolution"]:
        if r["kind"] == want[0] and (want[1] is None or r["figure"] == want[1]):
            return float(r["resolves"])
    raise LookupError(kind)


def with_model(model: Fleet, **changes: Any) -> Fleet:
    return replace(model, **changes)


def with_fault(fault: Fault, slowdown: float) -> Fault:
    return replace(fault, slowdown=slowdown)
