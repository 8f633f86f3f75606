"""Recipe folders shaped as the Megatron-Bridge recipes (bridge/<name>/) are for an acceptance
set (llmb.llmbrun.suite.sets): copies of the repository's recipes written under a tmp folder,
each carrying `upstream: {workload, path, release}`, which the catalog lists in place of the
repository's bridge/ folders (catalog.recipe_dirs answers with them: a test of a set's rules
needs recipes that carry the field, whatever the repository holds at the time;
tests/llmbrun/suite/test_sets.py also plans the set with the repository's own recipes).

The schema is given the `upstream` key for the test (monkeypatch): the bridge recipes carry it.

    llama3.1  -> pretrain_llama3.1_mb  upstream pretrain_llama3.1    (8b, 70b, 405b on h100)
    nemotronh -> pretrain_nemotronh_mb upstream pretrain_nemotron-h  (56b fp8 on h100)
    nemotron  -> pretrain_qwen3_mb     upstream pretrain_qwen3       (its 340b named 235b: h100
                                                                      bf16/fp8, gb200, b200)
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from llmb.recipes import catalog, schema

RELEASE = "v26.08.00"
# (repository recipe, new folder, workload, upstream workload, {size: new name})
RECIPES = (
    ("llama3.1", "mb-llama3.1", "pretrain_llama3.1_mb", "pretrain_llama3.1", {}),
    ("nemotronh", "mb-nemotronh", "pretrain_nemotronh_mb", "pretrain_nemotron-h", {}),
    ("nemotron", "mb-qwen3", "pretrain_qwen3_mb", "pretrain_qwen3", {"340b": "235b"}),
)
WORKLOADS = tuple(r[2] for r in RECIPES)


def renamed(data: dict[str, Any], old: str, new: str) -> None:
    """A size renamed everywhere the metadata names it."""
    data["sizes"] = {new if k == old else k: v for k, v in data["sizes"].items()}
    for entry in (*data["configs"], *data["references"]):
        if entry["size"] == old:
            entry["size"] = new


def write(root: Path, release: str = RELEASE) -> list[Path]:
    """The recipe folders under root/bridge/, each with its `upstream` field."""
    folders = []
    for base, folder, workload, key, sizes in RECIPES:
        data = copy.deepcopy(dict(catalog.find_recipe(base).data))
        data.update(recipe=folder, workload=workload,
                    upstream={"workload": key, "path": f"{key.split('_', 1)[1]}/pretrain",
                              "release": release})
        for old, new in sizes.items():
            renamed(data, old, new)
        path = root / "bridge" / folder
        path.mkdir(parents=True)
        (path / "metadata.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
        folders.append(path)
    return folders


def seen(root: Path, monkeypatch: pytest.MonkeyPatch, release: str = RELEASE) -> list[Path]:
    """write(), and the catalog lists those folders after the repository's own."""
    folders = write(root, release)
    monkeypatch.setattr(schema, "TOP_OPTIONAL", schema.TOP_OPTIONAL | {"upstream"})
    own = catalog.recipe_dirs

    def dirs(where: Path = catalog.REPO_ROOT) -> list[Path]:  # the copies stand in for bridge/
        return [*(d for d in own(where) if d.parent.name != "bridge"), *folders]

    monkeypatch.setattr(catalog, "recipe_dirs", dirs)
    return folders
