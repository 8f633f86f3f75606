"""The Megatron-Bridge recipes (bridge/*/metadata.yaml) in the catalog: found beside the NeMo
ones, their rows the scales upstream lists with the layout left to Megatron-Bridge, and their
metadata checked once at load (llmb.recipes.bridgeschema), each problem in one line."""

from __future__ import annotations

import pytest
from llmb.recipes import catalog, images
from llmb.recipes.schema import CatalogError
from paths import REPO

BRIDGE = [r for r in catalog.all_recipes() if r.is_bridge]


def test_the_catalog_finds_the_bridge_folders() -> None:
    dirs = catalog.recipe_dirs()
    assert REPO / "bridge" / "qwen3" in dirs and REPO / "llama3.1" in dirs
    assert {r.directory.parent for r in BRIDGE} == {REPO / "bridge"}
    assert catalog.find_recipe("pretrain_qwen3").directory == REPO / "bridge" / "qwen3"
    assert catalog.find_recipe("llama3.1").directory == REPO / "llama3.1"  # the NeMo one first


@pytest.mark.parametrize("recipe", BRIDGE, ids=lambda r: r.name)
def test_identity_and_stack(recipe: catalog.Recipe) -> None:
    data = recipe.data
    assert data["upstream"]["release"] == "v26.08.00"
    version = data["framework"]["version"]  # 26.06.01; nemotron-h: 26.04.01, as upstream
    assert data["framework"]["name"] == "megatron-bridge" and version in ("26.06.01", "26.04.01")
    assert recipe.image == f"nvcr.io/nvidia/nemo:{version}"
    assert recipe.name in (recipe.directory.name, f"{recipe.directory.name}-bridge")
    assert (recipe.directory / "launch.sh").is_file() and (recipe.directory / "setup.sh").is_file()
    assert images.for_recipe(recipe.workload).file_name == f"nvidia+nemo+{version}.sqsh"


@pytest.mark.parametrize("recipe", BRIDGE, ids=lambda r: r.name)
def test_rows_leave_the_layout_to_megatron_bridge(recipe: catalog.Recipe) -> None:
    rows = recipe.rows()
    assert rows
    for cfg in rows:
        assert (cfg.tp, cfg.pp, cfg.cp, cfg.mbs, cfg.gbs, cfg.dp, cfg.ga) == (None,) * 7
        assert cfg.num_layers == recipe.size(cfg.model_size)["num_layers"]
        assert cfg.experiment_name == \
            f"{recipe.workload}_{cfg.model_size}_{cfg.dtype}_gpus{cfg.num_gpus}"
        assert cfg.nodes * cfg.gpus_per_node == cfg.num_gpus
    assert recipe.model_flops(recipe.sizes[0]) is None  # no model shape recorded: no FLOPs


def test_qwen3_scales_are_upstreams() -> None:
    qwen3 = catalog.find_recipe("pretrain_qwen3")
    assert qwen3.scales("235b", "fp8", "gb300") == [256, 512]
    assert qwen3.scales("30b", "bf16", "h100") == [16, 32, 64]
    assert qwen3.scales("235b", "fp8", "h100") == []
    with pytest.raises(CatalogError, match="published: 256, 512"):
        qwen3.resolve("235b", "bf16", "gb200", 128)


def drop(key: str):
    return lambda d: d.pop(key)


BAD = [
    (drop("upstream"), "missing key(s) upstream"),
    (lambda d: d["upstream"].pop("release"), "upstream: missing key(s) release"),
    (lambda d: d.update(image="nemo:26.06.01"), "image: 'nemo:26.06.01' is not an image"),
    (lambda d: d.update(gpu_overrides={"a100": {"image": "nvcr.io/nvidia/nemo:26.04.01"}}),
     "gpu_overrides.a100: GPU type 'a100' is not in gpus.yaml"),
    (lambda d: d.update(gpu_overrides={"b200": {"image": "nemo"}}),
     "gpu_overrides.b200.image: 'nemo' is not an image"),
    (lambda d: d["bridge"]["fp8_recipes"].update(h100=["dx"]),
     "fp8_recipes.h100: ['dx'] is not a list within cs, mx, sc"),
    (lambda d: d["bridge"]["fp8_recipes"].update(a100=["cs"]), "fp8_recipes.a100: ['cs']"),
    (lambda d: d["bridge"]["rules"][0]["when"].update(nodes=[2]),
     "rules[0].when: unknown key(s) nodes"),
    (lambda d: d["sizes"]["235b"].update(num_layers=0), "num_layers: 0 is not a positive"),
    (lambda d: d["bridge"]["args"].append("a'b"), "argument \"a'b\" holds a character"),
    (lambda d: d["bridge"]["rules"][0]["env"].update(X="$(id)"), "argument '$(id)' holds"),
    (lambda d: d["configs"][0].update(dtypes=["fp16"]), "dtype 'fp16' is not one of"),
    (lambda d: d["configs"].append(dict(d["configs"][0])), "is already listed by configs[0]"),
    (lambda d: d["configs"][0].update(source="v25.04"), "source must be upstream.release"),
    (lambda d: d["sizes"]["235b"].pop("perf"), "sizes.235b: missing key(s) perf"),
    (lambda d: d["bridge"].update(profile_args=["--nsys_trace=$(id)"]),
     "argument '--nsys_trace=$(id)' holds"),
]

BASE = "sizes.235b.perf.base_configs"


def base(mutate):
    return lambda d: mutate(d["sizes"]["235b"]["perf"]["base_configs"])


BAD += [
    (base(lambda b: b["gb300"]["bf16"].update(tp=0)), f"{BASE}.gb300.bf16.tp: 0 is not a "
     "positive integer"),
    (base(lambda b: b["gb300"]["bf16"].update(dispatcher="alltoall")),
     f"{BASE}.gb300.bf16.dispatcher: 'alltoall' is not one of deepep, hybridep"),
    (base(lambda b: b["gb300"]["bf16"].update(cutedsl="yes")),
     f"{BASE}.gb300.bf16.cutedsl: 'yes' is not true or false"),
    (base(lambda b: b["gb300"]["bf16"].update(moe_router=True)),
     f"{BASE}.gb300.bf16: unknown key(s) moe_router"),
    (base(lambda b: b["gb300"].update(fp16={})), f"{BASE}.gb300: expected a mapping of "
     "compute dtypes among bf16, nvfp4, fp8_cs, fp8_mx, fp8_sc"),
    (base(lambda b: b["gb300"]["bf16"].update(env={"NCCL_X": "a b"})),
     f"{BASE}.gb300.bf16.env: 'NCCL_X=a b' is not NAME=VALUE"),
    (lambda d: d["sizes"]["235b"]["perf"].update(p2p_chunksize="2M"),
     "sizes.235b.perf.p2p_chunksize: '2M' is not an integer above 1"),
]


@pytest.mark.parametrize("mutate,message", BAD, ids=[m for _, m in BAD])
def test_bad_metadata_is_refused_in_one_line(metadata_copy, mutate, message: str) -> None:
    folder = metadata_copy("qwen3", mutate)
    with pytest.raises(CatalogError) as err:
        catalog.load_recipe(folder)
    assert message in str(err.value) and "\n" not in str(err.value), str(err.value)
