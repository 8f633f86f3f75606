"""llmb.llmbrun.screen.confirm: which elements the confirm pass measures again and beside which
healthy peers (a GPU, a node's own all-reduce, a node's network, a link; odd node counts;
nothing named, no plan), the job's step that writes the plan (run as the job script runs it),
and the second pass merged into the verdict: slow again stays named, fast again is cleared and
said. Both passes' files are written through the tasks' own Record (tests/helpers/
screenfiles.py) and judged by the real judge."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import screenfiles
from llmb.container import screenrun
from llmb.llmbrun.screen import baseline as screenbaseline
from llmb.llmbrun.screen import confirm
from llmb.llmbrun.screen import job as screenjob
from llmb.llmbrun.screen import render as screenrender
from llmb.llmbrun.screen import results as screenresults
from llmb.recipes import catalog
from llmb.shared.errors import LlmbError
from paths import COMMON

H100 = catalog.get_gpu_type("h100")
PER_NODE = screenfiles.PER_NODE
EIGHT = [f"node{i}" for i in range(1, 9)]


def first_pass(folder: Path, nodes: list[str], **kwargs: Any) -> dict[str, Any]:
    """A first pass's files in folder, judged; its plan as llmb-run screen writes it."""
    screenfiles.write_screen(folder, nodes=nodes, repeats=5, **kwargs)
    (folder / screenrun.PLAN_FILE).write_text(json.dumps(
        screenjob.plan(True, None, PER_NODE, "h100")))
    doc = screenresults.document(folder, H100, nodes, PER_NODE)
    assert doc is not None
    return doc


def slow_gpu(folder: Path, rank: int, figure: str, factor: float) -> None:
    """One task's figure (and its repeats) made `factor` as fast, as a slow GPU leaves it."""
    path = folder / screenrun.RANKS_DIR / f"rank-{rank:05d}.json"
    record = json.loads(path.read_text())
    record["figures"][figure] *= factor
    record["repeats"][figure] = [r * factor for r in record["repeats"][figure]]
    path.write_text(json.dumps(record))


def names(doc: dict[str, Any]) -> list[tuple[str, str, str | None]]:
    return [(n["kind"], n["name"], n.get("figure")) for n in doc["named"]]


# --- which elements, which peers --------------------------------------------------------------

def test_nothing_named_no_plan(tmp_path):
    doc = first_pass(tmp_path, EIGHT)
    assert doc["named"] == [] and confirm.choose(doc) is None


def test_a_slow_gpu_is_measured_again_on_its_node_beside_healthy_peers(tmp_path):
    screenfiles.write_screen(tmp_path, nodes=EIGHT, repeats=5)
    slow_gpu(tmp_path, 5, "memory_gbps", 0.5)  # node3's second task
    doc = screenresults.document(tmp_path, H100, EIGHT, PER_NODE)
    assert doc is not None and names(doc) == [("gpu", "node3 GPU 1", "memory_gbps")]
    chosen = confirm.choose(doc)
    assert chosen is not None
    assert chosen["targets"] == [{"kind": "gpu", "name": "node3 GPU 1",
                                  "figure": "memory_gbps"}]
    # every GPU of node3 (its healthy GPU is a peer), and three healthy nodes spread over the
    # healthy ones in name order; a GPU needs no all-reduce again
    assert chosen["peers"] == ["node1", "node4", "node6"]
    assert chosen["nodes"] == ["node1", "node3", "node4", "node6"]
    assert chosen["phases"] == []


def test_a_slow_node_all_reduce_is_measured_again_with_its_peers_own(tmp_path):
    doc = first_pass(tmp_path, EIGHT, slow={"nodes:node3": 0.01})
    assert names(doc) == [("node", "node3", "all-reduce busbw_gbps")]
    chosen = confirm.choose(doc)
    assert chosen is not None
    assert chosen["phases"] == [{"name": "nodes", "groups": [["node1"], ["node3"], ["node4"],
                                                             ["node6"]]}]


def pairs_of(chosen: confirm.ConfirmPlan) -> list[frozenset[str]]:
    return [frozenset(g) for p in chosen["phases"] if p["name"].startswith("pairs-")
            for g in p["groups"]]


def every_pair(nodes: list[str]) -> set[frozenset[str]]:
    return {frozenset((a, b)) for a in nodes for b in nodes if a < b}


