"""metadata.yaml validation: each broken copy is refused with one line naming the problem.

Every case mutates a loaded copy of a real recipe's metadata (conftest `metadata_copy`), so the
rest of the file stays valid and the error can only come from the one thing broken.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from llmb.recipes import catalog
from llmb.recipes.catalog import CatalogError


def first_config(data: dict[str, Any], size: str) -> dict[str, Any]:
    return next(c for c in data["configs"] if c["size"] == size)


def set_in(path: tuple[Any, ...], value: Any):
    def mutate(data: dict[str, Any]) -> None:
        target = data
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
    return mutate


def delete(path: tuple[Any, ...]):
    def mutate(data: dict[str, Any]) -> None:
        target = data
        for key in path[:-1]:
            target = target[key]
        del target[path[-1]]
    return mutate


def in_first_config(of_size: str, **changes: Any):
    """Set (value) or delete (None) keys of the first configs entry of size `of_size`."""
    def mutate(data: dict[str, Any]) -> None:
        entry = first_config(data, of_size)
        for key, value in changes.items():
            if value is None:
                entry.pop(key, None)
            else:
                entry[key] = value
    return mutate


CASES = [
    # unknown and missing keys, at the top, in a size, a model shape, a config, a reference
    pytest.param("nemotron", set_in(("colour",), "blue"), r"unknown key\(s\) colour",
                 id="unknown-top-key"),
    pytest.param("nemotron", delete(("seq_length",)), r"missing key\(s\) seq_length",
                 id="missing-top-key"),
    pytest.param("llama3.1", set_in(("sizes", "8b", "layers"), 32),
                 r"sizes\.8b: unknown key\(s\) layers", id="unknown-size-key"),
    pytest.param("llama3.1", delete(("sizes", "70b", "time_limit")),
                 r"sizes\.70b: missing key\(s\) time_limit", id="missing-size-key"),
    pytest.param("nemotronh", delete(("sizes", "56b", "model", "mamba_state_dim")),
                 r"sizes\.56b\.model: missing key\(s\) mamba_state_dim", id="missing-shape-key"),
    pytest.param("nemotron", in_first_config("15b", tpp=2), r"configs\[0\]: unknown key\(s\) tpp",
                 id="unknown-config-key"),
    pytest.param("nemotron", in_first_config("15b", mbs=None),
                 r"configs\[0\]: missing key\(s\) mbs", id="missing-config-key"),
    pytest.param("nemotron", lambda d: d["references"][0].pop("source"),
                 r"references\[0\]: missing key\(s\) source", id="missing-reference-key"),
    # the GBS rule: exactly one of gbs, gbs_per_gpu
    pytest.param("nemotron", in_first_config("15b", gbs=64),
                 r"configs\[0\]: give exactly one of gbs, gbs_per_gpu", id="both-gbs-rules"),
    pytest.param("nemotron", in_first_config("15b", gbs_per_gpu=None),
                 r"configs\[0\]: give exactly one of gbs, gbs_per_gpu", id="no-gbs-rule"),
    pytest.param("nemotron", in_first_config("340b", gbs_per_gpu=0.3),
                 r"340b \w+ h100 at 128 GPUs: global batch size 38\.4 is not a whole number",
                 id="fractional-gbs"),
    # the DP/GA arithmetic of every published row
    pytest.param("llama3.1", in_first_config("8b", cp=3),
                 r"8b \w+ h100 at 8 GPUs: 8 GPUs is not divisible by TP x PP x CP = 3",
                 id="dp-arithmetic"),
    pytest.param("nemotron", in_first_config("15b", mbs=3),
                 r"15b \w+ h100 at 16 GPUs: global batch size 64 is not divisible by "
                 r"MBS x DP = 24", id="ga-arithmetic"),
    # names that must be known
    pytest.param("nemotron", set_in(("family",), "gpt"),
                 r"family 'gpt' is not one of llama, nemotron4, nemotronh", id="unknown-family"),
    pytest.param("nemotron", in_first_config("15b", gpu_types=["h100", "a100"]),
                 r"configs\[0\]: GPU type 'a100' is not in gpus\.yaml", id="unknown-gpu-type"),
    pytest.param("nemotron", in_first_config("15b", dtypes=["fp16"]),
                 r"configs\[0\]: dtype 'fp16' is not one of bf16, fp8", id="unknown-dtype"),
    pytest.param("nemotron", in_first_config("15b", size="22b"),
                 r"configs\[0\]: size 22b is not under sizes", id="unknown-size"),
    pytest.param("nemotron", in_first_config("15b", scaling="sideways"),
                 r"configs\[0\]: bad scaling 'sideways'", id="unknown-scaling"),
    pytest.param("nemotron", in_first_config("15b", source="005"),
                 r"configs\[0\]: bad scaling 'weak' or source '005'", id="unknown-config-source"),
    pytest.param("nemotron", lambda d: d["references"][0].update(source="1"),
                 r"references\[0\]: unknown source '1'", id="unknown-reference-source"),
    pytest.param("nemotron", set_in(("cluster_types",), ["slurm", "k8s"]),
                 r"cluster type 'k8s' is not one of slurm, runai, local",
                 id="unknown-cluster-type"),
    # one published row, one entry; one reference, one published row
    pytest.param("nemotron", in_first_config("15b", scales=[16, 32, 64, 128, 256, 512, 1024]),
                 r"configs\[1\]: 15b bf16 h100 weak 1024 GPUs is already published by "
                 r"configs\[0\]", id="row-published-twice"),
    pytest.param("nemotron", lambda d: d["references"][0]["step_time"].update({4096: 2.9}),
                 r"references\[0\]: step time for 15b bf16 h100 weak 4096 GPUs, a row no "
                 r"entry of configs publishes", id="reference-without-row"),
    pytest.param("llama3.1", lambda d: d["references"][0].update(gpu_type="gb200"),
                 r"references\[0\]: step time for 8b bf16 gb200 weak 8 GPUs", id="reference-gpu"),
    # the NeMo job of every row (llmb.recipes.nemojob), at each level
    pytest.param("llama3.1", set_in(("nemo", "cuda_graph"), True),
                 r"nemo: unknown key 'cuda_graph'; allowed: performance_mode, cuda_graphs",
                 id="nemo-unknown-key"),
    pytest.param("llama3.1", set_in(("nemo", "cuda_graphs"), "yes"),
                 r"nemo: cuda_graphs='yes' is not true or false", id="nemo-not-a-boolean"),
    pytest.param("llama3.1", delete(("nemo", "performance_mode")),
                 r"configs\[0\]: the NeMo job of its bf16 rows: no level sets performance_mode",
                 id="nemo-incomplete"),
    pytest.param("llama3.1",
                 set_in(("sizes", "70b", "nemo", "comm_overlap", "wgrad_deferral_limit"), 0),
                 r"sizes\.70b\.nemo: comm_overlap\.wgrad_deferral_limit=0 is not an integer "
                 r"from 1 to 10000000", id="nemo-size-level"),
    pytest.param("nemotron", set_in(("nemo", "tokenizer", "library"), None),
                 r"nemo: tokenizer must be a mapping whose library is one of huggingface, null "
                 r"\(quote \"null\" in YAML\)", id="nemo-unquoted-null"),
    pytest.param("nemotron", set_in(("nemo", "precision_aware_optimizer"), {"bf16": True}),
                 r"configs\[0\]: the NeMo job of its fp8 rows: precision_aware_optimizer gives "
                 r"no value for fp8", id="nemo-by-dtype-incomplete"),
    pytest.param("nemotron", lambda d: d["configs"][5]["nemo"]["comm_overlap"].update(
                     userbuffers="no such layout"),
                 r"configs\[5\]\.nemo: comm_overlap\.userbuffers='no such layout' is not a "
                 r"userbuffers_\* layout name", id="nemo-config-level"),
    pytest.param("nemotron", set_in(("nemo", "runai", "comm_overlap"),
                                    {"tp_comm_bootstrap_backend": "tcp"}),
                 r"nemo: comm_overlap\.tp_comm_bootstrap_backend='tcp' is not one of nccl, mpi, "
                 r"gloo", id="nemo-condition"),
    pytest.param("llama3.1", set_in(("profile", "stop_step"), 20),
                 r"profile steps 20\.\.20 are not 0 < start < stop", id="profile-steps"),
]


@pytest.mark.parametrize(("name", "mutate", "message"), CASES)
def test_broken_metadata_is_refused(metadata_copy, name, mutate, message):
    folder = metadata_copy(name, mutate)
    with pytest.raises(CatalogError) as err:
        catalog.load_recipe(folder)
    text = str(err.value)
    assert re.search(message, text), text
    assert str(folder / "metadata.yaml") in text or " at " in text  # says which file or row
    assert "\n" not in text


def test_an_unchanged_copy_loads(metadata_copy, recipes):
    """The mutations above are the only reason their copies fail."""
    for name, original in recipes.items():
        copy = catalog.load_recipe(metadata_copy(name, lambda d: None))
        assert copy.rows() == original.rows()
        assert copy.data["references"] == original.data["references"]


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


def test_logged_tflops_is_a_boolean_and_only_nemotronh_distrusts_the_log(metadata_copy, recipes):
    folder = metadata_copy("nemotronh", lambda d: d.update(logged_tflops="no"))
    with pytest.raises(catalog.CatalogError, match="logged_tflops must be true or false"):
        catalog.load_recipe(folder)
    assert {name: r.logged_tflops for name, r in recipes.items()} == {
        "llama3.1": True, "nemotron": True, "nemotronh": False}
