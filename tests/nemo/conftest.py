"""make test-nemo: NeMo 2.3.1 is imported once per session, and only in the .venv-nemo venv.

Without NeMo (the default `make test` venv) NeMo is never imported: every test here is skipped
with the reason below, visible in pytest's -ra summary.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import stacks

NO_NEMO = "needs nemo-toolkit 2.3.1: run `make test-nemo` (it builds .venv-nemo)"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    skip = None if stacks.have_nemo() else pytest.mark.skip(reason=NO_NEMO)
    for item in items:
        if Path(str(item.fspath)).is_relative_to(here):
            item.add_marker(pytest.mark.nemo)
            if skip is not None:
                item.add_marker(skip)


@pytest.fixture(scope="session")
def nemo_llm():
    """nemo.collections.llm, imported once (16-23 s)."""
    from nemo.collections import llm

    return llm