def test_a_slow_network_meets_every_peer_and_the_peers_each_other(tmp_path):
    doc = first_pass(tmp_path, screenfiles.NODES,
                     slow={"pairs-1:node2,node3": 0.01, "pairs-2:node1,node3": 0.012})
    assert names(doc) == [("node", "node3", "pairs busbw_gbps")]
    chosen = confirm.choose(doc)
    assert chosen is not None
    # four nodes: node3 and the three others, every pair of them once, in three rounds
    assert chosen["nodes"] == screenfiles.NODES and chosen["peers"] == ["node1", "node2",
                                                                        "node4"]
    pairs = pairs_of(chosen)
    assert sorted(map(sorted, pairs)) == sorted(map(sorted, every_pair(screenfiles.NODES)))
    assert [p["name"] for p in chosen["phases"]] == ["pairs-1", "pairs-2", "pairs-3"]


def test_a_slow_link_meets_again_beside_healthy_pairs_odd_count(tmp_path):
    doc = first_pass(tmp_path, EIGHT, slow={"pairs-1:node1,node8": 0.01})
    assert names(doc) == [("link", "node1 - node8", "all-reduce busbw_gbps")]
    chosen = confirm.choose(doc)
    assert chosen is not None
    # five nodes (an odd count: one sits out each round): the link's two and three healthy
    # peers that are neither; every pair once, the link among them
    assert chosen["peers"] == ["node2", "node4", "node6"]
    assert chosen["nodes"] == ["node1", "node2", "node4", "node6", "node8"]
    pairs = pairs_of(chosen)
    assert len(pairs) == len(set(pairs)) and set(pairs) == every_pair(chosen["nodes"])
    assert len(chosen["phases"]) == 5
    for phase in chosen["phases"]:  # the pairs of a phase run at once: disjoint
        met = [n for g in phase["groups"] for n in g]
        assert len(met) == len(set(met)) == 4


def test_many_nodes_many_peers_and_every_named_link_again():
    nodes = [f"n{i:02d}" for i in range(12)]
    phases = confirm.schedule(nodes, False, True, [["n00", "n06"], ["n00", "n07"]])
    pairs = [frozenset(g) for p in phases for g in p["groups"]]
    # beyond FULL_PAIRS nodes: the fit's rounds, then the named links left, disjoint
    assert len(phases) > confirm.FIT_ROUNDS
    assert {frozenset(("n00", "n06")), frozenset(("n00", "n07"))} <= set(pairs)
    for phase in phases:
        met = [n for g in phase["groups"] for n in g]
        assert len(met) == len(set(met))
    assert [p["name"] for p in phases] == [f"pairs-{i}" for i in range(1, len(phases) + 1)]


def test_the_peers_outnumber_the_named_nodes(tmp_path):
    slow = {"nodes:node2": 0.01, "nodes:node3": 0.01, "nodes:node5": 0.01, "nodes:node7": 0.01}
    nodes = [f"node{i}" for i in range(1, 13)]
    doc = first_pass(tmp_path, nodes, slow=slow)
    assert {n for _, n, _ in names(doc)} == {"node2", "node3", "node5", "node7"}
    chosen = confirm.choose(doc)
    assert chosen is not None
    assert len(chosen["peers"]) == 5 and not set(chosen["peers"]) & set(
        ["node2", "node3", "node5", "node7"])


# --- the job's step ---------------------------------------------------------------------------

