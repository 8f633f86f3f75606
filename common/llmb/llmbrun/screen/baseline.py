"""The cluster's own baseline: a healthy screen's figures, kept, and every later screen held to it.

Peers cannot see a cluster that is slow all over (clocks capped, NCCL fallen back to sockets,
a driver or firmware change): nothing stands out. So `llmb-run screen --save-baseline` keeps a
healthy screen's figures in $LLMB_INSTALL/screens/baseline.json (per figure, per element:
each GPU's figures, each node's own all-reduce, each node's network (the mean of its pairs),
the all-nodes all-reduce; each value with its standard error, from the noise its repeats
showed), with what measured them: GPU type, mode, tool, image, driver, NCCL and PyTorch
versions, the plan's parameters. Every later screen is compared with it (`--baseline PATH`
picks another: a baseline file, or any screen.json):

- each figure's elements' ratios now / then; the cluster's ratio is their median;
- the cluster is named (kind `cluster`) when a figure's ratio has dropped by more than the
  margin and K of its standard errors (llmb.llmbrun.screen.precision: the same margin and K
  as against peers): the verdict of a uniform degradation, which names no node;
- a node is named when one of its elements has dropped below its own baseline by that much
  more than the rest of the cluster did (its ratio against the others' median ratio).

What cannot be compared is not compared, and says why: another GPU type, mode, tool, GPUs per
node or parameters measure other figures. What changed but still measures the same figures
(the image, the driver, NCCL, PyTorch) is compared and said: `changed` lists it, and a drop
of the cluster names it as the likely cause.
"""

from __future__ import annotations

import json
import math
import os
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, TypedDict

from llmb import layout
from llmb.llmbrun.screen import judge, network, precision
from llmb.llmbrun.screen.document import (
    Allreduce,
    BaselineFigure,
    Below,
    Comparison,
    FigureComparison,
    Name,
    Named,
    Pair,
    Params,
    ScreenDocument,
    checked,
)
from llmb.shared import clock, files, records, values
from llmb.shared.errors import UsageError
from llmb.shared.records import Bound

FILE = "baseline.json"
KIND = "llmb screen baseline"
SCHEMA = 1
MAX_BYTES = 64 << 20
SAME = ("gpu_type", "mode", "measured_by", "gpus_per_node")  # else not comparable
CHANGED = ("image", "driver", "nccl", "torch")  # compared, and said
NETWORK = "network busbw_gbps"
LINKS = "pairs busbw_gbps"  # each pair (link), "<node> - <node>"
OWN = "all-reduce busbw_gbps"
ALL_NODES = "all-nodes busbw_gbps"
KINDS = {OWN: "node", NETWORK: "network", LINKS: "link", ALL_NODES: "all"}
# SAME and CHANGED: what measured the figures
Versions = Annotated[dict[Name, Name | int | None], Bound(items=64)]
REDO = "give a file that llmb-run screen --save-baseline wrote, or a screen's screen.json"
# the install's own baseline is read by every screen: running one again would meet it again
REDO_OWN = ("move it away (a screen with --save-baseline then keeps a new one), or give "
            "--baseline PATH")


class Baseline(TypedDict):
    """baseline.json: what --save-baseline keeps."""

    kind: Name
    schema: int
    saved: Name
    screen: Name | None  # the stamp of the screen it was made of
    versions: Versions
    params: Params | None
    figures: Annotated[dict[Name, BaselineFigure], Bound(items=256)]


def default_path(tree: layout.Install) -> Path:
    return tree.screens / FILE


# --- what a screen measured, per element ------------------------------------------------------

def _figure(series: Mapping[str, tuple[float, Sequence[float] | None]]) -> BaselineFigure:
    """One figure's elements: value and relative standard error (from the noise pooled over
    their repeats; None without repeats)."""
    noise = precision.pooled_noise([r for _, r in series.values()])
    out: dict[str, list[float | None]] = {}
    for element, (value, repeats) in series.items():
        error = noise * precision.error_factor(len(repeats)) \
            if noise is not None and repeats else None
        out[element] = [value, error]
    counts = [len(r) for _, r in series.values() if r]
    return {"noise": noise, "repeats": max(counts, default=0), "values": out}


