"""llmb.llmbrun.screen.transport: which network NCCL used between nodes, read from its INFO lines
(fixtures generated from NCCL's formats, tests/helpers/nccllogs.py) on GPU screens written as
the tasks write them; a node fallen back to sockets named alone, the cluster when all did."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import nccllogs
import pytest
import screenfiles
from llmb.llmbrun.screen import render, results, transport
from llmb.recipes import catalog

H100_GPU = catalog.get_gpu_type("h100")

NODES = screenfiles.NODES


def gpu_screen(folder: Path, networks: dict[str, str], **kwargs: Any) -> dict[str, Any]:
    screenfiles.write_screen(folder, repeats=5, mode="gpu")
    nccllogs.write_logs(folder, NODES, screenfiles.PER_NODE, networks, screenfiles.host_of,
                        **kwargs)
    doc = results.document(folder, H100_GPU, NODES, screenfiles.PER_NODE)
    assert doc is not None
    return dict(doc)


@pytest.mark.parametrize("stamp", [None, "2026-01-02 03:04:05"])
def test_lines_say_the_network_and_the_channels(tmp_path, stamp):
    (tmp_path / "nccl-logs").mkdir()
    (tmp_path / "nccl-logs" / "rank-00000.log").write_text(
        nccllogs.task_log("gpu-a", 0, 0, "AWS Libfabric", 0, [8], stamp)
        + "not NCCL at all\n")
    seen = transport.read(tmp_path, {"gpu-a": "node1"})
    assert seen == {"node1": {"networks": {"AWS Libfabric"}, "channels": {"AWS Libfabric"},
                              "plugin": "Loaded net plugin AWS Libfabric (v8)"}}
    assert transport.transport_of(seen["node1"]) == "AWS Libfabric"


def test_every_node_on_the_fabric_names_nothing(tmp_path):
    doc = gpu_screen(tmp_path, {})
    assert {n: t["transport"] for n, t in doc["transport"].items()} == dict.fromkeys(NODES, "IB")
    assert (doc["named"], doc["suspects"]) == ([], [])


def test_a_node_fallen_back_to_sockets_is_named_alone(tmp_path):
    doc = gpu_screen(tmp_path, {"node3": "Socket"})
    assert doc["transport"]["node3"]["transport"] == "Socket"
    (named,) = doc["named"]
    assert (named["kind"], named["name"], named["figure"]) == ("node", "node3", "transport")
    assert "fell back to TCP sockets (NCCL's Socket transport) while 3 other node(s) use IB" \
        in named["why"]
    assert "Could not find: libnccl-net.so." in named["why"]
    assert doc["suspects"] == ["node3"] and doc["nodes"][2]["verdict"] == "slow"


def test_the_table_says_which_network(tmp_path):
    doc = gpu_screen(tmp_path, {"node3": "Socket"})
    assert "network between nodes (NCCL): IB on 3 node(s) (node1, node2, node4); Socket on 1 " \
        "node(s) (node3)" in render.table(doc).splitlines()


def test_every_node_on_sockets_names_the_cluster(tmp_path):
    doc = gpu_screen(tmp_path, dict.fromkeys(NODES, "Socket"))
    (named,) = doc["named"]
    assert (named["kind"], named["name"]) == ("cluster", "cluster")
    assert named["why"].startswith("every node's traffic to other nodes went over TCP sockets")
    assert doc["suspects"] == []


def test_a_node_without_lines_is_unknown_and_not_named(tmp_path):
    doc = gpu_screen(tmp_path, {})
    for log in (tmp_path / "nccl-logs").glob("rank-0000[67].log"):  # node4's two tasks
        log.unlink()
    doc = dict(results.document(tmp_path, H100_GPU, NODES, screenfiles.PER_NODE) or {})
    assert doc["transport"]["node4"] == {"transport": "unknown", "networks": [],
                                         "channels": [], "plugin": None}
    assert doc["named"] == []


def test_the_cpu_path_reads_no_nccl_lines(tmp_path):
    screenfiles.write_screen(tmp_path, repeats=5)
    nccllogs.write_logs(tmp_path, NODES, screenfiles.PER_NODE, dict.fromkeys(NODES, "Socket"),
                        screenfiles.host_of)
    doc = results.document(tmp_path, H100_GPU, NODES, screenfiles.PER_NODE)
    assert doc is not None and doc["transport"] is None and doc["named"] == []
