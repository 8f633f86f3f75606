"""llmb.launch.slurmtopology against a real Slurm: the 4-node test cluster (the conftest's
slurm_cluster4) has two leaf switches of two nodes under one spine (tests/slurm/cluster.sh,
LLMB_SLURM_LEAVES=2: topology/tree); the real `scontrol show topology` is read into each node's
leaf, and a screen's nodes keep theirs. Marked `alone` with the screen's tests: it shares their
one 4-node cluster (started once, in the serial run) instead of starting its own in a worker."""

from __future__ import annotations

import os

import pytest
from llmb.launch import slurmtopology

pytestmark = [pytest.mark.e2e, pytest.mark.alone]


def test_the_real_scontrol_show_topology_gives_each_node_its_leaf(slurm_cluster4, monkeypatch):
    for name, value in slurm_cluster4.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("SLURM_TOPO_LEN", raising=False)
    assert os.environ["SLURM_CONF"].endswith("/etc/slurm.conf")
    found = slurmtopology.resolve()
    assert found.leaves == {"node1": "leaf1", "node2": "leaf1", "node3": "leaf2",
                            "node4": "leaf2"}, found.said
    assert found.said == "Slurm's topology: 4 node(s) under 2 leaf switch(es)"
    mine = slurmtopology.of_nodes(found.leaves, ["node2", "node3"])
    assert mine.leaves == {"node2": "leaf1", "node3": "leaf2"}
