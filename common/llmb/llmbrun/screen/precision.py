"""Precision from repeats: how a figure that the screen measured several times is judged
against its peers, and the smallest slowdown the screen could have seen.

Every figure (each GPU's matrix multiply and memory bandwidth, each node's all-reduce, each
pair's all-reduce) is measured `repeats` times in the same job (llmb.llmbrun.screen.job's
plan). From the repeats:

- the value: their median (`value_of`; the tasks' own figure, llmb.container.probe.value_of,
  is replaced by it where the repeats are kept): fewer than half the repeats disturbed
  (another job's traffic, a clock ramping up, a thermal swing; about 1 repeat in 50 on a
  real fleet) do not move it, where a mean less the lowest and the highest resists one only:
  of 2048 GPUs x 3 figures x 5 repeats, some two dozen have two disturbed repeats;
- the noise: the standard deviation of one repeat relative to its figure, pooled over every
  element that has the figure (the median of their standard deviations, made unbiased for a
  normal distribution): one element has few repeats, a screen has many elements, and a
  median is not moved by the few that flap;
- the standard error of a value: noise x sqrt(pi / 2n) for n repeats (a median's; 1 / sqrt(n)
  below three, where it is their mean).

A value is below its peers (their median m) when it is below both

    m x (1 - margin)          a slowdown that matters: MARGIN[mode]
    m x (1 - K x sigma)       more than the measured noise allows

sigma is the larger of the peers' own spread (1.4826 x their median absolute deviation,
relative to m: what really differs between elements, noise included) and the value's
standard error, widened by the uncertainty of a median of few peers (x sqrt(1 + pi/2n) for
n peers, x sqrt(1 + 1/n) for one or two); K is the normal quantile that keeps a whole healthy
screen free of a false suspect with 99 % probability when N elements have the figure, shared
among the FIGURES a screen judges, z(1 - 0.01/(6N)), and at least 3.5 (Iglewicz and
Hoaglin's outlier cut-off, the rule without repeats). Why both: the noise alone would name
a half-percent difference on a quiet machine (real, but no acceptance fails for it); the
margin alone would name noise where it is larger than the margin.

The resolution of a figure is the slowdown that would be named with 95 % probability:
the threshold above plus 1.645 sigma, sigma here the peers' spread and the standard error
added (the element's own persistent place among its peers and its noise both move it)
(for a node's network, every one of its pairs must be
named: the quantile of 0.95 ** (1 / pairs)).

A figure without repeats (a screen written before repeats, or nccl-tests without its cycles
option) has no measured noise: it keeps the fixed tolerance (llmb.llmbrun.screen.judge's
PEER_TOLERANCE) and no resolution is claimed for it.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass

MARGIN = {"gpu": 0.03, "cpu": 0.30}
FAMILY_ALPHA = 0.01  # a healthy screen names nothing falsely with 99 % probability
FIGURES = 6  # judged in a screen, among which FAMILY_ALPHA is shared: 3 per GPU, the node's
# own all-reduce, its network and the links
MIN_K = 3.5
DETECT = 0.95  # the probability at which the resolution is stated


def value_of(repeats: Sequence[float]) -> float:
    """One figure from its repeats: their median."""
    return float(statistics.median(float(r) for r in repeats))


def error_factor(repeats: int) -> float:
    """A value's standard error over one repeat's: sqrt(pi / 2n) for the median of n >= 3
    repeats (a normal distribution's, large n; a little above it for few), 1 / sqrt(n) below
    (the median of two is their mean)."""
    n = max(repeats, 1)
    return math.sqrt((math.pi / 2 if n >= 3 else 1.0) / n)


def _sd_median_factor(dof: int) -> float:
    """The median of a sample standard deviation over the true one, for a normal
    distribution: sqrt(median(chi2_dof) / dof), by Wilson and Hilferty's approximation."""
    return float((1 - 2 / (9 * dof)) ** 1.5)


def pooled_noise(series: Sequence[Sequence[float] | None]) -> float | None:
    """The relative standard deviation of one repeat, pooled over the elements (None when no
    element has two repeats)."""
    import numpy as np

    by_count: dict[int, list[Sequence[float]]] = {}
    for repeats in series:
        if repeats is not None and len(repeats) >= 2:
            by_count.setdefault(len(repeats), []).append(repeats)
    spreads = []
    for count, rows in by_count.items():
        data = np.asarray(rows, dtype=float)
        means = data.mean(axis=1)
        good = means > 0
        spreads.append(data[good].std(axis=1, ddof=1) / means[good]
                       / _sd_median_factor(count - 1))
    joined = np.concatenate(spreads) if spreads else np.empty(0)
    return float(np.median(joined)) if joined.size else None


def k_for(count: int) -> float:
    """How many sigmas below the median a value must be, for `count` values compared."""
    return max(MIN_K, statistics.NormalDist().inv_cdf(
        1 - FAMILY_ALPHA / FIGURES / max(count, 1)))


def widened(sigma: float, peers: int) -> float:
    """sigma, with the uncertainty of the peers' median added: a median of n values has a
    variance of pi/2n that of one value (1/n for one or two, where it is their mean)."""
    n = max(peers, 1)
    return sigma * math.sqrt(1 + (1 if n <= 2 else math.pi / 2) / n)


@dataclass(frozen=True)
class Rule:
    """How the values of one figure are compared with their peers: the margin, K, and each
    value's relative standard error (None: no repeats, the fixed tolerance)."""

    margin: float
    k: float
    errors: tuple[float, ...] | None
    noise: float | None
    repeats: int


def rule_for(series: Sequence[Sequence[float] | None], mode: str, tolerance: float) -> Rule:
    """The rule for one figure's values, from their repeats (series[i]: value i's repeats,
    None where it has none). Repeats on every value: the margin and K with the noise they
    measured; otherwise the fixed tolerance and K without noise."""
    counts = [len(r) if r else 0 for r in series]
    noise = pooled_noise(series) if series and min(counts) >= 2 else None
    if noise is None:
        return Rule(tolerance, MIN_K, None, None, max(counts, default=0))
    errors = tuple(noise * error_factor(n) for n in counts)
    typical = Counter(counts).most_common(1)[0][0]
    return Rule(MARGIN[mode], k_for(len(series)), errors, noise, typical)


def reference(others: Sequence[float]) -> tuple[float, float]:
    """(median, sigma) of the peers: sigma = 1.4826 x their median absolute deviation."""
    import numpy as np

    data = np.asarray(others, dtype=float)
    median = float(np.median(data))
    return median, 1.4826 * float(np.median(np.abs(data - median)))


def floor_from(median: float, sigma: float, peers: int, margin: float, k: float,
               error: float | None) -> float:
    """The floor a value is held to: below both the margin and K sigmas. Without a standard
    error (no repeats) sigma is the peers' spread alone, as it always was."""
    if error is None:
        return min(median * (1 - margin), median - k * sigma)
    spread = sigma / median if median > 0 else 0.0
    return median * (1 - max(margin, k * widened(max(spread, error), peers)))


@dataclass(frozen=True)
class Resolution:
    """What a screen could see of one figure: all relative (0.05 is 5 %)."""

    figure: str
    kind: str  # gpu | node | link | network
    elements: int
    repeats: int
    noise: float  # one repeat's standard deviation
    spread: float  # the peers' spread (1.4826 MAD / median)
    k: float
    margin: float
    threshold: float  # named below median x (1 - threshold)
    resolves: float  # named with 95 % probability from this slowdown on

    def as_dict(self) -> dict[str, float | int | str]:
        return {k: round(v, 5) if isinstance(v, float) else v for k, v in asdict(self).items()}


def resolution(figure: str, kind: str, values: Sequence[float], rule: Rule,
               peers: Sequence[Sequence[int]], must_name: int = 1) -> Resolution | None:
    """The resolution of a figure whose values were judged by `rule` against `peers`
    (peers[i]: the indexes of value i's peers); None without repeats or peers. The spread
    is the median of what each value's peers show (a slow value does not widen its own
    peers' spread). `must_name`: how many of its values must be named at once (a node's
    network: every one of its pairs)."""
    if rule.errors is None or rule.noise is None or not any(peers):
        return None
    spreads, counts = [], []
    seen: dict[int, float] = {}  # a list shared by every value is measured once
    for chosen in (p for p in peers if p):
        if id(chosen) not in seen:
            median, sigma = reference([values[j] for j in chosen])
            seen[id(chosen)] = sigma / median if median > 0 else 0.0
        spreads.append(seen[id(chosen)])
        counts.append(len(chosen))
    spread = statistics.median(spreads)
    error = statistics.median(rule.errors)
    sigma_rel = widened(max(spread, error), int(statistics.median(counts)))
    threshold = max(rule.margin, rule.k * sigma_rel)
    z = statistics.NormalDist().inv_cdf(DETECT ** (1 / max(must_name, 1)))
    return Resolution(figure, kind, len(values), rule.repeats, rule.noise, spread, rule.k,
                      rule.margin, threshold, threshold + z * math.hypot(spread, error))
