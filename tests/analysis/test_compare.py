"""llmb.analysis.compare: each configuration with a figure in both trees, its change in percent
and whether that change is larger than either tree's own spread; and what found no partner.

The configurations are made by llmb.analysis.verdicts.configurations from run results, as the
analyzer makes them; tests/analysis/test_verdicts.py runs the same comparison end to end on the
fixture trees."""

from __future__ import annotations

from typing import Any

import pytest
from llmb.analysis import compare, verdicts

LLAMA8 = "llama3.1/8b/fp8/h100/8gpu/weak/gbs128"
NEMOTRON15 = "nemotron/15b/fp8/h100/32gpu/weak/gbs128"
IDENTITY = {LLAMA8: ("llama3.1", "8b", "fp8", "h100", 8, 9.33, 8192),
            NEMOTRON15: ("nemotron", "15b", "fp8", "h100", 32, 1.98, 4096)}


def run(key: str, mean: float | None, std: float = 0.0, status: str = "Success",
        n: int = 0) -> dict[str, Any]:
    """One run's result as the analyzer reports it (the fields configurations() reads)."""
    recipe, size, dtype, gpu, gpus, ref, seq = IDENTITY[key]
    return {"config_key": key, "filename": f"{key}/log-x_{n}_0.out", "status": status,
            "recipe": recipe, "model_size": size, "dtype": dtype, "gpu_type": gpu,
            "num_gpus": gpus, "scaling": "weak", "global_batch_size": 128, "seq_length": seq,
            "smoke_test": False, "experiment": key, "time_mean": mean,
            "time_std_dev": std if mean is not None else None, "reference_step_time": ref,
            "reference_source": "seed 003", "mfu": None, "tokens_per_second": None}


def tree(*runs: dict[str, Any]) -> list[dict[str, Any]]:
    return verdicts.configurations(runs)


def one(now: list[dict[str, Any]], before: list[dict[str, Any]]) -> dict[str, Any]:
    [entry] = compare.compare(now, before)
    return entry


@pytest.mark.parametrize(("before", "now", "delta"), [
    ([10.0], [10.5], 5.0),  # slower: positive
    ([10.0], [9.0], -10.0),  # faster: negative
    ([3.0], [3.0], 0.0),
    ([9.0, 9.5, 10.0], [9.7, 9.9, 10.1, 10.3], (10.0 - 9.5) / 9.5 * 100),  # medians
])
def test_delta_is_the_change_of_the_medians_in_percent(before: list[float], now: list[float],
                                                       delta: float) -> None:
    entry = one(tree(*(run(LLAMA8, t, n=i) for i, t in enumerate(now))),
                tree(*(run(LLAMA8, t, n=i) for i, t in enumerate(before))))
    assert entry["delta_pct"] == pytest.approx(delta, abs=5e-4)
    assert entry["delta_pct"] == round(entry["delta_pct"], 3)
    assert (entry["baseline_runs"], entry["runs"]) == (len(before), len(now))


@pytest.mark.parametrize(("before", "now", "significant", "spread"), [
    # one clean run each: no spread, any change counts
    ([(10.0, 0.0)], [(10.1, 0.0)], True, 0.0),
    # the baseline's runs span 10.0-10.4 (4% of its median 10.2): 3% is inside the noise
    ([(10.0, 0.0), (10.4, 0.0)], [(10.5, 0.0)], False, 0.4 / 10.2 * 100),
    # ... and 6% is not
    ([(10.0, 0.0), (10.4, 0.0)], [(10.8, 0.0)], True, 0.4 / 10.2 * 100),
    # a step jitter of 1.5% counts twice: a 2% change is inside 3%
    ([(10.0, 0.0)], [(10.2, 0.153)], False, 2 * 0.153 / 10.2 * 100),
    # the larger of the two trees' spreads decides
    ([(10.0, 0.25)], [(10.4, 0.0)], False, 2 * 0.25 / 10.0 * 100),
])
def test_significant_only_beyond_either_trees_own_spread(
        before: list[tuple[float, float]], now: list[tuple[float, float]], significant: bool,
        spread: float) -> None:
    entry = one(tree(*(run(LLAMA8, m, s, n=i) for i, (m, s) in enumerate(now))),
                tree(*(run(LLAMA8, m, s, n=i) for i, (m, s) in enumerate(before))))
    assert entry["significant"] is significant
    assert entry["spread_pct"] == pytest.approx(spread, abs=5e-4)


def test_an_entry_names_the_configuration_and_both_figures() -> None:
    entry = one(tree(run(LLAMA8, 9.5), run(LLAMA8, 9.1, status="Failed", n=1)),
                tree(run(LLAMA8, 9.33)))
    assert {k: entry[k] for k in verdicts.IDENTITY_FIELDS} == {
        "recipe": "llama3.1", "model_size": "8b", "dtype": "fp8", "gpu_type": "h100",
        "num_gpus": 8, "scaling": "weak", "global_batch_size": 128, "seq_length": 8192,
        "smoke_test": False}
    assert entry["config_key"] == LLAMA8
    assert (entry["baseline_time_median"], entry["time_median"]) == (9.33, 9.5)
    assert (entry["baseline_runs"], entry["runs"]) == (1, 1)  # the Failed run is no figure
    assert entry["baseline_pct_of_reference"] == pytest.approx(100.0)
    assert entry["pct_of_reference"] == pytest.approx(9.33 / 9.5 * 100, abs=1e-3)


def test_only_configurations_with_a_figure_in_both_trees_are_compared() -> None:
    now = tree(run(LLAMA8, 9.4), run(NEMOTRON15, 2.0, status="Failed"))
    before = tree(run(LLAMA8, 9.3), run(NEMOTRON15, 1.99))
    compared = compare.compare(now, before)
    assert [c["config_key"] for c in compared] == [LLAMA8]
    assert compare.unmatched(now, before, compared) == {"only_current": 1, "only_baseline": 1}
    # and the other way round: no figure in the baseline
    failed_before = tree(run(NEMOTRON15, 1.99, status="Invalid"))
    assert compare.compare(tree(run(NEMOTRON15, 2.0)), failed_before) == []


def test_configurations_in_one_tree_only_are_counted_not_compared() -> None:
    now = tree(run(LLAMA8, 9.4))
    before = tree(run(NEMOTRON15, 1.99), run(NEMOTRON15, 2.01, n=1))
    assert compare.compare(now, before) == []
    assert compare.unmatched(now, before, []) == {"only_current": 1, "only_baseline": 1}
    assert compare.compare([], before) == [] and compare.compare(now, []) == []
    assert compare.unmatched(now, [], []) == {"only_current": 1, "only_baseline": 0}


def test_the_order_is_the_current_trees() -> None:
    now = tree(run(NEMOTRON15, 2.0), run(LLAMA8, 9.4))
    before = tree(run(LLAMA8, 9.3), run(NEMOTRON15, 1.99))
    assert [c["config_key"] for c in compare.compare(now, before)] == [NEMOTRON15, LLAMA8]
