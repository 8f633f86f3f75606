"""llmb.llmbrun.screen.suspects: the nodes the newest complete screen named."""

from __future__ import annotations

import json

import pytest
from deadline import deadline
from llmb import layout
from llmb.llmbrun.errors import RunError
from llmb.llmbrun.screen import suspects
from screenfiles import LEAST


def screen(tree: layout.Install, stamp: str, data: object | None) -> None:
    folder = tree.screens / stamp
    folder.mkdir(parents=True)
    if data is not None:
        (folder / layout.SCREEN_FILE).write_text(json.dumps(data))


def complete(suspects: list[str]) -> dict[str, object]:
    return {**LEAST, "suspects": suspects}


def test_no_screen(tmp_path):
    tree = layout.Install(tmp_path)
    assert suspects.newest_screen(tree) is None
    with pytest.raises(RunError, match="--exclude-suspect needs a screen"):
        suspects.for_exclude(tree)


def test_the_newest_complete_screen_counts(tmp_path):
    tree = layout.Install(tmp_path)
    screen(tree, "20261120-101010", complete(["node3"]))
    screen(tree, "20261121-101010", complete(["node[1-2]", "gpu7"]))
    screen(tree, "20261122-101010", None)  # still running: no results yet
    assert suspects.for_exclude(tree) == ("node1", "node2", "gpu7")


@pytest.mark.parametrize("data", [[1], complete("node1"), complete(["a b"]),
                                  complete(["$(touch x)"]), {}, {"suspects": ["node1"]},
                                  {**LEAST, "nodes": [{"node": 5}]}])
def test_broken_results_are_one_line(tmp_path, data):
    tree = layout.Install(tmp_path)
    screen(tree, "20261121-101010", data)
    with pytest.raises(RunError) as err:
        suspects.for_exclude(tree)
    assert "\n" not in str(err.value) and "screen results" in str(err.value)


@pytest.mark.parametrize(("names", "named"), [
    (["p[0-65535]"] * 400, 400 * 65536),  # 6 KB of suspects: MemoryError
    (["n[0-65535]"] * 16384, 16384 * 65536),  # hung
    (["n[0-16383]", "m1"], 16385),
])
def test_suspects_are_counted_before_one_is_written(tmp_path, names, named):
    tree = layout.Install(tmp_path)
    screen(tree, "20261121-101010", complete(names))
    with deadline(20, "suspects are expanded"), pytest.raises(RunError) as err:
        suspects.for_exclude(tree)
    assert str(err.value).endswith(f"suspects name {named} nodes; a screen has at most "
                                   "16384; run llmb-run screen again")


def test_as_many_suspects_as_a_screen_has_nodes_are_taken(tmp_path):
    tree = layout.Install(tmp_path)
    screen(tree, "20261121-101010", complete(["n[0-16382]", "m1"]))
    assert len(suspects.for_exclude(tree)) == 16384


def test_only_folders_named_as_a_screen_writes_them_are_screens(tmp_path):
    stamp = tmp_path / "screens" / "20260102-030405"
    stamp.mkdir(parents=True)
    (stamp / "screen.json").write_text(json.dumps({**LEAST, "suspects": []}))
    for name in ("backup-old", "20260102-030405.bak", "99991231-235959x"):
        (tmp_path / "screens" / name).mkdir()
        (tmp_path / "screens" / name / "screen.json").write_text(
            json.dumps({**LEAST, "suspects": ["node9"]}))
    found = suspects.newest_screen(layout.Install(tmp_path))
    assert found is not None and found.path == stamp / "screen.json" and found.suspects == ()