def disturbed(doc: ScreenDocument) -> set[tuple[str, str]]:
    """(figure, element) the first pass measured disturbed: what the confirm pass cleared
    (llmb.llmbrun.screen.confirm), a node's network or a link as "pairs busbw_gbps" of the
    node or the link. Neither kept in a baseline nor held to one: the figure is not the
    element's."""
    cleared = doc["confirm"]["cleared"] if "confirm" in doc else []
    return {(LINKS, link_name(c["name"].split(" - "))) if c["kind"] == "link" else
            (str(c.get("figure")), c["name"]) for c in cleared}


def measured_pairs(doc: ScreenDocument) -> list[Pair]:
    """The pairs measured, less those the confirm pass found disturbed (a cleared link, and
    every pair of a node whose network it cleared)."""
    out = disturbed(doc)
    return [p for p in doc.get("pairs") or [] if p.get("busbw_gbps") is not None
            and not p.get("error") and (LINKS, link_name(p["nodes"])) not in out
            and not any((LINKS, n) in out for n in p["nodes"])]


def figures_of(doc: ScreenDocument) -> dict[str, BaselineFigure]:
    """The figures of a screen document, per element, as a baseline keeps them (what the
    confirm pass cleared left out)."""
    gpu: dict[str, dict[str, tuple[float, Sequence[float] | None]]] = {}
    own: dict[str, tuple[float, Sequence[float] | None]] = {}
    left_out = disturbed(doc)
    for node in doc.get("nodes") or []:
        for g in node.get("gpus") or []:
            if g.get("error"):
                continue
            name = f"{node['node']} GPU {g.get('local_rank')}"
            for figure, value in (g.get("figures") or {}).items():
                if (figure, name) not in left_out:
                    gpu.setdefault(figure, {})[name] = (
                        float(value), (g.get("repeats") or {}).get(figure))
        mine = node.get("allreduce") or {}
        if (busbw := mine.get("busbw_gbps")) is not None and not mine.get("error") and \
                (OWN, node["node"]) not in left_out:
            own[node["node"]] = (float(busbw), mine.get("repeats"))
    out = {figure: _figure(series) for figure, series in sorted(gpu.items())}
    if own:
        out[OWN] = _figure(own)
    if network := _network(doc):
        out[NETWORK] = network
    pairs = measured_pairs(doc)
    if pairs:
        out[LINKS] = _figure({link_name(p["nodes"]): (float(p.get("busbw_gbps") or 0.0),
                                                      p.get("repeats")) for p in pairs})
    everyone: Allreduce = doc.get("all_nodes") or {}
    if (busbw := everyone.get("busbw_gbps")) is not None and not everyone.get("error"):
        out[ALL_NODES] = _figure({"all": (float(busbw), everyone.get("repeats"))})
    return out


def _network(doc: ScreenDocument) -> BaselineFigure | None:
    """Each node's network: the mean of its pairs' figures, its error the pairs' over the
    square root of their number."""
    pairs = measured_pairs(doc)
    if not pairs:
        return None
    pooled = _figure({str(i): (float(p.get("busbw_gbps") or 0.0), p.get("repeats"))
                      for i, p in enumerate(pairs)})
    per_node: dict[str, list[tuple[float, float | None]]] = {}
    for i, pair in enumerate(pairs):
        value, error = _pair(pooled["values"][str(i)])
        for node in pair["nodes"]:
            per_node.setdefault(node, []).append((value, error))
    out: dict[str, list[float | None]] = {}
    for node, got in sorted(per_node.items()):
        errors = [e for _, e in got if e is not None]
        out[node] = [statistics.fmean(v for v, _ in got),
                     math.sqrt(statistics.fmean(e * e for e in errors) / len(got))
                     if len(errors) == len(got) else None]
    return {"noise": pooled["noise"], "repeats": pooled["repeats"], "values": out}


def link_name(nodes: Sequence[str]) -> str:
    """A link as the baseline keeps it: its two nodes, in order, whichever led the pair."""
    return " - ".join(sorted(nodes))


def _pair(kept: Sequence[float | None]) -> tuple[float, float | None]:
    """An element's [value, relative standard error] as kept (a value is never null)."""
    return float(kept[0] or 0.0), kept[1]


