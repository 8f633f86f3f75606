"""llmb.llmbrun.screen.precision: a figure's value and noise from its repeats, the floor they
give, the resolution a screen states; and the judge using them on synthetic screens
(tests/helpers/screensim.py: 1 % noise per repeat, 2 % for pairs)."""

from __future__ import annotations

import math
import statistics

import pytest
import screensim
from llmb.llmbrun.screen import judge, precision


def test_value_resists_fewer_than_half_the_repeats_disturbed():
    assert precision.value_of([100.0, 101.0, 99.0, 100.0, 40.0]) == 100.0
    assert precision.value_of([100.0, 101.0, 99.0, 60.0, 40.0]) == 99.0  # two of five
    assert precision.value_of([10.0, 20.0]) == 15.0
    assert precision.error_factor(8) == pytest.approx(math.sqrt(math.pi / 16))
    assert precision.error_factor(2) == pytest.approx(math.sqrt(0.5))


def test_pooled_noise_recovers_the_noise_of_one_repeat():
    import numpy as np

    rng = np.random.default_rng(7)
    series = [list(50.0 * (1 + rng.normal(0, 0.02, 10))) for _ in range(400)]
    series[0] = [50.0] * 9 + [5.0]  # one element that flaps does not move it
    assert precision.pooled_noise(series) == pytest.approx(0.02, rel=0.08)
    assert precision.pooled_noise([[1.0], None]) is None


def test_k_keeps_a_whole_screen_free_of_false_suspects():
    assert precision.k_for(4) == precision.MIN_K
    assert precision.k_for(2048) == pytest.approx(
        statistics.NormalDist().inv_cdf(1 - 0.01 / precision.FIGURES / 2048))
    assert precision.k_for(2048) < precision.k_for(8192)


def test_floor_is_the_margin_or_k_sigmas_whichever_is_further_down():
    # no standard error: the fixed rule, as before repeats
    assert precision.floor_from(100.0, 2.0, 10, 0.10, 3.5, None) == 90.0
    assert precision.floor_from(100.0, 4.0, 10, 0.10, 3.5, None) == pytest.approx(86.0)
    # quiet peers and a precise value: the margin decides
    assert precision.floor_from(100.0, 0.1, 1000, 0.03, 4.0, 0.004) == pytest.approx(97.0)
    # noisy: K sigmas, sigma widened for a median of few peers
    expected = 100.0 * (1 - 4.0 * 0.02 * math.sqrt(1 + math.pi / 6))
    assert precision.floor_from(100.0, 0.5, 3, 0.03, 4.0, 0.02) == pytest.approx(expected)


def test_rule_needs_repeats_on_every_value():
    rule = precision.rule_for([[1.0, 1.1, 0.9], [1.0, 1.0, 1.05]], "gpu", 0.10)
    assert rule.margin == precision.MARGIN["gpu"] and rule.errors is not None
    assert rule.errors[0] == pytest.approx(rule.noise * math.sqrt(math.pi / 6))
    legacy = precision.rule_for([[1.0, 1.1, 0.9], None], "gpu", 0.10)
    assert (legacy.margin, legacy.k, legacy.errors) == (0.10, precision.MIN_K, None)


def test_resolution_is_the_threshold_plus_the_noise_at_95_percent():
    rule = precision.Rule(0.03, 4.0, (0.005,) * 1000, 0.01, 5)
    values = [100.0 + (i % 3) * 0.1 for i in range(1000)]
    every = [list(range(1000))] * 1000
    got = precision.resolution("memory_gbps", "gpu", values, rule, every)
    assert got is not None
    sigma = precision.widened(0.005, 1000)
    assert got.threshold == pytest.approx(max(0.03, 4.0 * sigma))
    # the peers' spread and the value's standard error both move where it falls
    assert got.resolves == pytest.approx(
        got.threshold + 1.6449 * math.hypot(got.spread, 0.005), rel=1e-3)
    both = precision.resolution("pairs", "network", values, rule, every, must_name=2)
    assert both is not None and both.resolves > got.resolves  # both pairs must be named
    assert precision.resolution("x", "gpu", values, precision.Rule(0.1, 3.5, None, None, 1),
                                every) is None


def test_resolution_takes_the_spread_of_each_values_own_peers():
    # four pairs, one slow: its peers' spread is what the judge saw, not the slow one's
    rule = precision.Rule(0.30, 3.5, (0.05,) * 4, 0.1, 7)
    values, disjoint = [1.0, 0.5, 0.98, 1.02], [[1], [0], [3], [2]]
    got = precision.resolution("pairs", "link", values, rule, disjoint)
    assert got is not None
    assert got.spread == 0.0 and got.threshold == pytest.approx(
        max(0.30, 3.5 * 0.05 * math.sqrt(2)))


# --- the judge with repeats -------------------------------------------------------------------

def named_names(nodes, pairs) -> list[str]:
    return [n["name"] for n in judge.judge(nodes, pairs, "gpu", screensim.EXPECTATIONS)["named"]]


def without_repeats(nodes, pairs):
    for node in nodes:
        node["allreduce"].pop("repeats")
        for gpu in node["gpus"]:
            gpu.pop("repeats")
    for pair in pairs:
        pair.pop("repeats")
    return nodes, pairs


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_healthy_screen_with_repeats_names_nothing(seed):
    nodes, pairs, _ = screensim.screen(32, "none", 0.0, seed)
    assert named_names(nodes, pairs) == []
    resolved = {(r["figure"], r["kind"]): r for r in judge.resolution(nodes, pairs, "gpu")}
    assert resolved[("memory_gbps", "gpu")]["noise"] == pytest.approx(0.01, rel=0.2)
    assert resolved[("pairs busbw_gbps", "link")]["noise"] == pytest.approx(0.02, rel=0.2)
    # K shares the screen's 1 % among its six figures, the value is a median: about 5 %
    assert all(r["resolves"] < 0.055 for r in resolved.values())


@pytest.mark.parametrize("kind", screensim.FAULTS)
def test_a_five_percent_fault_is_named_with_repeats_and_not_without(kind):
    nodes, pairs, fault = screensim.screen(32, kind, 0.05, 11)
    verdicts = judge.judge(nodes, pairs, "gpu", screensim.EXPECTATIONS)
    assert [fault.matches(n) for n in verdicts["named"]] == [True]
    assert verdicts["suspects"] == ([fault.node] if fault.suspect else [])
    nodes, pairs, fault = screensim.screen(32, kind, 0.05, 11)
    assert named_names(*without_repeats(nodes, pairs)) == []  # the fixed 10 % rule
