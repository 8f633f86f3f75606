"""The network between nodes, from the pairs: each node's network and each link, by a fit.

A pair's all-reduce is as slow as the slower of its two NICs and the path between them, so a
pair's figure alone cannot say which. Every node meets several partners (the pair rounds,
llmb.container.pairing: four by default), and one least-squares fit over every pair says it:

    log busbw(i, j) = node_i + node_j + tier(i, j) + link(i, j)

node_i is node i's network (its NIC, its cables, its leaf port), the same in every pair it is
in; tier the path's class where the topology is known (`leaves`: each node's leaf switch; a
pair under one leaf against a pair across the spine; one tier where it is unknown); link the
residual, what this pair has that neither node has with its other partners. A slow NIC
lowers every pair of its node: the fit gives it to that node and to neither partner. A slow
link lowers one pair: its residual. Each link's effect is its residual over 1 - its leverage
h (what the fit without that pair would have predicted for it; the standard error
sigma / sqrt(1 - h)); solved by the normal equations, whose inverse gives the standard
errors and the leverages too), and links found slow are left out and the nodes fitted again, so that
a very slow link does not leak into its nodes.

Nodes are known when the pairs join them into one graph that is not bipartite (three partners
each, in a well-mixed schedule): else, or past FIT_MAX_NODES, `fit` returns None and the
judge keeps its rule of pairs against the pairs that share neither node.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

FIT_MAX_NODES = 2048  # the fit's matrix grows with nodes x pairs
MIN_PARTNERS = 3
ONE_TIER = "one"
DETECT_Z = 1.645  # named with 95 % probability: the resolution's quantile
# n x the variance of 1.4826 MAD over sigma^2 for n normal values (the MAD's asymptotic
# efficiency is 37 %): a spread measured over 512 pairs is known to 5 %
MAD_VARIANCE = 1.3605


def tier_of(a: str, b: str, leaves: Mapping[str, str] | None) -> str:
    """The pair's path: `leaf` (one leaf switch), `spine` (across), `one` (unknown)."""
    if not leaves or a not in leaves or b not in leaves:
        return ONE_TIER
    return "leaf" if leaves[a] == leaves[b] else "spine"


@dataclass(frozen=True)
class Fit:
    """The fit's estimates, all in log units (0.05 is about 5 %)."""

    nodes: tuple[str, ...]
    node: Any  # each node's network less the median node's
    node_se: Any
    link: Any  # each pair's own effect: its residual over 1 - its leverage
    link_se: Any
    tiers: dict[str, float]  # each tier's effect against `leaf` (the first by name)
    sigma: float  # one pair's standard deviation about the fit


def _design(pairs: Sequence[tuple[str, str]], leaves: Mapping[str, str] | None
            ) -> tuple[Any, list[str], list[str]]:
    import numpy as np

    nodes = sorted({n for pair in pairs for n in pair})
    where = {n: i for i, n in enumerate(nodes)}
    tiers = [tier_of(a, b, leaves) for a, b in pairs]
    extra = sorted(set(tiers))[1:]  # against the first by name: leaf, then one, spine
    x = np.zeros((len(pairs), len(nodes) + len(extra)))
    rows = np.arange(len(pairs))
    x[rows, [where[a] for a, _ in pairs]] += 1.0
    x[rows, [where[b] for _, b in pairs]] += 1.0
    for k, tier in enumerate(extra):
        x[[t == tier for t in tiers], len(nodes) + k] = 1.0
    return x, nodes, extra


def robust_sd(values: Any) -> float:
    """1.4826 x the median absolute deviation."""
    import numpy as np

    return float(1.4826 * np.median(np.abs(values - np.median(values)))) if len(values) else 0.0


