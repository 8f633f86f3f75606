"""The screen's verdicts: each figure against its expected figure and against its peers.

A figure is named when it is below a floor:
- expected (GPU mode only): gpus.yaml's figure for the GPU type x (1 - its tolerance)
  (llmb.recipes.screenfacts.Expectation); CPU figures are never held to a GPU's expectations;
- peers: the figures of the same kind from the rest of the screen, by robust statistics: the
  median m of the others and sigma = 1.4826 x their median absolute deviation (the normal
  distribution's standard deviation, estimated so that a minority of bad values cannot move
  it). Where the figure was measured in repeats, it is below its peers when it is below both
  m x (1 - a margin that matters) and m x (1 - K sigma) with sigma the noise the repeats
  measured (llmb.llmbrun.screen.precision says how, and why both). Without repeats the fixed
  rule: below both m x (1 - PEER_TOLERANCE[mode]) and m - PEER_K x sigma (PEER_K = 3.5 is
  Iglewicz and Hoaglin's modified z-score cut-off for outliers). Each figure is
  compared with the others, not with a median it is part of ("leave one out"), so that one bad
  node among four still stands out; above LEAVE_ONE_OUT figures it makes no difference and
  the median of all is used.

Who the peers are: every GPU screened, for a GPU's figures; every node, for a node's
all-reduce; for a pair of nodes, the pairs that share neither of its nodes (both of a slow
node's pairs are slow, so its partners' other pairs are the fair comparison), or every other
pair where no pair is disjoint from it (three nodes); above LEAVE_ONE_OUT pairs, all of them.

Verdicts: a GPU is `slow` below a floor and `fail` when it could not be measured. A node is
`fail` when it, or one of its GPUs, could not be measured, `slow` when one of its GPUs or its
own all-reduce is slow, or when every one of its pairs (two at least) is slow: a node slow with
every partner is slow itself. A pair that is slow while both its nodes are fine with their
other partners names that link: it is in `named`, neither node is a suspect (leaving one out
would be a guess). `suspects` lists every node whose verdict is slow or fail.

numpy is imported inside the functions.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from llmb.llmbrun.screen import network, precision, stragglers
from llmb.llmbrun.screen.document import (
    Allreduce,
    Named,
    Pair,
    Resolution,
    ScreenGpu,
    ScreenNode,
    Verdicts,
)
from llmb.recipes.screenfacts import Expectation

PEER_K = 3.5
MAD_TO_SIGMA = 1.4826
PEER_TOLERANCE = {"gpu": 0.10, "cpu": 0.65}
LEAVE_ONE_OUT = 64
NODE_FIGURE: Final = "busbw_gbps"
NODE_EXPECTATION = "nvlink_busbw_gbps"


@dataclass(frozen=True)
class Floor:
    """The floor one figure is held to, and where it comes from."""

    value: float
    peers_median: float | None
    expected: float | None
    why: str


def robust(values: Sequence[float]) -> tuple[float, float]:
    """(median, sigma) of values: sigma = 1.4826 x the median absolute deviation."""
    import numpy as np

    data = np.asarray(values, dtype=float)
    median = float(np.median(data))
    return median, MAD_TO_SIGMA * float(np.median(np.abs(data - median)))


def peer_floor(others: Sequence[float], tolerance: float, k: float = PEER_K,
               error: float | None = None) -> tuple[float, float] | None:
    """(floor, median) from the peers' figures, None without peers; `error`: the value's
    relative standard error from its repeats (llmb.llmbrun.screen.precision)."""
    if not others:
        return None
    median, sigma = robust(others)
    return precision.floor_from(median, sigma, len(others), tolerance, k, error), median


def peer_floors(values: Sequence[float], peers: Sequence[Sequence[int]] | None,
                tolerance: float, k: float = PEER_K,
                errors: Sequence[float] | None = None) -> list[tuple[float, float] | None]:
    """The peer floor of each value; peers[i] are the indexes of value i's peers (default:
    every other value, or all of them above LEAVE_ONE_OUT values); errors[i] value i's
    relative standard error (None: no repeats)."""
    error = (lambda i: errors[i]) if errors is not None else (lambda i: None)
    if peers is None and len(values) > LEAVE_ONE_OUT:
        median, sigma = robust(values)
        return [(precision.floor_from(median, sigma, len(values), tolerance, k, error(i)),
                 median) for i in range(len(values))]
    out = []
    for i in range(len(values)):
        chosen = peers[i] if peers is not None else [j for j in range(len(values)) if j != i]
        out.append(peer_floor([values[j] for j in chosen], tolerance, k, error(i)))
    return out


def rule_of(series: Sequence[Sequence[float] | None], mode: str) -> precision.Rule:
    """How these values are compared: with the noise their repeats measured, or the fixed
    tolerance of the mode where they have none."""
    return precision.rule_for(series, mode, PEER_TOLERANCE[mode])


def judged_floors(values: Sequence[float], series: Sequence[Sequence[float] | None],
                  mode: str, peers: Sequence[Sequence[int]] | None = None
                  ) -> list[tuple[float, float] | None]:
    """Each value's peer floor by the rule its repeats give."""
    rule = rule_of(series, mode)
    return peer_floors(values, peers, rule.margin, rule.k, rule.errors)


