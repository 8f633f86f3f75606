"""llmb.launch.slurmtopology: each node's leaf switch from `scontrol show topology`, read
strictly where it matters (a switch's name and level, a leaf's node list) and tolerantly of
the rest; no map, said in one line, where Slurm has none or scontrol cannot answer."""

from __future__ import annotations

from pathlib import Path

import pytest
from llmb.launch import slurmtopology

# the topology/tree plugin's lines for two leaves and a spine, as Slurm 22.05 prints them
# (a trailing blank after each field, `(null)` where a switch has no nodes or switches) and as
# later releases do (no trailing blank, an absent field left out)
TWO_LEAVES_2205 = (
    "SwitchName=leaf1 Level=0 LinkSpeed=1 Nodes=node[1-2] Switches=(null) \n"
    "SwitchName=leaf2 Level=0 LinkSpeed=1 Nodes=node[3-4] Switches=(null) \n"
    "SwitchName=spine Level=1 LinkSpeed=1 Nodes=(null) Switches=leaf[1-2] \n")
TWO_LEAVES_LATER = (
    "SwitchName=leaf1 Level=0 LinkSpeed=1 Nodes=node[1-2]\n"
    "SwitchName=leaf2 Level=0 LinkSpeed=1 Nodes=node[3-4]\n"
    "SwitchName=spine Level=1 LinkSpeed=1 Switches=leaf[1-2]\n")
FOUR = {"node1": "leaf1", "node2": "leaf1", "node3": "leaf2", "node4": "leaf2"}


def generated(leaves: int, per_leaf: int, width: int = 4) -> str:
    """`scontrol show topology` of `leaves` leaf switches of `per_leaf` nodes each under one
    spine, node names zero-padded to `width` digits, with a field this parser does not know."""
    lines = []
    for leaf in range(leaves):
        first, last = leaf * per_leaf, (leaf + 1) * per_leaf - 1
        lines.append(f"SwitchName=ib-leaf{leaf:02d} Level=0 LinkSpeed=100 "
                     f"Nodes=gpu[{first:0{width}d}-{last:0{width}d}] Weight=7")
    lines.append(f"SwitchName=ib-spine Level=1 LinkSpeed=400 Switches=ib-leaf[00-{leaves - 1:02d}]")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("text", [TWO_LEAVES_2205, TWO_LEAVES_LATER])
def test_each_node_under_its_level_zero_switch(text: str) -> None:
    assert slurmtopology.parse(text) == FOUR


def test_a_generated_fleet_of_leaves_expands_every_range() -> None:
    leaves = slurmtopology.parse(generated(8, 32))
    assert len(leaves) == 256
    assert leaves["gpu0000"] == leaves["gpu0031"] == "ib-leaf00"
    assert leaves["gpu0032"] == "ib-leaf01" and leaves["gpu0255"] == "ib-leaf07"
    assert "ib-leaf00" not in leaves  # a switch under the spine is no node


def test_lines_that_are_no_switch_give_no_map() -> None:
    assert slurmtopology.parse("") == {}
    assert slurmtopology.parse("No topology information available\n") == {}
    # the topology/block plugin's lines name blocks, not switches
    assert slurmtopology.parse("BlockName=b1 BlockIndex=0 Nodes=node[1-4] BlockSize=4\n") == {}
    # a tree of switches without nodes names no leaf
    assert slurmtopology.parse("SwitchName=s1 Level=1 LinkSpeed=1 Switches=s[2-3]\n") == {}


@pytest.mark.parametrize(("text", "said"), [
    ("SwitchName=s0 LinkSpeed=1 Nodes=node1\n", r"line 1: SwitchName=s0 .* is not a switch"),
    ("SwitchName=s0 Level=zero Nodes=node1\n", r"line 1: .* is not a switch"),
    ("SwitchName= Level=0 Nodes=node1\n", r"is not a switch \(SwitchName=NAME Level=NUMBER"),
    ("SwitchName=s0 Level=0 Nodes=node[3-1]\n", r"switch s0's Nodes=node\[3-1\] .*backwards"),
    ("SwitchName=s0 Level=0 Nodes=node[1-2]\nSwitchName=s1 Level=0 Nodes=node2\n",
     r"node node2 is under two leaf switches, s0 and s1"),
])
def test_a_switch_line_that_is_not_one_is_refused_in_one_line(text: str, said: str) -> None:
    with pytest.raises(slurmtopology.TopologyError, match=said) as caught:
        slurmtopology.parse(text)
    assert "\n" not in str(caught.value)


def test_the_map_of_a_screens_nodes() -> None:
    mine = slurmtopology.of_nodes(FOUR, ["node1", "node3"])
    assert mine.leaves == {"node1": "leaf1", "node3": "leaf2"}
    assert mine.said == "Slurm's topology: 2 node(s) under 2 leaf switches"
    some = slurmtopology.of_nodes(FOUR, ["node1", "node9"])
    assert some.leaves == {"node1": "leaf1"} and some.said.endswith("; 1 under none")
    none = slurmtopology.of_nodes(FOUR, ["node8", "node9"])
    assert none.leaves is None and none.said.startswith("one tier: ")


# --- resolve: asking Slurm, through an scontrol written for the test (no Slurm here; PATH
# holds it alone, so it prints with the shell's builtins) ------------------------------------

@pytest.fixture
def scontrol(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    folder = tmp_path / "bin"
    folder.mkdir()
    monkeypatch.setenv("PATH", str(folder))
    monkeypatch.delenv("SLURM_TOPO_LEN", raising=False)

    def write(body: str) -> None:
        path = folder / "scontrol"
        path.write_text("#!/bin/sh\n" + body)
        path.chmod(0o755)
    return write


def test_resolve_reads_the_tree_plugins_answer(scontrol) -> None:
    scontrol(f"[ \"$*\" = 'show topology' ] || exit 9\nprintf '%s' '{TWO_LEAVES_2205}'\n")
    found = slurmtopology.resolve()
    assert found.leaves == FOUR
    assert found.said == "Slurm's topology: 4 node(s) under 2 leaf switch(es)"


@pytest.mark.parametrize(("body", "said"), [
    ("echo 'No topology information available'\n", "one tier: Slurm gives no switch topology"),
    ("echo 'scontrol: error: Unable to contact slurm controller' >&2; exit 1\n",
     "one tier: no switch topology (scontrol failed: "),
    ("echo 'SwitchName=s0 Level=x Nodes=n1'\n", "one tier: no switch topology (scontrol show "),
])
def test_no_map_where_slurm_gives_none_said_once(scontrol, body: str, said: str,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("llmb.shared.slurmquery.BACKOFF_S", (0.0, 0.0))
    scontrol(body)
    found = slurmtopology.resolve()
    assert found.leaves is None and found.said.startswith(said)
    assert "\n" not in found.said


def test_no_scontrol_is_one_tier(scontrol, tmp_path: Path) -> None:
    found = slurmtopology.resolve()
    assert found.leaves is None and "scontrol is not installed" in found.said


def test_lines_cut_by_slurm_topo_len_are_not_read(scontrol, monkeypatch) -> None:
    scontrol(f"printf '%s' '{TWO_LEAVES_LATER}'\n")
    monkeypatch.setenv("SLURM_TOPO_LEN", "30")
    found = slurmtopology.resolve()
    assert found.leaves is None and "SLURM_TOPO_LEN" in found.said
