"""llmb.layout: the install tree's names, and setup.sh (bash) holding the same ones."""

from __future__ import annotations

import re
from pathlib import Path

from llmb import layout
from llmb.recipes import catalog
from paths import REPO

SETUP = (REPO / "common" / "setup.sh").read_text()


def test_every_path_is_under_the_root():
    tree = layout.Install("/lustre/me/llmb")
    assert tree.venv("pretrain_nemotron4") == Path("/lustre/me/llmb/venvs/pretrain_nemotron4")
    assert tree.experiments("w") == Path("/lustre/me/llmb/workloads/w/experiments")
    assert tree.image("nvidia+nemo+25.04.01.sqsh").parent == tree.images
    assert [p.name for p in tree.dirs(["a", "b"])] == ["images", "datasets", "venvs", "a", "b"]
    for path in (tree.config, tree.wrapper, tree.hf_token, tree.install_state, tree.history,
                 tree.preflight, tree.report, tree.archive("20261123-101010"), tree.suites,
                 tree.screens):
        assert path.parent == tree.root
    assert tree.suite("20261123-101010") == tree.suites / "20261123-101010"


def test_setup_sh_creates_the_same_folders():
    found = re.search(r"for dir in (.+); do", SETUP)
    assert found, "setup.sh's layout loop moved"
    assert found.group(1).split() == [*layout.TOP_DIRS[:-1], '"workloads/${workload}"']


def test_setup_sh_allows_the_same_cluster_types():
    found = re.search(r"\n\s+([a-z| ]+)\) ;;\n\s+\*\) llmb_die \"CLUSTER_TYPE=", SETUP)
    assert found and tuple(found.group(1).replace(" ", "").split("|")) == catalog.CLUSTER_TYPES


def test_stage_path_refusal_is_one_line_with_the_move():
    line = layout.stage_path_refusal("/old\n")
    assert "\n" not in line and line.startswith("STAGE_PATH=/old\\n is no longer used")
    assert layout.stage_path_problem({"STAGE_PATH": ""}) is not None
    assert layout.stage_path_problem({}) is None