def floor_of(value: float, peer: tuple[float, float] | None,
             expectation: Expectation | None) -> Floor | None:
    """The floor `value` falls below (the expectation's first), or None."""
    median = peer[1] if peer else None
    if expectation is not None and value < expectation.floor:
        return Floor(expectation.floor, median, expectation.expected,
                     f"below {expectation.expected:g} less {expectation.tolerance:.0%} "
                     f"({expectation.source})")
    if peer is not None and value < peer[0]:
        return Floor(peer[0], median, expectation.expected if expectation else None,
                     "far below its peers")
    return None


def repeats_of(gpu: ScreenGpu, figure: str) -> Sequence[float] | None:
    return gpu.get("repeats", {}).get(figure)


def busbw(entry: Allreduce) -> float:
    """An all-reduce's bus bandwidth (0 where it was not measured: the judge reads it only
    where it was)."""
    return float(entry.get(NODE_FIGURE) or 0.0)


# --- the screen's verdicts --------------------------------------------------------------------

def _named(kind: str, name: str, figure: str, value: float, floor: Floor) -> Named:
    return Named(kind=kind, name=name, figure=figure, value=value, floor=floor.value,
                 expected=floor.expected, peers_median=floor.peers_median, why=floor.why)


def judge_gpus(nodes: list[ScreenNode], mode: str,
               expectations: Mapping[str, Expectation]) -> list[Named]:
    """Each GPU's figures against the expectations and the other GPUs; sets each GPU's
    verdict and reasons; returns what it named."""
    gpus = [(node["node"], gpu) for node in nodes for gpu in node["gpus"]]
    figures = sorted({f for _, gpu in gpus for f in gpu["figures"]})
    named = []
    for _, gpu in gpus:
        gpu.setdefault("reasons", [])
        gpu["verdict"] = "fail" if gpu.get("error") else "pass"
    for figure in figures:
        having = [(n, g) for n, g in gpus if g["figures"].get(figure) is not None]
        values = [float(g["figures"][figure]) for _, g in having]
        floors = judged_floors(values, [repeats_of(g, figure) for _, g in having], mode)
        expectation = expectations.get(figure) if mode == "gpu" else None
        for (node, gpu), value, peer in zip(having, values, floors, strict=True):
            floor = floor_of(value, peer, expectation)
            if floor is not None:
                what = f"{node} GPU {gpu['local_rank']}"
                named.append(_named("gpu", what, figure, value, floor))
                gpu["reasons"].append(f"{figure} {value:.4g} < {floor.value:.4g}: {floor.why}")
                if gpu["verdict"] == "pass":
                    gpu["verdict"] = "slow"
    return named


