"""Who meets whom in `llmb-run screen`'s job: the phases of all-reduces over the nodes and the
pairing rounds (a round-robin schedule: every node meets a new partner each round). The job's
tasks (llmb.container.screenrun) run them; the login node (llmb.llmbrun.screen) puts their
results together by the same schedule.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


def max_rounds(nodes: int) -> int:
    """How many rounds give every node a new partner each time (an odd count sits one out)."""
    return 0 if nodes < 2 else nodes - 1 if nodes % 2 == 0 else nodes


def default_rounds(nodes: int) -> int:
    """Rounds enough for every node to meet two partners: 2 for an even count, 3 for an odd
    one (each node sits out at most once), fewer where there are not that many partners."""
    return min(max_rounds(nodes), 2 if nodes % 2 == 0 else 3)


def pair_rounds(nodes: Sequence[str], rounds: int) -> list[list[tuple[str, str]]]:
    """Disjoint pairs, round by round, by the circle method of a round-robin tournament: the
    first node stays, the others turn one place per round, and place i meets place m-1-i. With
    an odd count an empty place joins, and whoever meets it sits the round out."""
    places: list[str | None] = [*nodes, *([None] if len(nodes) % 2 else [])]
    m = len(places)
    out = []
    for _ in range(min(rounds, max_rounds(len(nodes)))):
        pairs = [(a, b) for i in range(m // 2)
                 if (a := places[i]) is not None and (b := places[m - 1 - i]) is not None]
        out.append(pairs)
        places = [places[0], places[-1], *places[1:-1]]
    return out


@dataclass(frozen=True)
class Phase:
    name: str
    groups: tuple[tuple[str, ...], ...]


def phases(nodes: Sequence[str], rounds: int) -> list[Phase]:
    """The all-reduce phases over these nodes: each node, the pair rounds, then all nodes
    (left out where it would repeat a group: one or two nodes)."""
    out = [Phase("nodes", tuple((n,) for n in nodes))] if nodes else []
    for number, pairs in enumerate(pair_rounds(nodes, rounds), 1):
        out.append(Phase(f"pairs-{number}", tuple(pairs)))
    if len(nodes) >= 3:
        out.append(Phase("all", (tuple(nodes),)))
    return out