def versions_of(doc: ScreenDocument) -> Versions:
    return {"gpu_type": doc.get("gpu_type"), "mode": doc["mode"],
            "measured_by": doc["measured_by"], "gpus_per_node": doc["gpus_per_node"],
            "image": doc.get("image"), "driver": doc.get("driver"), "nccl": doc.get("nccl"),
            "torch": doc.get("torch")}


def of_screen(doc: ScreenDocument) -> Baseline:
    return Baseline(kind=KIND, schema=SCHEMA, saved=clock.iso(), screen=doc.get("stamp"),
                    versions=versions_of(doc), params=doc.get("params"),
                    figures=figures_of(doc))


def save(path: Path, doc: ScreenDocument) -> Baseline:
    """Keep the screen as a baseline at path, held to its type first (what is written, load
    reads back); records.BadRecord or OSError (a directory at path, a full disk)."""
    base = records.check(Baseline, json.loads(json.dumps(of_screen(doc), allow_nan=False)))
    files.write_private(path, json.dumps(base, indent=1) + "\n")
    return base


def _problem(base: Baseline) -> str | None:
    """What makes a baseline of the right type unusable: a figure that is not positive (a
    ratio against it would mean nothing), or [value, error] that is not two numbers."""
    for figure, kept in base["figures"].items():
        for element, pair in kept["values"].items():
            if len(pair) != 2 or pair[0] is None or pair[0] <= 0:
                return (f"figures.{values.brief(figure)}.values.{values.brief(element)} is "
                        f"{values.brief(pair)}, not [a positive figure, its error or null]")
    return None


def _usable(data: object) -> Baseline:
    """data as a baseline: a baseline file's, or a screen.json's made into one; UsageError
    saying what it is not (the caller names the file)."""
    if isinstance(data, dict) and data.get("kind") == KIND:
        try:
            base = records.check(Baseline, data)
        except records.BadRecord as exc:
            raise UsageError(f"is not a baseline llmb-run screen writes: {exc.problem}"
                             ) from None
    elif isinstance(data, dict) and "nodes" in data:
        try:
            base = of_screen(checked(data))
        except records.BadRecord as exc:
            raise UsageError(f"is not a screen.json llmb-run screen writes: {exc.problem}"
                             ) from None
    else:
        raise UsageError("is neither a screen baseline nor a screen.json")
    if (problem := _problem(base)) is not None:
        raise UsageError(f"is not a baseline llmb-run screen writes: {problem}")
    return base


def load(path: Path, own: bool = False) -> Baseline:
    """A baseline file, or a screen.json made into one, held to its type (and its figures
    positive); UsageError naming the file (`own`: the install's, which every screen reads)
    and what would do."""
    what, redo = (f"the install's baseline {values.shown(path)}", REDO_OWN) if own else \
        (f"--baseline {values.shown(path)}", REDO)
    try:
        if path.is_symlink() and not path.exists():
            raise UsageError(f"is a link to {values.shown(os.readlink(path))}, which does "
                             "not exist")
        try:
            data = json.loads(files.read_bounded(path, MAX_BYTES))
        except files.FileRefused as exc:
            raise UsageError(f": {exc.reason}") from None
        except (ValueError, RecursionError):
            raise UsageError("is not JSON") from None
        return _usable(data)
    except UsageError as exc:
        said = str(exc)
        raise UsageError(f"{what}{'' if said.startswith(':') else ' '}{said}; {redo}"
                         ) from None


# --- a screen against its baseline ------------------------------------------------------------

def _median_factor(count: int) -> float:
    """The standard error of a median of `count` values, in units of one value's."""
    return math.sqrt((1 if count <= 2 else math.pi / 2) / max(count, 1))


def _others(ratios: Sequence[float], i: int) -> float:
    """The median of the other ratios (all of them past a few dozen, where one cannot move
    it; the ratio itself where it is alone)."""
    if len(ratios) > 64:
        return statistics.median(ratios)
    rest = [r for j, r in enumerate(ratios) if j != i]
    return statistics.median(rest) if rest else ratios[i]


