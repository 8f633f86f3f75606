"""llmb.llmbrun.screen.results: the job's files (written here through the probe's own Record, as
the tasks write them) put together into screen.json's content: nodes, pairs, the all-nodes
all-reduce, the rounds' wall times, what measured; and what is missing becoming a verdict."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import screenfiles
from llmb.container import screenrun
from llmb.llmbrun.screen import precision
from llmb.llmbrun.screen import results as screenresults
from llmb.recipes import catalog
from llmb.shared import records

H100_GPU = catalog.get_gpu_type("h100")

NODES, PER_NODE = screenfiles.NODES, screenfiles.PER_NODE
write_screen = screenfiles.write_screen


def doc_of(folder: Path, allocated: list[str] = NODES) -> dict[str, Any]:
    doc = screenresults.document(folder, H100_GPU, allocated, PER_NODE)
    assert doc is not None
    return doc


def test_a_complete_screen(tmp_path):
    write_screen(tmp_path)
    doc = doc_of(tmp_path)
    assert [n["node"] for n in doc["nodes"]] == NODES
    assert [len(n["gpus"]) for n in doc["nodes"]] == [2, 2, 2, 2]
    first = doc["nodes"][0]
    assert first["gpus"][1]["figures"] == {"matmul_fp32_tflops": 0.0101, "memory_gbps": 3.0}
    assert first["allreduce"]["busbw_gbps"] == 0.1 and first["allreduce"]["bytes"] == 1 << 20
    assert [(p["round"], p["nodes"]) for p in doc["pairs"]] == [
        (1, ["node1", "node4"]), (1, ["node2", "node3"]), (2, ["node1", "node3"]),
        (2, ["node4", "node2"])]
    assert first["pairs"] == [{"round": 1, "with": "node4", "busbw_gbps": 0.1},
                              {"round": 2, "with": "node3", "busbw_gbps": 0.1}]
    assert doc["all_nodes"]["nodes"] == NODES and doc["all_nodes"]["ranks"] == 8
    assert [r["name"] for r in doc["rounds"]] == ["gpus", "nodes", "pairs-1", "pairs-2", "all"]
    assert (doc["mode"], doc["measured_by"], doc["backend"]) == ("cpu", "torch.distributed",
                                                                 "gloo")
    assert doc["expectations"] == {}  # the CPU is held to its peers only
    assert doc["peers"] == {"k": 3.5, "tolerance": 0.65}
    assert (doc["suspects"], doc["named"]) == ([], [])
    assert {n["verdict"] for n in doc["nodes"]} == {"pass"}


def test_a_screen_of_two_leaves_pairs_under_each_leaf_first_and_records_them(tmp_path):
    leaves = {"node1": "s0", "node2": "s0", "node3": "s1", "node4": "s1"}
    write_screen(tmp_path, leaves=leaves)
    doc = screenresults.document(tmp_path, H100_GPU, NODES, PER_NODE, leaves)
    assert doc is not None
    assert [(p["round"], p["nodes"]) for p in doc["pairs"]] == [
        (1, ["node1", "node2"]), (1, ["node3", "node4"]), (2, ["node2", "node3"]),
        (2, ["node4", "node1"])]
    assert all(p.get("busbw_gbps") == 0.1 for p in doc["pairs"])  # every group found
    assert [n["leaf"] for n in doc["nodes"]] == ["s0", "s0", "s1", "s1"]
    assert (doc["named"], doc["suspects"]) == ([], [])
    records.check(screenresults.ScreenDocument, doc)
    without = doc_of(tmp_path)  # read by the round-robin the plan did not follow
    assert "leaf" not in without["nodes"][0]
    assert any(p.get("error") for p in without["pairs"])


def test_figures_measured_in_repeats(tmp_path):
    write_screen(tmp_path, repeats=5)
    doc = doc_of(tmp_path)
    gpu = doc["nodes"][1]["gpus"][0]
    assert gpu["repeats"]["memory_gbps"] == screenfiles.jitter(3.0, 5, 2)
    assert gpu["figures"]["memory_gbps"] == pytest.approx(
        precision.value_of(gpu["repeats"]["memory_gbps"]))
    own = doc["nodes"][0]["allreduce"]
    assert own["busbw_gbps"] == pytest.approx(precision.value_of(own["repeats"]))
    assert own["algbw_gbps"] == pytest.approx(own["busbw_gbps"] / (2 * 1 / 2))  # 2 ranks
    resolved = {(r["figure"], r["kind"]) for r in doc["resolution"]}
    assert resolved == {("matmul_fp32_tflops", "gpu"), ("memory_gbps", "gpu"),
                        ("all-reduce busbw_gbps", "node"), ("pairs busbw_gbps", "link"),
                        ("pairs busbw_gbps", "network")}
    assert all(r["repeats"] == 5 and r["margin"] == precision.MARGIN["cpu"]
               for r in doc["resolution"])
    assert (doc["suspects"], doc["named"]) == ([], [])


def test_nccl_tests_cycles_are_the_repeats(tmp_path):
    write_screen(tmp_path, tool=screenrun.NCCL_TESTS_TOOL)
    where = tmp_path / screenrun.NCCL_TESTS_DIR
    where.mkdir()
    header = [screenfiles.nccl_tests_rank(r, n, r % 2) for r, n in
              enumerate(["node1", "node1", "node4", "node4"])]
    cycles = [screenfiles.nccl_tests_row(1 << 30, (16000.0, 67.0, b * 0.99, "0"),
                                         (16000.0, 67.0, b, "0"))
              for b in (100.0, 101.0, 99.0, 100.5, 60.0)]  # the last cycle disturbed
    (where / "pairs-1.0.out").write_text("\n".join([*header, *cycles, ""]))
    pair = doc_of(tmp_path)["pairs"][0]
    assert pair["repeats"] == [100.0, 101.0, 99.0, 100.5, 60.0]
    assert pair["busbw_gbps"] == 100.0  # their median


def test_a_node_slow_with_both_partners(tmp_path):
    write_screen(tmp_path, slow={"pairs-1:node2,node3": 0.01, "pairs-2:node1,node3": 0.012})
    doc = doc_of(tmp_path)
    assert doc["suspects"] == ["node3"]
    assert [n["verdict"] for n in doc["nodes"]] == ["pass", "pass", "slow", "pass"]
    assert [p["verdict"] for p in doc["pairs"]] == ["pass", "slow", "slow", "pass"]


def test_what_never_reported_fails(tmp_path):
    # node4 was allocated but none of its tasks wrote anything; a pair leader lost its result
    write_screen(tmp_path, silent=("node4",), skip_groups=("pairs-1:node2,node3",))
    doc = doc_of(tmp_path, NODES)
    node4 = doc["nodes"][3]
    assert node4["verdict"] == "fail" and node4["gpus"] == []
    assert node4["reasons"] == [
        "none of its tasks reported (they did not start, or died first)",
        "its own all-reduce failed: no result (the task that led this group did not report it)"]
    pair = next(p for p in doc["pairs"] if p["nodes"] == ["node2", "node3"])
    assert pair["verdict"] == "fail"
    assert pair["error"].startswith("no result (the task that led this group")
    assert "node4" in doc["suspects"]


def test_no_task_described_the_run(tmp_path):
    assert screenresults.document(tmp_path, H100_GPU, NODES, PER_NODE) is None
    (tmp_path / "ranks").mkdir()
    (tmp_path / "ranks" / "rank-00000.json").write_text("{not json")
    assert screenresults.document(tmp_path, H100_GPU, NODES, PER_NODE) is None


NCCL_OUT = "\n".join([
    screenfiles.nccl_tests_rank(0, "node1", 0), screenfiles.nccl_tests_rank(1, "node1", 1),
    screenfiles.nccl_tests_rank(2, "node4", 0), screenfiles.nccl_tests_rank(3, "node4", 1),
    screenfiles.nccl_tests_row(1 << 30, (16000.1, 67.11, 100.66, "0"),
                               (15990.2, 67.15, 100.72, "0")), ""])


def test_groups_measured_by_nccl_tests(tmp_path):
    write_screen(tmp_path, tool=screenrun.NCCL_TESTS_TOOL)
    where = tmp_path / screenrun.NCCL_TESTS_DIR
    where.mkdir()
    (where / "pairs-1.0.out").write_text(NCCL_OUT)  # node1 + node4: 4 ranks
    (where / "nodes.0.out").write_text(NCCL_OUT)  # one node has 2 ranks, not 4
    (where / "walls.txt").write_text("nodes 100.0 103.5\npairs-1 103.5 110.0\n")
    doc = doc_of(tmp_path)
    assert doc["measured_by"] == "nccl-tests all_reduce_perf"
    pair = doc["pairs"][0]
    assert (pair["nodes"], pair["busbw_gbps"], pair["algbw_gbps"], pair["error"]) == (
        ["node1", "node4"], 100.72, 67.15, None)
    node1 = doc["nodes"][0]["allreduce"]
    assert node1["error"] == "all_reduce_perf reported 4 rank(s), not 2"
    missing = doc["nodes"][1]["allreduce"]["error"]
    assert missing.startswith("all_reduce_perf's output cannot be read")
    assert doc["rounds"][-2:] == [{"name": "nodes", "wall_s": 3.5},
                                  {"name": "pairs-1", "wall_s": 6.5}]


@pytest.mark.parametrize("content", [b"\xff\xfe", b"[1, 2]", b'{"rank": "0", "node": 1}'])
def test_a_foreign_rank_file_is_skipped(tmp_path, content):
    write_screen(tmp_path)
    (tmp_path / "ranks" / "rank-99999.json").write_bytes(content)
    assert len(screenresults.read_ranks(tmp_path)) == 8


@pytest.mark.parametrize(("change", "field"), [
    (lambda d: d["named"].append({"kind": "node", "node": "n1", "figure": "x"}), "named[0]"),
    (lambda d: d["named"].append({"kind": "link", "name": "n1"}), "named[0]"),
    (lambda d: d["nodes"][0].pop("verdict"), "nodes[0]"),
])
def test_what_the_report_prints_of_a_screen_is_required(tmp_path: Path, change: Any,
                                                         field: str) -> None:
    """A hand-edited screen.json without a named entry's name or why, or a node's verdict, is
    refused by its type (one line naming the field), not a KeyError in report or archive."""
    doc = screenfiles.screen_json(tmp_path)
    change(doc)
    with pytest.raises(records.BadRecord) as err:
        screenresults.checked(doc)
    assert err.value.field.startswith(field), err.value
