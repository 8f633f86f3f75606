"""What every test of a broken metadata.yaml checks: the catalog refuses the copy in one line
that says what is wrong and names the file or the row."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from llmb.recipes import catalog
from llmb.recipes.catalog import CatalogError


def assert_refused(folder: Path, message: str) -> None:
    """catalog.load_recipe(folder) raises CatalogError matching `message` (a regex), in one
    line naming folder/metadata.yaml or the row (` at `)."""
    with pytest.raises(CatalogError) as err:
        catalog.load_recipe(folder)
    text = str(err.value)
    assert re.search(message, text), text
    assert str(folder / "metadata.yaml") in text or " at " in text  # says which file or row
    assert "\n" not in text
