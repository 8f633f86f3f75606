"""llmb.container.nemorecipe without NeMo (the default venv): importing it costs nothing, building
a recipe fails on the missing NeMo and the container's train CLI says so in one line, and its own
helpers (name lookups, finding a callback, the nemo-run YAML of a config) work with nemo-run
alone. The real recipes, built with NeMo 2.3.1, are the NeMo tier's (tests/nemo, make test-nemo)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import yaml
from llmb.container import nemorecipe, train
from llmb.recipes import nemojob
from stacks import NEMO_INSTALLED, fresh_python, have_nemo
from trainmanifests import find, make_manifest


def test_importing_it_imports_no_heavy_stack() -> None:
    done, heavy = fresh_python("import llmb.container.nemorecipe")
    assert (done.returncode, done.stderr, heavy) == (0, "", [])


@pytest.mark.skipif(have_nemo(), reason=NEMO_INSTALLED)
def test_without_nemo_building_names_the_missing_module() -> None:
    plan = train.plan(make_manifest(*find("llama3.1", "70b", "fp8", "h100", 64)))
    with pytest.raises(ImportError) as err:
        nemorecipe.build_recipe(plan)
    assert err.value.name is not None
    assert err.value.name.split(".")[0] in train.NEMO_MODULES  # what train turns into one line


@pytest.mark.skipif(have_nemo(), reason=NEMO_INSTALLED)
@pytest.mark.parametrize("what", ["--print-config", "--train"])
def test_without_nemo_the_container_cli_says_so_in_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], what: str) -> None:
    path = tmp_path / "llmb_manifest.json"
    path.write_text(json.dumps(make_manifest(*find("nemotronh", "56b", "fp8", "h100", 64))))
    assert train.main([str(path), what]) == 2
    out = capsys.readouterr()
    assert out.out == ""
    assert out.err == ("llmb: building the NeMo recipe needs NeMo, and nemo is missing here: run "
                       "it inside the benchmark image (srun --container-image=..., see the "
                       "recipe README's Fidelity section)\n")


@pytest.mark.parametrize(("name", "found"), [
    ("check", nemojob.check),
    ("SETTINGS", nemojob.SETTINGS),
])
def test_a_name_this_nemo_has(name: str, found: object) -> None:
    assert nemorecipe._lookup(nemojob, name, "recipe") is found


@pytest.mark.parametrize(("name", "what"), [
    ("llama3_7b", "recipe"),
    ("userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192", "userbuffer layout"),
    # names a manifest could use to reach past the module's own recipes
    ("__class__", "recipe"), ("__builtins__", "recipe"), ("_bool", "recipe"),
])
def test_a_name_this_nemo_does_not_have_is_one_line(name: str, what: str) -> None:
    with pytest.raises(nemorecipe.UnknownName) as err:
        nemorecipe._lookup(nemojob, name, what)
    assert str(err.value) == f"{what} {name!r} is not in llmb.recipes.nemojob of this NeMo"
    assert err.value.status == 1


@dataclasses.dataclass
class GarbageCollection:
    interval_train: int = 100
    interval_val: int = 100


@dataclasses.dataclass
class Timing:
    reduction: str = "mean"


def pretrain(callbacks: list | None = None, max_steps: int = 10) -> int:
    return max_steps


def test_a_callback_is_found_by_what_it_builds() -> None:
    import nemo_run as run

    callbacks = [run.Config(Timing), run.Config(GarbageCollection), "not a config",
                 run.Config(GarbageCollection, interval_train=5)]
    assert nemorecipe._find(callbacks, GarbageCollection) == [1, 3]
    assert nemorecipe._find(callbacks, Timing) == [0]
    assert nemorecipe._find([], Timing) == []
    gc = nemorecipe._configured(callbacks[1], {"interval_train": 100, "interval_val": 50})
    assert gc is callbacks[1] and (gc.interval_train, gc.interval_val) == (100, 50)


def test_the_yaml_print_config_prints() -> None:
    import nemo_run as run

    recipe = run.Partial(pretrain, max_steps=50,
                         callbacks=[run.Config(Timing),
                                    run.Config(GarbageCollection, interval_train=100)])
    text = nemorecipe.config_yaml(recipe)
    data = yaml.safe_load(text)
    assert data["_partial_"] is True and data["_target_"].endswith(".pretrain")
    assert data["max_steps"] == 50
    assert [c["_target_"].rsplit(".", 1)[1] for c in data["callbacks"]] == [
        "Timing", "GarbageCollection"]
    assert data["callbacks"][1]["interval_train"] == 100
    assert nemorecipe.config_yaml(recipe) == text  # the same recipe, the same text