def judge_nodes(nodes: list[ScreenNode], mode: str,
                expectations: Mapping[str, Expectation]) -> list[Named]:
    """Each node's all-reduce across its GPUs against the NVLink expectation (GPU mode) and
    the other nodes; sets allreduce.verdict; returns what it named."""
    own = [(n["node"], a) for n in nodes if (a := n.get("allreduce")) is not None]
    for _, a in own:
        a["verdict"] = "fail" if a.get("error") else "pass"
    having = [(name, a) for name, a in own if a.get(NODE_FIGURE) is not None]
    values = [busbw(a) for _, a in having]
    expectation = expectations.get(NODE_EXPECTATION) if mode == "gpu" else None
    named = []
    floors = judged_floors(values, [a.get("repeats") for _, a in having], mode)
    for (name, a), value, peer in zip(having, values, floors, strict=True):
        many = (a.get("ranks") or 0) > 1
        floor = floor_of(value, peer, expectation if many else None)
        if floor is not None:
            a["verdict"] = "slow"
            named.append(_named("node", name, f"all-reduce {NODE_FIGURE}", value, floor))
    return named


def disjoint_peers(pairs: Sequence[Pair]) -> list[list[int]]:
    """For each pair, the pairs that share neither of its nodes; every other pair where
    there is none."""
    out = []
    for i, pair in enumerate(pairs):
        mine = set(pair["nodes"])
        others = [j for j in range(len(pairs)) if j != i]
        apart = [j for j in others if not mine & set(pairs[j]["nodes"])]
        out.append(apart or others)
    return out


def judge_pairs(pairs: list[Pair], mode: str) -> list[Pair]:
    """Each pair's all-reduce against the pairs that share none of its nodes; sets each pair's
    verdict; returns what it named (links are named by judge(), once the nodes are known)."""
    for pair in pairs:
        pair["verdict"] = "fail" if pair.get("error") or pair.get(NODE_FIGURE) is None \
            else "pass"
    measured = [p for p in pairs if p["verdict"] == "pass"]
    values = [busbw(p) for p in measured]
    # above LEAVE_ONE_OUT pairs the few that share a node cannot move the median of all
    peers = disjoint_peers(measured) if len(measured) <= LEAVE_ONE_OUT else None
    floors = judged_floors(values, [p.get("repeats") for p in measured], mode, peers)
    for pair, value, peer in zip(measured, values, floors, strict=True):
        floor = floor_of(value, peer, None)
        if floor is not None:
            pair["verdict"] = "slow"
            pair["floor"] = floor.value
            pair["peers_median"] = floor.peers_median
    return measured


def node_verdict(node: ScreenNode, pairs: Sequence[Pair], network_slow: bool | None = None
                 ) -> None:
    """A node's verdict from its GPUs, its all-reduce and its pairs (`network_slow`: what the
    fit said of its network; None: slow when every one of its pairs is); its reasons."""
    reasons = [str(node["error"])] if node.get("error") else []
    gpu_verdicts = [g.get("verdict") for g in node["gpus"]]
    allreduce = node.get("allreduce") or Allreduce()
    mine = [p for p in pairs if node["node"] in p["nodes"]]
    all_pairs_slow = len(mine) >= 2 and all(p["verdict"] != "pass" for p in mine) \
        if network_slow is None else network_slow
    if node.get("error") or "fail" in gpu_verdicts or allreduce.get("verdict") == "fail":
        verdict = "fail"
    elif "slow" in gpu_verdicts or allreduce.get("verdict") == "slow" or all_pairs_slow:
        verdict = "slow"
    else:
        verdict = "pass"
    for g in node["gpus"]:
        reasons += [f"GPU {g['local_rank']}: {r}" for r in g.get("reasons") or []]
        if g.get("error") and not node.get("error"):
            reasons.append(f"GPU {g['local_rank']}: {g['error']}")
    if allreduce.get("verdict") in ("slow", "fail"):
        reasons.append("its own all-reduce " + ("is slow" if allreduce["verdict"] == "slow"
                                                 else "failed")
                       + (f": {allreduce['error']}" if allreduce.get("error") else ""))
    if all_pairs_slow:
        reasons.append(("its network is slow, fitted over its pairs with "
                        if network_slow else "slow with every partner (")
                       + f"{', '.join(_partner(p, node) for p in mine)}"
                       + (")" if network_slow is None else ""))
    node["verdict"], node["reasons"] = verdict, reasons


