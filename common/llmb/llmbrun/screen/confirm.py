"""The screen's confirm pass: what the first pass would name is measured again, in the same job,
beside a few healthy peers, and only what is slow again is named.

On a real fleet a repeat is now and then disturbed (a clock ramping, another job's traffic on a
shared switch), and a disturbed first pass names healthy elements. So the job (llmb.llmbrun.
screen.job's script) runs, after the first pass:

1. one task (`main`) that judges the first pass's files as the login node will (llmb.llmbrun.
   screen.results) and, where it names a figure of a GPU, a node's own all-reduce, a node's
   network or a link, writes the confirm plan (`choose`): confirm/plan.json (the first pass's
   plan with the phases to run and the elements to measure again) and confirm/nodes.txt
   (`COUNT NODE,NODE,...`: where the job script runs it). Nothing named: nothing written, and
   the job ends as it would have;
2. the second pass: llmb.container.screenrun with confirm/plan.json on those nodes only, one
   task per GPU (every GPU of each node: a named GPU's healthy neighbours are its reference),
   its files under confirm/ as the first pass's are under the screen's folder.

Which nodes: every node a named element is on, and healthy peers: nodes the first pass passed
and named nothing of, PEER_NODES of them at least and one more than the named nodes (the
peers stay the majority a median is taken of), spread over the healthy nodes in name order.
What is run: each node's GPUs always; each node's own all-reduce where one was named; the
nodes in pairs where a network or a link was named (every pair of them up to FULL_PAIRS
nodes, the fit's rounds beyond, and every named link's pair again).

After the job `apply` judges the second pass by the same judge, against its own peers, and
merges it into the first pass's document: an element named again stays named (its `again`:
the figure the confirm pass measured); one measured again and not named is cleared (in
`confirm.cleared`, "seen once, cleared by the confirm pass"), and a node none of whose names
stand passes. What was not measured again (a task that died, a confirm step that never ran)
stays named as the first pass named it. Facts (health, the transport, a node not measured)
are never confirmed: measuring again does not change them.
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypedDict

from llmb.container import screenrun
from llmb.container.pairing import max_rounds, pair_rounds
from llmb.llmbrun.screen import judge, results
from llmb.llmbrun.screen.document import (
    Confirm,
    Named,
    Names,
    Scheduled,
    ScreenDocument,
)
from llmb.recipes import catalog
from llmb.shared import files, records
from llmb.shared.errors import LlmbError

DIR = "confirm"
NODES_FILE = "nodes.txt"
PEER_NODES = 3
FULL_PAIRS = 8  # up to this many nodes, every pair of them is measured again
FIT_ROUNDS = 4  # beyond: the rounds the fit of each network needs (llmb.llmbrun.screen.job)
KINDS = ("gpu", "node", "link")
OWN = f"all-reduce {judge.NODE_FIGURE}"
NETWORK = f"pairs {judge.NODE_FIGURE}"
CLEARED = "seen once, cleared by the confirm pass"
NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,254}")


class Target(TypedDict):
    """An element the confirm pass measures again: as `named` names it."""

    kind: str
    name: str
    figure: str


class ConfirmPlan(TypedDict):
    """What `choose` picks: the elements, the nodes they are on with their peers, the phases."""

    targets: list[Target]
    nodes: Names
    peers: Names
    phases: list[Scheduled]


# --- which elements, which peers --------------------------------------------------------------

def target_of(entry: Named) -> Target | None:
    """The element a named entry is, where it is a figure measuring again can clear: a GPU's,
    a node's own all-reduce or network, a link (None: a fact, or a node not measured)."""
    if entry["kind"] not in KINDS or entry.get("figure") is None or entry.get("value") is None:
        return None
    return Target(kind=entry["kind"], name=entry["name"], figure=str(entry["figure"]))


def nodes_of(kind: str, name: str) -> list[str]:
    """The nodes an element is on: a GPU's node ("<node> GPU <i>"), a node, a link's two."""
    if kind == "link":
        return name.split(" - ")
    return [name.split(" GPU ")[0]] if kind == "gpu" else [name]


def key(kind: str, name: str, figure: object) -> tuple[str, str, str]:
    """An element and its figure, the same in both passes (a link's nodes in order)."""
    return (kind, " - ".join(sorted(name.split(" - "))) if kind == "link" else name,
            str(figure))


