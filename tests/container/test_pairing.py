"""llmb.container.pairing with the leaf switches known: the pairs are drawn under one leaf
first, every round disjoint, new partners where there are any, and the schedule still gives the
fit of each node's network (llmb.llmbrun.screen.network) what it needs."""

from __future__ import annotations

from itertools import chain

from hypothesis import given
from hypothesis import strategies as st
from llmb.container import pairing
from llmb.llmbrun.screen import network


def names(n: int) -> list[str]:
    return [f"n{i:03d}" for i in range(n)]


def under(nodes: list[str], size: int) -> dict[str, str]:
    return {n: f"leaf{i // size}" for i, n in enumerate(nodes)}


def test_two_leaves_of_two_meet_under_their_leaf_first() -> None:
    nodes = ["node1", "node2", "node3", "node4"]
    leaves = {"node1": "s0", "node2": "s0", "node3": "s1", "node4": "s1"}
    assert pairing.pair_rounds(nodes, 2, leaves) == [
        [("node1", "node2"), ("node3", "node4")],  # each under its leaf
        [("node2", "node3"), ("node4", "node1")],  # then across the spine, new partners
    ]
    third = pairing.pair_rounds(nodes, 3, leaves)[2]
    assert {frozenset(p) for p in third} == {frozenset(("node1", "node3")),
                                             frozenset(("node2", "node4"))}


@given(st.integers(min_value=2, max_value=60), st.integers(min_value=1, max_value=4))
def test_one_leaf_or_none_is_the_round_robin(n: int, rounds: int) -> None:
    nodes = names(n)
    plain = pairing.pair_rounds(nodes, rounds)
    assert pairing.pair_rounds(nodes, rounds, None) == plain
    assert pairing.pair_rounds(nodes, rounds, dict.fromkeys(nodes, "s0")) == plain


@given(st.integers(min_value=2, max_value=120), st.integers(min_value=1, max_value=12),
       st.integers(min_value=1, max_value=6))
def test_rounds_under_leaves_are_disjoint_and_new(n: int, size: int, rounds: int) -> None:
    nodes = names(n)
    leaves = under(nodes, size)
    schedule = pairing.pair_rounds(nodes, rounds, leaves)
    assert len(schedule) == min(rounds, pairing.max_rounds(n))
    met: set[frozenset[str]] = set()
    for pairs in schedule:
        seen = list(chain.from_iterable(pairs))
        assert len(seen) == len(set(seen))  # disjoint
        for pair in pairs:
            assert frozenset(pair) not in met  # never the same partner twice
            met.add(frozenset(pair))
    # every pair a leaf's own round-robin gives is under that leaf
    for group in pairing.leaf_groups(nodes, leaves):
        own = pairing.pair_rounds(group, rounds)
        assert {frozenset(p) for p in chain.from_iterable(own)} <= met


def test_a_fleet_of_32_node_leaves_pairs_under_its_leaves_alone_and_fits() -> None:
    nodes = names(256)
    leaves = under(nodes, 32)
    pairs = [p for r in pairing.pair_rounds(nodes, 4, leaves) for p in r]
    assert len(pairs) == 512
    assert all(network.tier_of(a, b, leaves) == "leaf" for a, b in pairs)
    assert network.fits(pairs)
    assert network.fit(pairs, [45.0] * len(pairs), 0.004, leaves) is not None


def test_leaves_too_small_for_the_rounds_meet_across_the_spine() -> None:
    nodes = names(12)
    leaves = under(nodes, 2)  # six leaves of two: one round under each leaf, then across
    schedule = pairing.pair_rounds(nodes, 4, leaves)
    assert all(leaves[a] == leaves[b] for a, b in schedule[0])
    assert all(leaves[a] != leaves[b] for r in schedule[1:] for a, b in r)
    assert [len(r) for r in schedule] == [6, 6, 6, 6]
    assert network.partners([p for r in schedule for p in r]) == 4


def test_phases_pair_by_the_leaves_they_are_given() -> None:
    nodes = ["a", "b", "c", "d"]
    phases = pairing.phases(nodes, 2, {"a": "s0", "c": "s0", "b": "s1", "d": "s1"})
    first = next(p for p in phases if p.name.startswith("pairs-"))
    assert first.groups == (("a", "c"), ("b", "d"))
