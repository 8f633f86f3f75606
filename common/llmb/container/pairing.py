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


def pair_rounds(nodes: Sequence[str], rounds: int) -> list[list[tuple[str, str]]]:
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
