"""Fixtures shared by the pytest suites. Keep them small and generic."""

from __future__ import annotations

import copy
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from llmb.recipes import catalog

MetadataMutation = Callable[[dict[str, Any]], object]


@pytest.fixture(scope="session")
def recipes() -> dict[str, catalog.Recipe]:
    """Every recipe of the repository, by folder name (llama3.1, nemotron, nemotronh)."""
    return {r.name: r for r in catalog.all_recipes()}


@pytest.fixture
def metadata_copy(tmp_path: Path) -> Callable[[str, MetadataMutation], Path]:
    """Write a mutated copy of a recipe's metadata.yaml under tmp_path; return its folder.

    `metadata_copy("nemotron", lambda d: d.pop("seq_length"))` gives a folder for
    `catalog.load_recipe` whose metadata lacks seq_length. The real file is never touched.
    """

    def write(recipe: str, mutate: MetadataMutation) -> Path:
        data = copy.deepcopy(catalog.find_recipe(recipe).data)
        mutate(data)
        # a fresh folder per call: catalog.load_recipe caches by folder
        folder = Path(tempfile.mkdtemp(prefix=f"{recipe}-", dir=tmp_path))
        dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
        (folder / "metadata.yaml").write_text(yaml.dump(data, Dumper=dumper, sort_keys=False))
        return folder

    return write


@pytest.fixture(scope="session")
def slurm_cluster():
    """Client env of the real test Slurm cluster (tests/slurm), started for this session."""
    from slurmcluster import session_cluster, two_nodes

    resource = session_cluster(two_nodes())
    state = next(resource)
    if isinstance(state, str):
        pytest.skip(state)
    yield state
    next(resource, None)


@pytest.fixture(scope="session")
def slurm_cluster4():
    """Client env of a second, 4-node test Slurm cluster (the screen's pairing rounds), beside
    the 2-node one; started for this session when a test asks for it."""
    from slurmcluster import four_nodes, session_cluster

    resource = session_cluster(four_nodes())
    state = next(resource)
    if isinstance(state, str):
        pytest.skip(state)
    yield state
    next(resource, None)
