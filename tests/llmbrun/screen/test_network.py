"""llmb.llmbrun.screen.network and the judge's fit over the pairs: a slow NIC names its node and
neither partner, a slow link names the link and no node, the switch tier is the fit's, not a
fault; and the baseline's links: a drift of the whole cluster apart from one link's change."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from llmb.container import pairing
from llmb.llmbrun.screen import baseline, judge, network, stragglers

NODES = [f"n{i:02d}" for i in range(16)]
LEAVES = {n: f"leaf{i // 8}" for i, n in enumerate(NODES)}
PAIRS = [p for r in pairing.pair_rounds(NODES, 4) for p in r]


def pairs_of(slow_node: str | None = None, slow_link: int | None = None, spine: float = 0.0,
             seed: int = 1) -> list[dict[str, Any]]:
    """Pairs of 45 GB/s with 0.5 % noise over 10 repeats; one node or link 10 % slow."""
    import numpy as np

    rng = np.random.default_rng(seed)
    out = []
    for j, (a, b) in enumerate(PAIRS):
        truth = 45.0 * (0.9 if slow_node in (a, b) or j == slow_link else 1.0)
        truth *= 1 - spine * (LEAVES[a] != LEAVES[b])
        repeats = (truth * (1 + rng.normal(0, 0.005, 10))).tolist()
        out.append({"round": 1, "nodes": [a, b], "ranks": 16, "error": None,
                    "repeats": repeats, "busbw_gbps": float(np.median(repeats))})
    return out


def nodes_of() -> list[dict[str, Any]]:
    return [{"node": n, "gpus": [], "pairs": [], "reasons": [], "verdict": None}
            for n in NODES]


def test_pairs_of_the_schedule_give_the_fit():
    assert network.partners(PAIRS) == 4 and network.fits(PAIRS)
    assert not network.fits([p for r in pairing.pair_rounds(NODES, 2) for p in r])


def test_a_slow_nic_names_its_node_and_neither_partner():
    pairs = pairs_of(slow_node="n05")
    out = judge.judge(nodes_of(), pairs, "gpu", {})
    assert [(n["kind"], n["name"]) for n in out["named"]] == [("node", "n05")]
    assert out["suspects"] == ["n05"]


def test_a_slow_link_names_the_link_and_no_node():
    pairs = pairs_of(slow_link=7)
    out = judge.judge(nodes_of(), pairs, "gpu", {})
    assert [(n["kind"], n["name"]) for n in out["named"]] == [
        ("link", " - ".join(PAIRS[7]))]
    assert out["suspects"] == []


def test_the_spine_is_a_tier_where_the_leaves_are_known():
    pairs = pairs_of(spine=0.08)
    with_tiers = judge.judge(nodes_of(), copy.deepcopy(pairs), "gpu", {}, LEAVES)
    assert with_tiers["named"] == []
    fitted = network.fit([tuple(p["nodes"]) for p in pairs], [p["busbw_gbps"] for p in pairs],
                         0.002, LEAVES)
    assert fitted is not None and fitted.tiers["spine"] < -0.07
    assert max(abs(float(v)) for v in fitted.node) < 0.01  # no node carries the spine


def test_the_baseline_keeps_links_and_separates_the_cluster_from_one_link():
    before = {"mode": "gpu", "gpus_per_node": 8, "measured_by": "x", "nodes": nodes_of(),
              "pairs": pairs_of(seed=2), "named": [], "suspects": []}
    kept = baseline.of_screen(before)  # type: ignore[arg-type]
    assert len(kept["figures"][baseline.LINKS]["values"]) == len(PAIRS)
    later = pairs_of(slow_link=3, seed=3)
    for p in later:  # the whole cluster 2 % slower
        p["busbw_gbps"] *= 0.98
        p["repeats"] = [r * 0.98 for r in p["repeats"]]
    now = dict(before, pairs=later)
    named = baseline.named_of(baseline.compare(now, kept, "test"))  # type: ignore[arg-type]
    assert [(n["kind"], n["name"]) for n in named] == [
        ("link", baseline.link_name(PAIRS[3]))]


def test_stragglers_list_the_slowest_and_say_beyond_the_tolerance():
    values = {"a": 100.0, "b": 99.0, "c": 100.5, "d": 93.0, "e": 100.2}
    got = stragglers.slowest("memory_gbps", "gpu", values)
    assert [s["element"] for s in got] == ["d", "b", "a"]
    assert got[0]["beyond"] and not got[1]["beyond"]
    assert got[0]["below"] == round(1 - 93.0 / 100.0, 5)


def test_the_table_says_each_figures_slowest_and_whether_beyond_the_tolerance():
    from llmb.llmbrun.screen import render

    listed = stragglers.slowest("memory_gbps", "gpu", {"a GPU 0": 100.0, "a GPU 1": 93.0,
                                                        "b GPU 0": 100.5})
    listed += stragglers.slowest("pairs busbw_gbps", "link", {"a - b": 45.0, "b - c": 44.5})
    line = render.stragglers_line({"stragglers": listed})  # type: ignore[typeddict-item]
    assert line is not None and line.startswith("slowest (beyond 5% below the median: 1): ")
    assert "memory_gbps a GPU 1 7% below BEYOND" in line
    assert "pairs busbw_gbps b - c" in line and line.count("BEYOND") == 1


def test_the_spread_is_known_to_the_precision_the_resolution_allows_for():
    # 1.4826 MAD of n normal values varies by sqrt(MAD_VARIANCE / n) of sigma between samples
    import numpy as np

    rng = np.random.default_rng(7)
    spreads = [network.robust_sd(rng.normal(0.0, 1.0, 512)) for _ in range(2000)]
    assert abs(np.std(spreads) / (network.MAD_VARIANCE / 512) ** 0.5 - 1) < 0.08


def test_the_resolution_allows_for_the_floor_moving_between_screens():
    margin = 0.0305  # 3 %, in log units
    fixed = margin + network.DETECT_Z * (0.007 ** 2 + 0.007 ** 2) ** 0.5
    # a floor at the margin does not move with the spread's precision
    assert network.resolves(margin, margin, 0.007, 0.007, 512) == pytest.approx(fixed)
    # a floor of K spreads does: by sqrt(2 x 1.36 / 512) of itself, in both screens
    threshold = 0.033
    moves = threshold * (2 * network.MAD_VARIANCE / 512) ** 0.5
    got = network.resolves(threshold, margin, 0.007, 0.007, 512)
    assert got == pytest.approx(
        threshold + network.DETECT_Z * (2 * 0.007 ** 2 + moves ** 2) ** 0.5)
    assert got > threshold + network.DETECT_Z * (2 * 0.007 ** 2) ** 0.5
    # fewer values measure the spread less well: a larger resolution
    assert network.resolves(threshold, margin, 0.007, 0.007, 64) > got
