"""Which leaf switch each node hangs off, from Slurm's own topology (the topology/tree plugin).

`scontrol show topology` prints one line per switch, e.g. (Slurm 22.05 to 24.x)

    SwitchName=leaf1 Level=0 LinkSpeed=1 Nodes=node[1-2]
    SwitchName=spine Level=1 LinkSpeed=1 Switches=leaf[1-2]

(older releases print `Nodes=(null)` or `Switches=(null)` where there are none). A leaf is a
switch of level 0; its nodes are a Slurm node list (llmb.launch.hostlist expands it). Fields are
read by name, so a release that adds one changes nothing; the two this needs (SwitchName,
Level, and Nodes on a leaf) are held strictly: a line that names a switch without a level, a
node list that is not one, or a node under two leaves is no map (and says why), never a guess.
Lines of another kind (the topology/block plugin's BlockName=..., "No topology information
available") are not switches; without any switch there is no map: one tier.

`resolve` asks Slurm once; where there is no map it says why in one line, which the screen
reports.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from llmb.launch import hostlist
from llmb.shared import slurmquery, values
from llmb.shared.errors import LlmbError

MAX_BYTES = 16 << 20  # the most of scontrol's answer read
_FIELD = re.compile(r"([A-Za-z]+)=(\S*)")
_NULL = ("", "(null)")


class TopologyError(LlmbError):
    """`scontrol show topology`'s answer is not what it should be; one line saying where."""


@dataclass(frozen=True)
class Topology:
    """Each node's leaf switch (None: not known, one tier) and, in one line, where that came
    from or why there is none."""

    leaves: dict[str, str] | None
    said: str


def _fields(line: str) -> dict[str, str]:
    return {k: v for k, v in _FIELD.findall(line)}


def parse(text: str) -> dict[str, str]:
    """node -> its leaf switch (a level-0 switch's Nodes), from `scontrol show topology`'s
    text; {} where it names no leaf; TopologyError for a switch line that is not one."""
    leaves: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip().startswith("SwitchName="):
            continue
        fields = _fields(line)
        name, level = fields.get("SwitchName", ""), fields.get("Level", "")
        if name in _NULL or not values.ascii_digits(level):
            raise TopologyError(f"scontrol show topology, line {number}: "
                                f"{values.shown(line.strip(), 200)} is not a switch "
                                "(SwitchName=NAME Level=NUMBER ...)")
        nodes = fields.get("Nodes", "")
        if int(level) != 0 or nodes in _NULL:
            continue
        try:
            under = hostlist.expand(f"scontrol show topology: switch {name}'s Nodes", nodes)
        except hostlist.HostlistError as exc:
            raise TopologyError(str(exc)) from None
        for node in under:
            if leaves.setdefault(node, name) != name:
                raise TopologyError(f"scontrol show topology: node {node} is under two leaf "
                                    f"switches, {leaves[node]} and {name}")
    return leaves


def of_nodes(leaves: Mapping[str, str], nodes: Sequence[str]) -> Topology:
    """The map restricted to `nodes` (a screen's); a node under no leaf stays out of it (its
    pairs are a tier of their own, llmb.llmbrun.screen.network.tier_of)."""
    mine = {n: leaves[n] for n in nodes if n in leaves}
    if not mine:
        return Topology(None, "one tier: Slurm's topology puts none of the screen's nodes "
                        "under a leaf switch")
    count = len(set(mine.values()))
    outside = len(set(nodes)) - len(mine)
    return Topology(mine, f"Slurm's topology: {len(mine)} node(s) under {count} leaf "
                    f"switch{'es' if count != 1 else ''}"
                    + (f"; {outside} under none" if outside else ""))


def resolve() -> Topology:
    """The cluster's map from `scontrol show topology`, asked once; no map (one tier) where
    Slurm has no topology plugin, its answer is empty or cut, or scontrol fails."""
    if os.environ.get("SLURM_TOPO_LEN"):
        return Topology(None, "one tier: SLURM_TOPO_LEN is set, which cuts scontrol show "
                        "topology's lines; unset it for the leaf switches")
    try:
        leaves = parse(slurmquery.topology()[:MAX_BYTES])
    except (slurmquery.SlurmUnavailable, TopologyError) as exc:
        return Topology(None, f"one tier: no switch topology ({exc})")
    if not leaves:
        return Topology(None, "one tier: Slurm gives no switch topology (no topology/tree "
                        "plugin, or no switch with nodes)")
    return Topology(leaves, f"Slurm's topology: {len(leaves)} node(s) under "
                    f"{len(set(leaves.values()))} leaf switch(es)")
