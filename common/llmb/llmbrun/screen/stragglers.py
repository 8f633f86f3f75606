"""The natural stragglers: the slowest elements of each figure, named or not.

A healthy fleet is not uniform: GPUs of one type differ by a percent or two for good (power
and clock management), some by more. The judge names what is a statistical outlier; an
acceptance asks something else: whether the slowest element is within the tolerance (an
element ACCEPTANCE below the median fails an acceptance: in a synchronous job the slowest
GPU, node or link sets everyone's pace). So each figure's SLOWEST elements are listed with
their distance from the figure's median, and whether it is beyond ACCEPTANCE, even where the
judge named none of them.

Figures: each GPU figure (per GPU), each node's own all-reduce, each node's network (the fit
over its pairs where there is one, else the mean of its pairs) and each link (the pair as
the fit has it against its nodes', else the pair's own figure).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence

from llmb.llmbrun.screen.document import Pair, ScreenNode, Straggler

ACCEPTANCE = 0.05  # an element this much below its figure's median fails an acceptance
SLOWEST = 3  # listed per figure


def slowest(figure: str, kind: str, values: Mapping[str, float]) -> list[Straggler]:
    """The SLOWEST of one figure's elements, against the median of all."""
    if len(values) < 2:
        return []
    median = statistics.median(values.values())
    if median <= 0:
        return []
    out = []
    for element, value in sorted(values.items(), key=lambda kv: kv[1])[:SLOWEST]:
        below = 1 - value / median
        out.append(Straggler(figure=figure, kind=kind, element=element, value=value,
                             median=median, below=round(below, 5),
                             beyond=below > ACCEPTANCE))
    return out


def of(nodes: Sequence[ScreenNode], pairs: Sequence[Pair],
       network: Mapping[str, float] | None, links: Mapping[str, float] | None
       ) -> list[Straggler]:
    """Every figure's slowest elements (network, links: the fit's, where there is one)."""
    gpus: dict[str, dict[str, float]] = {}
    own: dict[str, float] = {}
    for node in nodes:
        for gpu in node["gpus"]:
            if gpu.get("error"):
                continue
            for figure, value in gpu["figures"].items():
                gpus.setdefault(figure, {})[f"{node['node']} GPU {gpu['local_rank']}"] = \
                    float(value)
        mine = node.get("allreduce") or {}
        if mine.get("busbw_gbps") is not None and not mine.get("error"):
            own[node["node"]] = float(mine["busbw_gbps"] or 0.0)
    measured = [p for p in pairs if p.get("busbw_gbps") is not None and not p.get("error")]
    if network is None:
        per_node: dict[str, list[float]] = {}
        for pair in measured:
            for name in pair["nodes"]:
                per_node.setdefault(name, []).append(float(pair["busbw_gbps"] or 0.0))
        network = {n: statistics.fmean(v) for n, v in per_node.items()}
    if links is None:
        links = {" - ".join(p["nodes"]): float(p["busbw_gbps"] or 0.0) for p in measured}
    out = []
    for figure, values in sorted(gpus.items()):
        out += slowest(figure, "gpu", values)
    out += slowest("all-reduce busbw_gbps", "node", own)
    out += slowest("network busbw_gbps", "network", network)
    out += slowest("pairs busbw_gbps", "link", links)
    return out