def fit(pairs: Sequence[tuple[str, str]], busbw: Sequence[float], error: float,
        leaves: Mapping[str, str] | None = None, drop: Sequence[int] = ()) -> Fit | None:
    """The fit over `pairs` (busbw: each pair's figure; error: one pair value's relative
    standard error from its repeats), the pairs in `drop` left out of it (their link effect is
    then their difference from what the fit predicts); None where it cannot tell the nodes
    apart."""
    import numpy as np

    if len(pairs) < 2 or len({n for p in pairs for n in p}) > FIT_MAX_NODES:
        return None
    x, nodes, extra = _design(pairs, leaves)
    y = np.log(np.asarray(busbw, dtype=float))
    used = np.ones(len(pairs), dtype=bool)
    used[list(drop)] = False
    normal = x[used].T @ x[used]
    if used.sum() <= x.shape[1]:
        return None
    try:  # positive definite where the pairs tell every node apart
        factor = np.linalg.cholesky(normal)
    except np.linalg.LinAlgError:
        return None
    if np.diag(factor).min() < 1e-6 * np.diag(factor).max():
        return None
    cov = np.linalg.inv(normal)
    beta = cov @ (x[used].T @ y[used])  # the least-squares solution, by the normal equations
    lever = ((x @ cov) * x).sum(axis=1)
    resid = y - x @ beta
    inside = used & (lever < 1 - 1e-9)
    link = np.where(inside, resid / np.where(inside, 1 - lever, 1.0), resid)
    scale = np.where(inside, 1 / np.sqrt(np.where(inside, 1 - lever, 1.0)),
                     np.sqrt(1 + lever))
    studentized = resid[inside] * np.sqrt(1 / (1 - lever[inside]))
    sigma = max(error, robust_sd(studentized))
    node = beta[:len(nodes)]
    return Fit(tuple(nodes), node - np.median(node), sigma * np.sqrt(np.diag(cov)[:len(nodes)]),
               link, sigma * scale,
               {tier: float(beta[len(nodes) + k]) for k, tier in enumerate(extra)}, sigma)


def partners(pairs: Sequence[tuple[str, str]]) -> int:
    """The fewest partners a node of these pairs meets."""
    met: dict[str, set[str]] = {}
    for a, b in pairs:
        met.setdefault(a, set()).add(b)
        met.setdefault(b, set()).add(a)
    return min((len(p) for p in met.values()), default=0)


def fits(pairs: Sequence[tuple[str, str]]) -> bool:
    """Whether these pairs give every node enough partners for the fit."""
    nodes = {n for p in pairs for n in p}
    return partners(pairs) >= MIN_PARTNERS and len(nodes) <= FIT_MAX_NODES


def resolves(threshold: float, margin: float, spread: float, error: float, count: int
             ) -> float:
    """The slowdown (log units) named with 95 % probability by a floor `threshold` below the
    median (`margin`: the margin's part of it): the element's own persistent part (`spread`)
    and its noise (`error`) both move where it falls, both added; and where the floor is K
    spreads rather than the margin, the floor moves too, from one screen to the next, by the
    precision of a spread measured over `count` values (sqrt(MAD_VARIANCE / count) of it), in
    the screen that states the resolution and in the one that is held to it, both added."""
    moves = 0.0 if threshold <= margin else \
        threshold * math.sqrt(2 * MAD_VARIANCE / max(count, 1))
    return threshold + DETECT_Z * math.sqrt(spread ** 2 + error ** 2 + moves ** 2)


def floors(effects: Any, errors: Any, margin: float, k: float, widen: Any
           ) -> tuple[Any, float, float]:
    """(each effect's floor, the effects' median, their spread) in log units: below the
    median by the margin and by K x the larger of the spread (1.4826 MAD) and the effect's
    own standard error, widened for the median of n values (`widen`: precision.widened)."""
    import numpy as np

    median = float(np.median(effects))
    spread = robust_sd(effects)
    sigma = np.array([widen(max(spread, float(e)), len(effects) - 1) for e in errors])
    return median - np.maximum(math.log(1 / (1 - margin)), k * sigma), median, spread
