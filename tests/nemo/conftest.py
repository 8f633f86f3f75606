"""make test-nemo: NeMo 2.3.1 is imported once per session, and only in the .venv-nemo venv.

Without NeMo (the default `make test` venv) nothing here is imported beyond this file: the
tests skip with the reason below, visible in pytest's -ra summary.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# tests/test_train_unit.py builds the run manifests for both tiers.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if Path(str(item.fspath)).is_relative_to(here):
            item.add_marker(pytest.mark.nemo)


@pytest.fixture(scope="session")
def nemo_llm():
    """nemo.collections.llm, imported once (16-23 s)."""
    from nemo.collections import llm

    return llm
