"""metadata.yaml as the catalog loads it: the shapes of the real files that the launcher relies
on, a file that cannot be read or parsed, and published rows whose DP/GA arithmetic fails
(resolved by the catalog; the schema checks are tests/recipes/test_schema.py)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from llmb.recipes import catalog
from llmb.recipes.catalog import CatalogError
from metadatarefusals import assert_refused


def first_config_with(size: str, **changes: Any) -> Callable[[dict[str, Any]], None]:
    """Change keys of the first configs entry of size `size`."""
    return lambda data: next(c for c in data["configs"] if c["size"] == size).update(changes)


ARITHMETIC = [
    pytest.param("nemotron", first_config_with("340b", gbs_per_gpu=0.3),
                 r"340b \w+ h100 at 128 GPUs: global batch size 38\.4 is not a whole number",
                 id="fractional-gbs"),
    # the DP/GA arithmetic of every published row
    pytest.param("llama3.1", first_config_with("8b", cp=3),
                 r"8b \w+ h100 at 8 GPUs: 8 GPUs is not divisible by TP x PP x CP = 3",
                 id="dp-arithmetic"),
    pytest.param("nemotron", first_config_with("15b", mbs=3),
                 r"15b \w+ h100 at 16 GPUs: global batch size 64 is not divisible by "
                 r"MBS x DP = 24", id="ga-arithmetic"),
]


@pytest.mark.parametrize(("name", "mutate", "message"), ARITHMETIC)
def test_a_row_whose_arithmetic_fails_is_refused(metadata_copy, name, mutate, message):
    assert_refused(metadata_copy(name, mutate), message)


def test_an_unreadable_file_is_refused(tmp_path):
    with pytest.raises(CatalogError, match=r"cannot read .*metadata\.yaml"):
        catalog.load_recipe(tmp_path)


def test_malformed_yaml_is_one_line_not_a_traceback(tmp_path):
    (tmp_path / "metadata.yaml").write_text("recipe: [unclosed\n")
    with pytest.raises(CatalogError, match=r"metadata\.yaml is not valid YAML: "):
        catalog.load_recipe(tmp_path)


@pytest.mark.parametrize("recipe_name", ["llama3.1", "nemotron", "nemotronh"])
def test_real_metadata_shapes(recipes, recipe_name):
    """What the loader does not check but the launcher relies on."""
    recipe = recipes[recipe_name]
    for size in recipe.sizes:
        entry = recipe.size(size)
        assert re.fullmatch(r"\d\d:[0-5]\d:[0-5]\d", entry["time_limit"])
        assert entry["nemo_recipe"].endswith(size)
        for key in ("save_min_scale", "load_min_scale"):
            for gpu, scale in entry["checkpoint"][key].items():
                assert gpu in catalog.gpu_types() and scale > 0
    assert set(recipe.defaults) == {"model_size", "dtype", "gpu_type"}
    recipe.resolve(recipe.defaults["model_size"], recipe.defaults["dtype"],
                   recipe.defaults["gpu_type"],
                   recipe.scales(recipe.defaults["model_size"], recipe.defaults["dtype"],
                                 recipe.defaults["gpu_type"])[0])
