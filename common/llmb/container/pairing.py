"""Who meets whom in `llmb-run screen`'s job: the phases of all-reduces over the nodes and the
pairing rounds (a round-robin schedule: every node meets a new partner each round). The job's
tasks (llmb.container.screenrun) run them; the login node (llmb.llmbrun.screen) puts their
results together by the same schedule.

Where each node's leaf switch is known (`leaves`, from Slurm's topology), pairs are drawn
under one leaf first: each leaf's nodes have a round-robin of their own, so that a pair's path
is one switch and the pairs are compared within their tier; the nodes a round leaves without a
partner under their leaf (a leaf of fewer nodes than rounds, the one that sits out of an odd
leaf) meet across the spine, each a partner it has not met where there is one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass


def max_rounds(nodes: int) -> int:
    """How many rounds give every node a new partner each time (an odd count sits one out)."""
    return 0 if nodes < 2 else nodes - 1 if nodes % 2 == 0 else nodes


def default_rounds(nodes: int) -> int:
    """Rounds enough for every node to meet two partners: 2 for an even count, 3 for an odd
    one (each node sits out at most once), fewer where there are not that many partners.
    The screen's fit of each node's network and each link (llmb.llmbrun.screen.network)
    needs three partners: `--rounds 4`."""
    return min(max_rounds(nodes), 2 if nodes % 2 == 0 else 3)


def round_order(count: int, rounds: int) -> list[int]:
    """Which of the round-robin's `count` rounds are run, in order: the first ones for a few
    rounds (8 or fewer); else rounds far apart on the circle ((7k^2 + k) mod count for k = 0,
    1, ..., each once), whose pairs join the nodes into one well-mixed graph: consecutive
    rounds join each node to its neighbours on the circle only, so that a node's network,
    fitted from its pairs, would be known to a few times the pairs' own noise."""
    wanted = min(rounds, count)
    if count <= 8:
        return list(range(wanted))
    out: list[int] = []
    for k in range(4 * count):
        if len(out) == wanted:
            break
        if (step := (7 * k * k + k) % count) not in out:
            out.append(step)
    return out + [r for r in range(count) if r not in out][:wanted - len(out)]


def _circle(nodes: Sequence[str], rounds: int) -> list[list[tuple[str, str]]]:
    """Disjoint pairs, round by round, by the circle method of a round-robin tournament: the
    first node stays, the others turn one place per round, and place i meets place m-1-i. With
    an odd count an empty place joins, and whoever meets it sits the round out. The rounds run
    are those round_order picks."""
    places: list[str | None] = [*nodes, *([None] if len(nodes) % 2 else [])]
    m = len(places)
    count = max_rounds(len(nodes))
    out = []
    for turn in round_order(count, rounds):
        turned = [places[0], *(places[1:][-turn:] if turn else []),
                  *places[1:][:len(places) - 1 - turn]]
        out.append([(a, b) for i in range(m // 2)
                    if (a := turned[i]) is not None and (b := turned[m - 1 - i]) is not None])
    return out


def leaf_groups(nodes: Sequence[str], leaves: Mapping[str, str] | None) -> list[list[str]]:
    """The nodes under each leaf switch, in the order each leaf first appears (a node of no
    known leaf in a group of its own kind: the unknown)."""
    groups: dict[str | None, list[str]] = {}
    for node in nodes:
        groups.setdefault((leaves or {}).get(node), []).append(node)
    return list(groups.values())


def _across(left: Sequence[str], turn: int, met: Mapping[str, set[str]],
            leaves: Mapping[str, str]) -> list[tuple[str, str]]:
    """Pairs of the nodes left without a partner under their leaf this round: each meets, in
    a turned order (the turn), the first it has not met, under another leaf where there is
    one; a node that has met every one left sits the round out."""
    order = [*left[turn % len(left):], *left[:turn % len(left)]] if left else []
    free = dict.fromkeys(order)
    out = []
    for a in order:
        if a not in free:
            continue
        del free[a]
        fresh = [b for b in free if b not in met[a]]
        other = [b for b in fresh if leaves.get(b) != leaves.get(a)]
        if chosen := (other or fresh)[:1]:
            del free[chosen[0]]
            out.append((a, chosen[0]))
    return out


def pair_rounds(nodes: Sequence[str], rounds: int, leaves: Mapping[str, str] | None = None
                ) -> list[list[tuple[str, str]]]:
    """Disjoint pairs, round by round (`_circle`); with `leaves` (node -> its leaf switch),
    under one leaf first (the module's doc), as many rounds as without."""
    groups = leaf_groups(nodes, leaves)
    if len(groups) < 2 or leaves is None:
        return _circle(nodes, rounds)
    under = [_circle(group, rounds) for group in groups]
    met: dict[str, set[str]] = {n: set() for n in nodes}
    out = []
    for turn in range(min(rounds, max_rounds(len(nodes)))):
        pairs = [p for schedule in under if turn < len(schedule) for p in schedule[turn]]
        paired = {n for p in pairs for n in p}
        pairs += _across([n for n in nodes if n not in paired], turn, met, leaves)
        for a, b in pairs:
            met[a].add(b)
            met[b].add(a)
        out.append(pairs)
    return out


@dataclass(frozen=True)
class Phase:
    name: str
    groups: tuple[tuple[str, ...], ...]


def phases(nodes: Sequence[str], rounds: int, leaves: Mapping[str, str] | None = None
           ) -> list[Phase]:
    """The all-reduce phases over these nodes: each node, the pair rounds (under one leaf
    first, where `leaves` says), then all nodes (left out where it would repeat a group: one
    or two nodes)."""
    out = [Phase("nodes", tuple((n,) for n in nodes))] if nodes else []
    for number, pairs in enumerate(pair_rounds(nodes, rounds, leaves), 1):
        out.append(Phase(f"pairs-{number}", tuple(pairs)))
    if len(nodes) >= 3:
        out.append(Phase("all", (tuple(nodes),)))
    return out