def peers_of(doc: ScreenDocument, involved: Sequence[str]) -> list[str]:
    """Healthy nodes to measure alongside: passed, named nothing of, spread in name order."""
    named = {n for e in doc["named"] for n in nodes_of(e["kind"], e["name"])}
    healthy = [n["node"] for n in doc["nodes"] if n["verdict"] == "pass" and not n.get("error")
               and n["node"] not in named and n["node"] not in involved]
    count = min(len(healthy), max(PEER_NODES, len(involved) + 1))
    return sorted({healthy[i * len(healthy) // count] for i in range(count)})


def schedule(nodes: Sequence[str], own: bool, network: bool,
             links: Sequence[Sequence[str]]) -> list[Scheduled]:
    """The phases of the confirm pass: each node's own all-reduce where one was named (`own`;
    the peers' beside it); where a network or a link was named (`network`, `links`), the nodes
    in pairs: every pair up to FULL_PAIRS nodes, else FIT_ROUNDS rounds, and any named link
    not among them, in phases of disjoint pairs."""
    out: list[Scheduled] = [Scheduled(name="nodes", groups=[[n] for n in nodes])] if own else []
    if not (network or links) or len(nodes) < 2:
        return out
    count = max_rounds(len(nodes))
    rounds = pair_rounds(nodes, count if len(nodes) <= FULL_PAIRS else min(count, FIT_ROUNDS))
    run = {frozenset(p) for pairs in rounds for p in pairs}
    left = [list(link) for link in links if frozenset(link) not in run]
    while left:
        used: set[str] = set()
        this: list[tuple[str, str]] = []
        for a, b in left:
            if not {a, b} & used:
                this.append((a, b))
                used.update((a, b))
        rounds.append(this)
        left = [link for link in left if tuple(link) not in this]
    return out + [Scheduled(name=f"pairs-{i}", groups=[list(p) for p in pairs])
                  for i, pairs in enumerate(rounds, 1)]


def choose(doc: ScreenDocument) -> ConfirmPlan | None:
    """The confirm plan for a first pass's judged document; None when it names nothing that
    measuring again could clear."""
    targets = [t for e in doc["named"] if (t := target_of(e)) is not None]
    if not targets:
        return None
    involved = sorted({n for t in targets for n in nodes_of(t["kind"], t["name"])})
    peers = peers_of(doc, involved)
    nodes = sorted({*involved, *peers})
    own = any((t["kind"], t["figure"]) == ("node", OWN) for t in targets)
    network = any((t["kind"], t["figure"]) == ("node", NETWORK) for t in targets)
    links = [t["name"].split(" - ") for t in targets if t["kind"] == "link"]
    return ConfirmPlan(targets=targets, nodes=nodes, peers=peers,
                       phases=schedule(nodes, own, network, links))


# --- the job's step -------------------------------------------------------------------------

def write(folder: Path, first: Mapping[str, Any], chosen: ConfirmPlan) -> Path:
    """confirm/nodes.txt, then confirm/plan.json (written last: its presence says the confirm
    pass runs); the nodes' names are refused unless plain (they reach srun's --nodelist)."""
    for node in chosen["nodes"]:
        if not NODE_NAME.fullmatch(node):
            raise LlmbError(f"node {node!r} is not a plain node name (letters, digits, . _ -)"
                            "; the confirm pass is not run")
    where = folder / DIR
    where.mkdir(exist_ok=True)
    files.atomic_write(where / NODES_FILE,
                       f"{len(chosen['nodes'])} {','.join(chosen['nodes'])}\n")
    plan = {**first, "rounds": None, "phases": chosen["phases"], "confirm": chosen}
    files.atomic_write(where / screenrun.PLAN_FILE, json.dumps(plan, indent=1) + "\n")
    return where / screenrun.PLAN_FILE


def main(argv: Sequence[str] | None = None) -> int:
    """The job's one-task step between the passes: `main([FOLDER])` judges the first pass
    in FOLDER and writes the confirm plan where it names something to measure again."""
    folder = Path((argv if argv is not None else sys.argv[1:])[0])
    try:
        first = screenrun.read_plan(folder / screenrun.PLAN_FILE)
        gpu = catalog.get_gpu_type(str(first.get("gpu_type")))
        leaves = first.get("leaves")  # judged in the tiers the final judge uses
        doc = results.document(folder, gpu, [], int(first.get("gpus_per_node") or 1),
                               leaves if isinstance(leaves, dict) else None)
        chosen = choose(doc) if doc is not None else None
        if chosen is None:
            print("llmb screen: confirm: the first pass named nothing to measure again")
            return 0
        write(folder, first, chosen)
    except (LlmbError, OSError) as exc:
        print(f"llmb screen: confirm: {exc}", file=sys.stderr)
        return 1
    print(f"llmb screen: confirm: measuring {len(chosen['targets'])} element(s) again on "
          f"{','.join(chosen['nodes'])} (peers {','.join(chosen['peers']) or 'none'})")
    return 0


# --- the second pass into the verdict ---------------------------------------------------------

def again_of(second: ScreenDocument, target: Target) -> float | None:
    """The figure the confirm pass measured of an element; None where it did not."""
    kind, name, figure = target["kind"], target["name"], target["figure"]
    nodes = {n["node"]: n for n in second["nodes"] if not n.get("error")}
    if kind == "link":
        return next((p.get("busbw_gbps") for p in second["pairs"] if not p.get("error")
                     and set(p["nodes"]) == set(name.split(" - "))), None)
    node = nodes.get(nodes_of(kind, name)[0])
    if node is None:
        return None
    if kind == "gpu":
        local = name.rsplit(" GPU ", 1)[1]
        return next((g["figures"].get(figure) for g in node["gpus"]
                     if str(g.get("local_rank")) == local and not g.get("error")), None)
    if figure == OWN:
        own = node.get("allreduce") or {}
        return None if own.get("error") else own.get("busbw_gbps")
    mine = [float(busbw) for p in second["pairs"] if name in p["nodes"]
            and not p.get("error") and (busbw := p.get("busbw_gbps")) is not None]
    return statistics.median(mine) if mine else None


def read_plan(where: Path) -> ConfirmPlan | None:
    """The confirm plan the job's step wrote (None: there is none, the first pass named
    nothing to measure again); LlmbError when it cannot be read."""
    path = where / screenrun.PLAN_FILE
    if not path.exists():
        return None
    try:
        return records.check(ConfirmPlan, screenrun.read_plan(path).get("confirm"))
    except records.BadRecord as exc:
        raise LlmbError(f"{path}: {exc.problem}") from None


def apply(doc: ScreenDocument, folder: Path, gpu: catalog.GpuType, per_node: int,
          leaves: Mapping[str, str] | None = None) -> None:
    """The confirm pass (its files under FOLDER/confirm/) merged into the first pass's judged
    document: `named`, the verdicts and `suspects` as the second pass leaves them (judged in
    the same tiers, `leaves`), and `confirm`; nothing where the job ran no confirm pass."""
    where = folder / DIR
    try:
        chosen = read_plan(where)
    except LlmbError as exc:
        doc["confirm"] = Confirm(nodes=[], peers=[], measured=0, cleared=[], rounds=[],
                                 error=f"its plan cannot be read: {exc}")
        return
    if chosen is None:
        return
    why = None
    try:
        second = results.document(where, gpu, [], per_node, leaves)
    except (LlmbError, OSError) as exc:
        second, why = None, f"its results cannot be put together: {exc}"
    if second is None:
        why = why or "none of its tasks reported (see the job's output)"
    info = Confirm(nodes=chosen["nodes"], peers=chosen["peers"], measured=0, cleared=[],
                   rounds=list(second["rounds"]) if second else [], error=why)
    if second is not None:
        merge(doc, second, chosen["targets"], info)
    doc["confirm"] = info


def merge(doc: ScreenDocument, second: ScreenDocument, targets: Sequence[Target],
          info: Confirm) -> None:
    """The second pass's verdict on each target into the first's document: named again
    stays (with `again`), measured and not named is cleared; the nodes and suspects after."""
    wanted = {key(t["kind"], t["name"], t["figure"]): t for t in targets}
    named_again = {key(e["kind"], e["name"], e.get("figure")) for e in second["named"]}
    kept: list[Named] = []
    for entry in doc["named"]:
        target = wanted.get(key(entry["kind"], entry["name"], entry.get("figure")))
        if target is None:
            kept.append(entry)
            continue
        entry["again"] = again_of(second, target)
        info["measured"] += entry["again"] is not None
        if entry["again"] is None or key(**target) in named_again:
            kept.append(entry)
        else:
            info["cleared"].append(entry)
    doc["named"] = kept
    clear_verdicts(doc, kept)


def clear_verdicts(doc: ScreenDocument, kept: Sequence[Named]) -> None:
    """The verdicts none of whose names stand pass again (a GPU's, a node's own all-reduce,
    a pair's, a node's), their reasons saying what the first pass saw; the suspects again."""
    stand = {(e["kind"], e["name"]) for e in kept}
    on_node = {nodes_of(e["kind"], e["name"])[0] for e in kept if e["kind"] != "link"}
    for node in doc["nodes"]:
        name = node["node"]
        for gpu in node["gpus"]:
            if gpu.get("verdict") == "slow" and ("gpu", f"{name} GPU {gpu.get('local_rank')}") \
                    not in stand:
                gpu["verdict"], gpu["reasons"] = "pass", _cleared(gpu.get("reasons") or [])
        own = node.get("allreduce") or {}
        if own.get("verdict") == "slow" and ("node", name) not in stand:
            own["verdict"] = "pass"
        if node["verdict"] == "slow" and name not in on_node:
            node["verdict"], node["reasons"] = "pass", _cleared(node["reasons"])
    for pair in doc["pairs"]:
        link = ("link", " - ".join(pair["nodes"])) in stand
        if pair.get("verdict") == "slow" and not link and not set(pair["nodes"]) & on_node:
            pair["verdict"], pair["link"] = "pass", False
    doc["suspects"] = [n["node"] for n in doc["nodes"] if n["verdict"] != "pass"]


def _cleared(reasons: Sequence[str]) -> list[str]:
    return [f"{CLEARED}: {r}" for r in reasons]