def _partner(pair: Pair, node: ScreenNode) -> str:
    return next(n for n in pair["nodes"] if n != node["node"])


def _held(pair: Pair, why: str) -> Floor:
    """The floor a slow pair was held to (judge_pairs set it)."""
    return Floor(float(pair.get("floor") or 0.0), pair.get("peers_median"), None, why)


def named_nodes(nodes: Sequence[ScreenNode], pairs: Sequence[Pair],
                named: Sequence[Named]) -> list[Named]:
    """The nodes not measured, and those slow with every partner (its best pair against
    that pair's floor), unless one of their figures is named already."""
    out = []
    for node in nodes:
        mine = [p for p in pairs if node["node"] in p["nodes"] and p["verdict"] == "slow"]
        if node["verdict"] == "fail":
            out.append(Named(kind="node", name=node["node"], figure=None, value=None,
                             floor=None, expected=None, peers_median=None,
                             why="; ".join(node["reasons"]) or "not measured"))
        elif node["verdict"] == "slow" and mine and not any(
                n["name"] == node["node"] or n["name"].startswith(f"{node['node']} GPU ")
                for n in named):
            best = max(mine, key=busbw)
            out.append(_named("node", node["node"], f"pairs {NODE_FIGURE}", busbw(best), _held(
                best, "slow with every partner: its best pair is far below the pairs that "
                "share neither node")))
    return out


def judge(nodes: list[ScreenNode], pairs: list[Pair], mode: str,
          expectations: Mapping[str, Expectation],
          leaves: Mapping[str, str] | None = None) -> Verdicts:
    """Verdicts for every GPU, node and pair (set in place); `named` (what is below a floor,
    with its figure, floor, expectation and the peers' median), `suspects` and `stragglers`
    (the slowest of each figure). `leaves`: each node's leaf switch, where it is known."""
    named = judge_gpus(nodes, mode, expectations)
    named += judge_nodes(nodes, mode, expectations)
    net = judge_network(pairs, mode, leaves)
    if net is None:
        named += _judge_pairs_apart(nodes, pairs, mode)
    else:
        for node in nodes:
            node_verdict(node, pairs, node["node"] in net.nodes)
        named += net.links + list(net.nodes.values())
    suspects = [n["node"] for n in nodes if n["verdict"] != "pass"]
    return {"named": named, "suspects": suspects,
            "stragglers": stragglers.of(nodes, pairs, net.network if net else None,
                                        net.link_values if net else None)}


def _judge_pairs_apart(nodes: list[ScreenNode], pairs: list[Pair], mode: str) -> list[Named]:
    """Without the fit (too few partners): each pair against the pairs that share neither of
    its nodes; a node slow with every partner, a link slow where both nodes are fine."""
    named: list[Named] = []
    judge_pairs(pairs, mode)
    for node in nodes:
        node_verdict(node, pairs)
    fine = {n["node"] for n in nodes if n["verdict"] == "pass"}
    for pair in pairs:
        pair["link"] = pair["verdict"] == "slow" and set(pair["nodes"]) <= fine
        if pair["link"]:
            named.append(_named("link", " - ".join(pair["nodes"]), f"all-reduce {NODE_FIGURE}",
                                busbw(pair), _held(
                                    pair, "far below the pairs that share neither node, while "
                                    "both nodes are fine with their other partners")))
    return named + named_nodes(nodes, pairs, named)


@dataclass(frozen=True)
class NetworkVerdicts:
    """What the fit named: the nodes whose network is slow, the slow links; and each node's
    network and each pair's link as figures (GB/s: the median pair's x the fitted effect)."""

    nodes: dict[str, Named]
    links: list[Named]
    network: dict[str, float] = field(default_factory=dict)
    link_values: dict[str, float] = field(default_factory=dict)


