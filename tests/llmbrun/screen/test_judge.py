"""llmb.llmbrun.screen.judge: robust statistics (median, MAD) and the verdicts they give, on
screens built here: a slow GPU, a slow node, a slow link, a node that could not be measured,
a GPU below its datasheet figure, and noise that must not be named."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from llmb.llmbrun.screen import judge
from llmb.recipes import catalog, screenfacts

H100 = screenfacts.expectations(catalog.get_gpu_type("h100"))


def test_median_and_sigma_from_the_median_absolute_deviation():
    median, sigma = judge.robust([10.0, 11.0, 9.0, 10.0, 100.0])
    assert median == 10.0
    assert sigma == pytest.approx(1.4826 * 1.0)  # deviations 0 1 1 0 90: MAD 1, not moved by 100


@pytest.mark.parametrize(("others", "tolerance", "floor"), [
    # a tight population: the relative tolerance decides (10 % below 100)
    ([100.0, 101.0, 99.0, 100.0], 0.10, 90.0),
    # a spread-out one: 3.5 sigma below the median decides (the lower of the two)
    ([100.0, 80.0, 120.0, 100.0], 0.10, 100.0 - 3.5 * 1.4826 * 10.0),
])
def test_peer_floor_is_the_lower_of_the_relative_and_the_spread_floor(others, tolerance, floor):
    got = judge.peer_floor(others, tolerance)
    assert got is not None
    assert got[0] == pytest.approx(floor) and got[1] == 100.0
    assert judge.peer_floor([], 0.1) is None


def test_leave_one_out_finds_one_bad_value_among_four():
    values = [100.0, 102.0, 30.0, 98.0]
    floors = judge.peer_floors(values, None, 0.10)
    below = [v < f[0] for v, f in zip(values, floors, strict=True) if f]
    assert below == [False, False, True, False]
    # the others are compared with a median the bad value is part of, and still pass


def test_a_large_population_shares_one_floor():
    values = [100.0 + (i % 7) for i in range(judge.LEAVE_ONE_OUT + 1)]
    floors = judge.peer_floors(values, None, 0.10)
    assert len(set(floors)) == 1


def test_disjoint_peers_of_pairs():
    pairs = [{"nodes": ["a", "d"]}, {"nodes": ["b", "c"]}, {"nodes": ["a", "c"]},
             {"nodes": ["d", "b"]}]
    assert judge.disjoint_peers(pairs) == [[1], [0], [3], [2]]
    three = [{"nodes": ["a", "b"]}, {"nodes": ["a", "c"]}, {"nodes": ["b", "c"]}]
    assert judge.disjoint_peers(three) == [[1, 2], [0, 2], [0, 1]]  # none disjoint: all


# --- whole screens ----------------------------------------------------------------------------

def gpu(local: int, matmul: float = 700.0, memory: float = 3000.0) -> dict[str, Any]:
    return {"rank": local, "local_rank": local, "index": local, "figures": {
        "matmul_bf16_tflops": matmul, "memory_gbps": memory}, "notes": [], "error": None}


def node(name: str, busbw: float = 380.0, gpus: list[dict[str, Any]] | None = None
         ) -> dict[str, Any]:
    return {"node": name, "verdict": None, "reasons": [], "error": None,
            "gpus": gpus if gpus is not None else [gpu(i) for i in range(8)],
            "allreduce": {"ranks": 8, "error": None, "busbw_gbps": busbw}, "pairs": []}


def pair(rnd: int, a: str, b: str, busbw: float = 45.0) -> dict[str, Any]:
    return {"round": rnd, "nodes": [a, b], "busbw_gbps": busbw, "error": None}


def screen(**slow: float) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Four healthy nodes a..d in two rounds; `slow` maps a pair "ad" to its busbw."""
    nodes = [node(n) for n in "abcd"]
    pairs = [pair(1, "a", "d"), pair(1, "b", "c"), pair(2, "a", "c"), pair(2, "d", "b")]
    for p in pairs:
        p["busbw_gbps"] = slow.get("".join(p["nodes"]), p["busbw_gbps"])
    return nodes, pairs


def verdicts(nodes: list[dict[str, Any]]) -> dict[str, str]:
    return {n["node"]: n["verdict"] for n in nodes}


def test_a_healthy_screen_names_nothing():
    nodes, pairs = screen()
    # a little noise everywhere, as real GPUs have
    for i, n in enumerate(nodes):
        n["allreduce"]["busbw_gbps"] += i
        for g in n["gpus"]:
            g["figures"]["matmul_bf16_tflops"] += (i * 7 + g["local_rank"]) % 5
    out = judge.judge(nodes, pairs, "gpu", H100)
    assert (out["named"], out["suspects"]) == ([], [])
    assert not any(s["beyond"] for s in out["stragglers"])  # a little noise is no straggler
    assert set(verdicts(nodes).values()) == {"pass"}
    assert {p["verdict"] for p in pairs} == {"pass"}