def step(folder: Path) -> subprocess.CompletedProcess[str]:
    """The step as the job script runs it (python -c, the folder its argument)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
    return subprocess.run([sys.executable, "-c", screenjob.CONFIRM_STEP, str(folder)],
                          env={**env, "PYTHONPATH": str(COMMON)}, capture_output=True,
                          text=True, timeout=120)


def test_the_step_writes_the_plan_where_something_is_named(tmp_path):
    first_pass(tmp_path, EIGHT, slow={"nodes:node3": 0.01})
    done = step(tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == ("llmb screen: confirm: measuring 1 element(s) again on "
                           "node1,node3,node4,node6 (peers node1,node4,node6)\n")
    where = tmp_path / confirm.DIR
    assert (where / confirm.NODES_FILE).read_text() == "4 node1,node3,node4,node6\n"
    plan = screenrun.read_plan(where / screenrun.PLAN_FILE)  # what the second pass reads
    assert plan["force_cpu"] is True and plan["rounds"] is None
    assert [p.name for p in screenrun.planned_phases(plan, ["node1", "node3"])] == ["nodes"]
    assert plan["confirm"]["targets"][0]["name"] == "node3"


def test_the_step_writes_nothing_when_nothing_is_named(tmp_path):
    first_pass(tmp_path, EIGHT)
    done = step(tmp_path)
    assert (done.returncode, done.stdout) == (
        0, "llmb screen: confirm: the first pass named nothing to measure again\n")
    assert not (tmp_path / confirm.DIR).exists()


def test_the_step_refuses_a_node_name_srun_should_not_see(tmp_path):
    doc = first_pass(tmp_path, EIGHT, slow={"nodes:node3": 0.01})
    chosen = confirm.choose(doc)
    assert chosen is not None
    chosen["nodes"][0] = "node1;reboot"
    with pytest.raises(LlmbError) as refused:
        confirm.write(tmp_path, {}, chosen)
    assert str(refused.value) == ("node 'node1;reboot' is not a plain node name (letters, "
                                  "digits, . _ -); the confirm pass is not run")
    assert not (tmp_path / confirm.DIR / screenrun.PLAN_FILE).exists()


# --- the second pass into the verdict ---------------------------------------------------------

def both_passes(folder: Path, first: dict[str, Any], second: dict[str, Any] | None
                ) -> dict[str, Any]:
    """The first pass judged and its plan written; the second pass's files under confirm/
    (`second`: write_screen's arguments, None: no task reported); the merged document."""
    doc = first_pass(folder, EIGHT, **first)
    chosen = confirm.choose(doc)
    assert chosen is not None
    confirm.write(folder, screenrun.read_plan(folder / screenrun.PLAN_FILE), chosen)
    if second is not None:
        screenfiles.write_screen(folder / confirm.DIR, nodes=chosen["nodes"], repeats=5,
                                 **second)
    confirm.apply(doc, folder, H100, PER_NODE)
    return doc


def test_slow_again_stays_named(tmp_path):
    doc = both_passes(tmp_path, {"slow": {"nodes:node3": 0.01}},
                      {"slow": {"nodes:node3": 0.012}})
    assert names(doc) == [("node", "node3", "all-reduce busbw_gbps")]
    assert doc["named"][0]["again"] == 0.012
    assert doc["suspects"] == ["node3"]
    assert doc["confirm"]["measured"] == 1 and doc["confirm"]["cleared"] == []
    assert doc["confirm"]["nodes"] == ["node1", "node3", "node4", "node6"]
    assert doc["confirm"]["error"] is None and doc["confirm"]["rounds"]


def test_fast_again_is_cleared_and_said(tmp_path):
    doc = both_passes(tmp_path, {"slow": {"nodes:node3": 0.01}}, {})
    assert doc["named"] == [] and doc["suspects"] == []
    (cleared,) = doc["confirm"]["cleared"]
    assert (cleared["name"], cleared["value"], cleared["again"]) == ("node3", 0.01, 0.1)
    node3 = next(n for n in doc["nodes"] if n["node"] == "node3")
    assert node3["verdict"] == "pass" and node3["allreduce"]["verdict"] == "pass"
    assert node3["reasons"] == ["seen once, cleared by the confirm pass: its own all-reduce "
                                "is slow"]
    screenresults.checked(json.loads(json.dumps(doc)))  # still what screen.json may hold


def test_a_gpu_cleared_while_another_element_stays_named(tmp_path):
    first_pass(tmp_path, EIGHT, slow={"nodes:node7": 0.01})
    slow_gpu(tmp_path, 5, "memory_gbps", 0.5)  # node3's second task
    doc = screenresults.document(tmp_path, H100, EIGHT, PER_NODE)
    assert doc is not None
    assert sorted(names(doc)) == [("gpu", "node3 GPU 1", "memory_gbps"),
                                  ("node", "node7", "all-reduce busbw_gbps")]
    chosen = confirm.choose(doc)
    assert chosen is not None and chosen["peers"] == ["node1", "node4", "node6"]
    confirm.write(tmp_path, screenrun.read_plan(tmp_path / screenrun.PLAN_FILE), chosen)
    screenfiles.write_screen(tmp_path / confirm.DIR, nodes=chosen["nodes"], repeats=5,
                             slow={"nodes:node7": 0.01})
    confirm.apply(doc, tmp_path, H100, PER_NODE)
    assert names(doc) == [("node", "node7", "all-reduce busbw_gbps")]
    assert [c["name"] for c in doc["confirm"]["cleared"]] == ["node3 GPU 1"]
    assert doc["suspects"] == ["node7"]
    node3 = next(n for n in doc["nodes"] if n["node"] == "node3")
    assert node3["verdict"] == "pass" and node3["gpus"][1]["verdict"] == "pass"
    assert node3["gpus"][1]["reasons"][0].startswith("seen once, cleared by the confirm pass: "
                                                     "memory_gbps ")


def test_a_link_cleared_passes_its_pair(tmp_path):
    doc = both_passes(tmp_path, {"slow": {"pairs-1:node1,node8": 0.01}}, {})
    assert doc["named"] == [] and doc["suspects"] == []
    assert [c["name"] for c in doc["confirm"]["cleared"]] == ["node1 - node8"]
    assert all(p["verdict"] == "pass" and not p.get("link") for p in doc["pairs"])


def test_a_confirm_pass_that_left_nothing_leaves_the_names_standing(tmp_path):
    doc = both_passes(tmp_path, {"slow": {"nodes:node3": 0.01}}, None)
    assert names(doc) == [("node", "node3", "all-reduce busbw_gbps")]
    assert doc["suspects"] == ["node3"]
    assert doc["confirm"]["error"] == "none of its tasks reported (see the job's output)"
    assert screenrender.confirm_line(doc) == (
        "confirm pass on 4 node(s) (node1, node3, node4, node6; healthy peers node1, node4, "
        "node6): no verdict, the first pass's names stand: none of its tasks reported (see "
        "the job's output)")


def test_no_confirm_pass_changes_nothing(tmp_path):
    doc = first_pass(tmp_path, EIGHT, slow={"nodes:node3": 0.01})
    before = json.loads(json.dumps(doc))
    confirm.apply(doc, tmp_path, H100, PER_NODE)
    assert doc == before and "confirm" not in doc


def test_what_was_cleared_is_neither_kept_in_a_baseline_nor_held_to_one(tmp_path):
    # its first-pass figure was disturbed: not the element's, to keep or to compare
    doc = both_passes(tmp_path / "own", {"slow": {"nodes:node3": 0.01}}, {})
    own = screenbaseline.figures_of(doc)[screenbaseline.OWN]["values"]
    assert sorted(own) == [n for n in EIGHT if n != "node3"]
    doc = both_passes(tmp_path / "link", {"slow": {"pairs-1:node1,node8": 0.01}}, {})
    figures = screenbaseline.figures_of(doc)
    assert "node1 - node8" not in figures[screenbaseline.LINKS]["values"]
    assert len(figures[screenbaseline.LINKS]["values"]) == len(doc["pairs"]) - 1
    # node1's network is the mean of its other pairs
    (other,) = [p for p in doc["pairs"] if "node1" in p["nodes"] and "node8" not in p["nodes"]]
    assert figures[screenbaseline.NETWORK]["values"]["node1"][0] == other["busbw_gbps"]


# --- what people read -------------------------------------------------------------------------

def test_the_table_says_what_was_seen_once_and_cleared(tmp_path):
    doc = both_passes(tmp_path, {"slow": {"nodes:node3": 0.01}}, {})
    lines = screenrender.table(doc).splitlines()
    assert "  node3: seen once, cleared by the confirm pass: its own all-reduce is slow" in lines
    at = lines.index("seen once, not named:")
    assert lines[at + 1] == ("  node3: all-reduce busbw_gbps 0.01 < floor 0.07 (peers' median "
                             "0.1; the confirm pass: 0.1): far below its peers [seen once, "
                             "cleared by the confirm pass]")
    assert ("confirm pass on 4 node(s) (node1, node3, node4, node6; healthy peers node1, "
            "node4, node6): measured 1 named figure(s) again; seen once, cleared by the "
            "confirm pass: node3 all-reduce busbw_gbps") in lines
    assert lines[-1] == "suspects: none"
    markdown = screenrender.markdown_section(doc, plot=False)
    assert "seen once, cleared by the confirm pass\\]" in markdown
    assert "seen once, cleared by the confirm pass]" in screenrender.html_section(doc, None)


def test_the_table_says_what_the_confirm_pass_measured_of_a_name_that_stands(tmp_path):
    doc = both_passes(tmp_path, {"slow": {"nodes:node3": 0.01}},
                      {"slow": {"nodes:node3": 0.012}})
    lines = screenrender.table(doc).splitlines()
    assert "  node3: all-reduce busbw_gbps 0.01 < floor 0.07 (peers' median 0.1; the confirm " \
           "pass: 0.012): far below its peers" in lines
    assert "seen once, not named:" not in lines
    assert any(ln.endswith("measured 1 named figure(s) again; every one slow again")
               for ln in lines)