def _network_fit(pairs: list[Pair], mode: str, leaves: Mapping[str, str] | None
                 ) -> tuple[list[Pair], network.Fit, precision.Rule] | None:
    """The measured pairs, their fit (slow links left out of it) and their rule; None where
    the fit cannot tell the nodes apart."""
    measured = [p for p in pairs if not p.get("error") and p.get(NODE_FIGURE) is not None]
    keys = [(p["nodes"][0], p["nodes"][-1]) for p in measured]
    if not network.fits(keys):
        return None
    rule = rule_of([p.get("repeats") for p in measured], mode)
    error = statistics.median(rule.errors) if rule.errors else 0.0
    values = [busbw(p) for p in measured]
    first = network.fit(keys, values, error, leaves)
    if first is None:
        return None
    k = precision.k_for(len(measured)) if rule.errors else precision.MIN_K
    low, _, _ = network.floors(first.link, first.link_se, rule.margin, k, precision.widened)
    dropped = [i for i in range(len(measured)) if first.link[i] < low[i]]
    again = network.fit(keys, values, error, leaves, dropped) if dropped else first
    return measured, again or first, rule


def judge_network(pairs: list[Pair], mode: str, leaves: Mapping[str, str] | None = None
                  ) -> NetworkVerdicts | None:
    """Each node's network and each link from the fit over every pair (llmb.llmbrun.screen.
    network), each against the others: sets the pairs' verdicts; None where there is no fit
    (the judge then compares pairs with the pairs that share neither node)."""
    got = _network_fit(pairs, mode, leaves)
    if got is None:
        return None
    for pair in pairs:
        pair["verdict"] = "fail" if pair.get("error") or pair.get(NODE_FIGURE) is None \
            else "pass"
        pair["link"] = False
    measured, fitted, rule = got
    scale = statistics.median(busbw(p) for p in measured)
    k_nodes = precision.k_for(len(fitted.nodes)) if rule.errors else precision.MIN_K
    k_links = precision.k_for(len(measured)) if rule.errors else precision.MIN_K
    node_low, _, _ = network.floors(fitted.node, fitted.node_se, rule.margin, k_nodes,
                                    precision.widened)
    link_low, link_mid, _ = network.floors(fitted.link, fitted.link_se, rule.margin, k_links,
                                           precision.widened)
    slow: dict[str, Named] = {}
    for i, name in enumerate(fitted.nodes):
        if fitted.node[i] < node_low[i]:
            slow[name] = _named("node", name, f"pairs {NODE_FIGURE}",
                                scale * math.exp(fitted.node[i]), Floor(
                                    scale * math.exp(node_low[i]), scale, None,
                                    "its network, fitted over every pair it is in, is far "
                                    "below the other nodes'"))
    links = []
    for i, pair in enumerate(measured):
        predicted = busbw(pair) * math.exp(-fitted.link[i])
        if fitted.link[i] < link_low[i]:
            pair["verdict"], pair["link"] = "slow", True
            pair["floor"] = predicted * math.exp(link_low[i])
            pair["peers_median"] = predicted * math.exp(link_mid)
            links.append(_named("link", " - ".join(pair["nodes"]), f"all-reduce {NODE_FIGURE}",
                                busbw(pair), _held(pair, "far below what the fit over every "
                                                   "pair gives its two nodes")))
        elif set(pair["nodes"]) & set(slow):
            pair["verdict"] = "slow"
    return NetworkVerdicts(slow, links, {
        n: scale * math.exp(fitted.node[i]) for i, n in enumerate(fitted.nodes)}, {
        " - ".join(p["nodes"]): scale * math.exp(fitted.link[i] - link_mid)
        for i, p in enumerate(measured)})