def test_a_slow_gpu_names_its_node_with_figure_floor_and_peers_median():
    nodes, pairs = screen()
    nodes[1]["gpus"][5]["figures"]["memory_gbps"] = 2600.0  # above 3350 less 25 %
    out = judge.judge(nodes, pairs, "gpu", H100)
    assert out["suspects"] == ["b"]
    (named,) = out["named"]
    assert named["kind"] == "gpu" and named["name"] == "b GPU 5"
    assert (named["figure"], named["value"], named["peers_median"]) == (
        "memory_gbps", 2600.0, 3000.0)
    assert named["floor"] == pytest.approx(2700.0) and named["why"] == "far below its peers"
    assert nodes[1]["gpus"][5]["verdict"] == "slow" and nodes[1]["verdict"] == "slow"
    assert nodes[1]["reasons"] == ["GPU 5: memory_gbps 2600 < 2700: far below its peers"]


def test_every_gpu_below_its_datasheet_figure_is_named_with_its_source():
    nodes, pairs = screen()
    for n in nodes:
        for g in n["gpus"]:
            g["figures"]["matmul_bf16_tflops"] = 450.0  # all alike, all below 989 x 0.5
    out = judge.judge(nodes, pairs, "gpu", H100)
    assert len(out["named"]) == 32 and out["suspects"] == ["a", "b", "c", "d"]
    first = out["named"][0]
    assert first["expected"] == 989.0 and first["floor"] == pytest.approx(989 * 0.5)
    assert "NVIDIA H100 Tensor Core GPU datasheet" in first["why"]
    # the same figures from the CPU path are held to no GPU's expectation
    nodes, pairs = screen()
    for n in nodes:
        for g in n["gpus"]:
            g["figures"]["matmul_bf16_tflops"] = 450.0
    assert judge.judge(nodes, pairs, "cpu", H100)["suspects"] == []


def test_a_node_slow_with_every_partner_is_named_and_its_partners_are_not():
    nodes, pairs = screen(bc=9.0, ac=11.0)  # c's two pairs; a and b are fine elsewhere
    out = judge.judge(nodes, pairs, "gpu", H100)
    assert out["suspects"] == ["c"]
    assert verdicts(nodes) == {"a": "pass", "b": "pass", "c": "slow", "d": "pass"}
    (named,) = out["named"]
    assert (named["kind"], named["name"], named["figure"], named["value"]) == (
        "node", "c", "pairs busbw_gbps", 11.0)
    assert named["peers_median"] == 45.0
    assert nodes[2]["reasons"] == ["slow with every partner (b, a)"]


def test_a_slow_link_is_named_without_a_suspect():
    nodes, pairs = screen(bc=9.0)  # b and c are fine with their other partners
    out = judge.judge(nodes, pairs, "gpu", H100)
    assert out["suspects"] == []
    (named,) = out["named"]
    assert (named["kind"], named["name"]) == ("link", "b - c")
    assert "both nodes are fine with their other partners" in named["why"]
    assert [p["link"] for p in pairs] == [False, True, False, False]


def test_a_node_with_a_slow_nvlink_all_reduce():
    nodes, pairs = screen()
    nodes[3]["allreduce"]["busbw_gbps"] = 250.0  # below 450 less 30 % (315)
    out = judge.judge(nodes, pairs, "gpu", H100)
    assert out["suspects"] == ["d"]
    (named,) = out["named"]
    assert named["expected"] == 450.0 and named["floor"] == pytest.approx(315.0)
    assert nodes[3]["allreduce"]["verdict"] == "slow"


def test_a_node_that_could_not_be_measured_fails():
    nodes, pairs = screen()
    nodes[0]["error"] = "none of its tasks reported"
    for g in nodes[0]["gpus"]:
        g["figures"], g["error"] = {}, "not measured"
    nodes[0]["allreduce"] = {"ranks": 8, "error": "no result", "busbw_gbps": None}
    for p in pairs:
        if "a" in p["nodes"]:
            p["busbw_gbps"], p["error"] = None, "no result"
    out = judge.judge(nodes, pairs, "gpu", H100)
    assert out["suspects"] == ["a"]
    assert verdicts(nodes)["a"] == "fail"
    assert [n["name"] for n in out["named"]] == ["a"]
    assert out["named"][0]["why"].startswith("none of its tasks reported")
    # its partners' pairs with it failed; their other pairs are fine: they pass
    assert verdicts(nodes) == {"a": "fail", "b": "pass", "c": "pass", "d": "pass"}


def test_one_gpu_lacking_a_figure_the_others_have_fails():
    nodes, pairs = screen()
    broken = copy.deepcopy(nodes[2]["gpus"][0])
    broken["figures"].pop("memory_gbps")
    broken["error"] = "memory: RuntimeError: CUDA error"
    nodes[2]["gpus"][0] = broken
    out = judge.judge(nodes, pairs, "gpu", H100)
    assert out["suspects"] == ["c"] and verdicts(nodes)["c"] == "fail"
    assert "GPU 0: memory: RuntimeError: CUDA error" in nodes[2]["reasons"]