def compare_figure(figure: str, then: BaselineFigure, now: BaselineFigure, margin: float,
                   kind: str = "gpu") -> FigureComparison | None:
    """One figure now against its baseline: the cluster's ratio (the median of its elements'),
    the threshold it is held to, and the elements below their own baseline."""
    both = sorted(set(then["values"]) & set(now["values"]))
    was = {e: _pair(then["values"][e]) for e in both}
    got = {e: _pair(now["values"][e]) for e in both}
    common = [e for e in both if was[e][0] > 0]
    if not common:
        return None
    ratios = [got[e][0] / was[e][0] for e in common]
    errors = [math.hypot(now_se, then_se) for e in common
              if (now_se := got[e][1]) is not None and (then_se := was[e][1]) is not None]
    error = statistics.median(errors) if len(errors) == len(common) else 0.0
    cluster = statistics.median(ratios)
    threshold = max(margin, precision.MIN_K * error * _median_factor(len(ratios)))
    k = precision.k_for(len(ratios))
    wide = precision.widened(error, len(ratios) - 1)
    below = []
    everyone = statistics.median(ratios)
    for i, element in enumerate(common):
        if len(ratios) < 2:
            break
        others = everyone if len(ratios) > 64 else _others(ratios, i)
        own = max(margin, k * wide)
        if others > 0 and ratios[i] / others < 1 - own:  # others 0: the cluster, not one
            below.append(Below(element=element, ratio=round(ratios[i], 5),
                               others=round(others, 5), threshold=round(own, 5),
                               value=got[element][0], baseline=was[element][0]))
    return FigureComparison(
        figure=figure, elements=len(common), ratio=round(cluster, 5),
        threshold=round(threshold, 5), dropped=cluster < 1 - threshold,
        baseline_median=statistics.median(was[e][0] for e in common),
        median=statistics.median(got[e][0] for e in common),
        below=below, new=sorted(set(now["values"]) - set(then["values"])),
        kind=kind, resolves=round(max(margin, k * wide) + 1.645 * wide, 5))


def compare_network(then: BaselineFigure, now: BaselineFigure, margin: float,
                    values: tuple[BaselineFigure | None, BaselineFigure | None]
                    ) -> list[FigureComparison] | None:
    """Each node's network and each link now against the baseline, by the fit over every
    link both screens measured (llmb.llmbrun.screen.network) on their ratios now / then: the
    whole cluster's drift is the median ratio, each node's change and each link's its own
    beyond it; None where the links do not give a fit. `values`: the network figure then
    and now (what a node's value is said to be)."""
    import numpy as np

    both = sorted(set(then["values"]) & set(now["values"]))
    keys = [(e.split(" - ")[0], e.split(" - ")[-1]) for e in both]
    was = [_pair(then["values"][e]) for e in both]
    got = [_pair(now["values"][e]) for e in both]
    errors = [math.hypot(g[1], w[1]) for g, w in zip(got, was, strict=True)
              if g[1] is not None and w[1] is not None]
    error = statistics.median(errors) if errors and len(errors) == len(both) else 0.0
    ratios = [g[0] / w[0] for g, w in zip(got, was, strict=True)]
    if not both or min(ratios) <= 0 or not network.fits(keys) or \
            (fitted := network.fit(keys, ratios, error)) is None:
        return None
    drift = float(np.median(np.log(ratios)))
    threshold = max(margin, precision.MIN_K * error * _median_factor(len(ratios)))
    out = []
    for kind, names, effects, ses in (
            ("network", list(fitted.nodes), fitted.node, fitted.node_se),
            ("link", both, fitted.link - np.median(fitted.link), fitted.link_se)):
        k = precision.k_for(len(names))
        low, _, spread = network.floors(effects, ses, margin, k, precision.widened)
        then_v, now_v = (values if kind == "network" else (then, now))
        below = [Below(element=name, ratio=round(math.exp(drift + effects[i]), 5),
                       others=round(math.exp(drift), 5),
                       threshold=round(1 - math.exp(low[i]), 5),
                       value=_value(now_v, name), baseline=_value(then_v, name))
                 for i, name in enumerate(names) if effects[i] < low[i]]
        se = max(spread, float(np.median(ses)))
        out.append(FigureComparison(
            figure=NETWORK if kind == "network" else LINKS, elements=len(names),
            ratio=round(math.exp(drift), 5), threshold=round(threshold, 5),
            dropped=math.exp(drift) < 1 - threshold,
            baseline_median=statistics.median(w[0] for w in was),
            median=statistics.median(g[0] for g in got), below=below,
            new=sorted(set(now["values"]) - set(then["values"])) if kind == "link" else [],
            kind=kind, resolves=round(1 - math.exp(-(max(math.log(1 / (1 - margin)), k * se)
                                                     + 1.645 * se)), 5)))
    return out