def mark(nodes: Sequence[ScreenNode], named: Sequence[Named], verdict: str = "slow"
         ) -> list[str]:
    """What a later check named (a node, or a GPU "<node> GPU <i>") made that node's verdict
    (a passing node's) and one of its reasons; the suspects again."""
    by_name = {n["node"]: n for n in nodes}
    for entry in named:
        node = by_name.get(str(entry["name"]).split(" GPU ")[0])
        if node is None:
            continue
        node["reasons"] = [*node.get("reasons", []),
                           f"{entry['name']}: {entry.get('figure')}: {entry['why']}"]
        if node["verdict"] == "pass":
            node["verdict"] = verdict
    return [n["node"] for n in nodes if n["verdict"] != "pass"]


def fitted_resolution(pairs: list[Pair], mode: str, leaves: Mapping[str, str] | None
                      ) -> list[precision.Resolution] | None:
    """What the fit resolves of a link and of a node's network (None without a fit)."""
    got = _network_fit(pairs, mode, leaves)
    if got is None or (noise := got[2].noise) is None:
        return None
    measured, fitted, rule = got
    out = []
    for kind, effects, errors, count in (
            ("link", fitted.link, fitted.link_se, len(measured)),
            ("network", fitted.node, fitted.node_se, len(fitted.nodes))):
        spread = network.robust_sd(effects)
        # the 95th percentile of the standard errors: a link's depends on its leverage, and
        # the resolution is claimed of every link, not of a typical one
        error = float(sorted(errors)[int(0.95 * (len(errors) - 1))])
        k = precision.k_for(count)
        margin = math.log(1 / (1 - rule.margin))
        threshold = max(margin, k * precision.widened(max(spread, error), count - 1))
        resolves = network.resolves(threshold, margin, spread, error, count)
        out.append(precision.Resolution(
            f"pairs {NODE_FIGURE}", kind, count, rule.repeats, noise, spread, k,
            rule.margin, 1 - math.exp(-threshold), 1 - math.exp(-resolves)))
    return out


def resolution(nodes: Sequence[ScreenNode], pairs: list[Pair], mode: str,
               leaves: Mapping[str, str] | None = None) -> list[Resolution]:
    """What this screen could have seen of each figure (llmb.llmbrun.screen.precision's
    Resolution), for the figures measured in repeats, against the peers the judge used."""
    out = []
    gpus = [g for n in nodes for g in n["gpus"] if not g.get("error")]
    for figure in sorted({f for g in gpus for f in g["figures"]}):
        having = [g for g in gpus if g["figures"].get(figure) is not None]
        out.append(precision.resolution(
            figure, "gpu", [float(g["figures"][figure]) for g in having],
            rule_of([repeats_of(g, figure) for g in having], mode), others(len(having))))
    own = [a for n in nodes if (a := n.get("allreduce")) is not None
           and a.get(NODE_FIGURE) is not None]
    out.append(precision.resolution(f"all-reduce {NODE_FIGURE}", "node",
                                    [busbw(a) for a in own],
                                    rule_of([a.get("repeats") for a in own], mode),
                                    others(len(own))))
    if (fitted := fitted_resolution(pairs, mode, leaves)) is not None:
        return [r.as_dict() for r in out if r is not None] + [r.as_dict() for r in fitted]
    measured = [p for p in pairs if p.get(NODE_FIGURE) is not None and not p.get("error")]
    values = [busbw(p) for p in measured]
    rule = rule_of([p.get("repeats") for p in measured], mode)
    peers = disjoint_peers(measured) if len(measured) <= LEAVE_ONE_OUT else \
        others(len(measured))
    out.append(precision.resolution(f"pairs {NODE_FIGURE}", "link", values, rule, peers))
    per_node = max((sum(n["node"] in p["nodes"] for p in measured) for n in nodes), default=0)
    out.append(precision.resolution(f"pairs {NODE_FIGURE}", "network", values, rule, peers,
                                    must_name=per_node))
    return [r.as_dict() for r in out if r is not None]


def others(count: int) -> list[list[int]]:
    """Each value's peers when every other value is one (all of them, past LEAVE_ONE_OUT:
    the same median)."""
    if count > LEAVE_ONE_OUT:
        every = list(range(count))
        return [every] * count
    return [[j for j in range(count) if j != i] for i in range(count)]