def _value(figure: BaselineFigure | None, element: str) -> float:
    kept = (figure or {"values": {}})["values"].get(element)
    return _pair(kept)[0] if kept else 0.0


def compare(doc: ScreenDocument, base: Baseline, where: str) -> Comparison:
    """screen.json's `baseline`: what was compared with what, and how it came out."""
    then, now = base["versions"], versions_of(doc)
    out = Comparison(path=where, screen=base.get("screen"), saved=base.get("saved"),
                     comparable=True, why_not=None, changed=[], figures=[])
    differs = [f"{k} {then.get(k)} then, {now.get(k)} now" for k in SAME
               if then.get(k) != now.get(k)]
    if base.get("params") != doc.get("params"):
        differs.append("the screen's parameters differ (another version of llmb-run)")
    if differs:
        out["comparable"], out["why_not"] = False, "; ".join(differs)
        return out
    out["changed"] = [f"{k} {then.get(k)} -> {now.get(k)}" for k in CHANGED
                      if then.get(k) != now.get(k)]
    margin = precision.MARGIN.get(str(doc.get("mode")), max(precision.MARGIN.values()))
    current = figures_of(doc)
    fitted = compare_network(base["figures"][LINKS], current[LINKS], margin, (
        base["figures"].get(NETWORK), current.get(NETWORK))) \
        if LINKS in base["figures"] and LINKS in current else None
    for figure, kept in sorted(base["figures"].items()):
        if fitted is not None and figure in (NETWORK, LINKS):
            continue
        if figure in current and (got := compare_figure(figure, kept, current[figure], margin,
                                                        KINDS.get(figure, "gpu"))):
            out["figures"].append(got)
    out["figures"] += fitted or []
    return out


def named_of(comparison: Comparison) -> list[Named]:
    """What the comparison names: the cluster for each figure whose median dropped, and each
    element that dropped more than the rest (its GPU, or its node)."""
    out = []
    stamp = comparison.get("screen") or comparison.get("path")
    changed = "; ".join(comparison.get("changed") or []) or "nothing the baseline records"
    for fig in comparison.get("figures") or []:
        if fig["dropped"]:
            out.append(Named(kind="cluster", name="cluster", figure=fig["figure"],
                             value=fig["median"],
                             floor=fig["baseline_median"] * (1 - fig["threshold"]),
                             expected=fig["baseline_median"], peers_median=None,
                             why=f"the cluster's {fig['figure']} is {1 - fig['ratio']:.0%} "
                                 f"below its baseline ({stamp}); changed since: {changed}"))
        for low in fig["below"]:
            kind = "gpu" if " GPU " in low["element"] else \
                "link" if " - " in low["element"] else "node"
            out.append(Named(kind=kind, name=low["element"],
                             figure=f"{fig['figure']} against its baseline", value=low["value"],
                             floor=low["baseline"] * low["others"] * (1 - low["threshold"]),
                             expected=low["baseline"], peers_median=None,
                             why=f"{1 - low['ratio']:.0%} below its own baseline ({stamp}) "
                                 f"while the rest of the cluster is {1 - low['others']:.0%} "
                                 "below theirs"))
    return out


def apply(doc: ScreenDocument, base: Baseline, where: str) -> None:
    """Compare the screen with its baseline: doc["baseline"], what it names added to
    doc["named"], the nodes it names made slow, the suspects again."""
    comparison = compare(doc, base, where)
    doc["baseline"] = comparison
    named = named_of(comparison)
    doc["named"] = [*doc.get("named", []), *named]
    doc["suspects"] = judge.mark(doc.get("nodes") or [], named)
