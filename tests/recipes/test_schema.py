"""llmb.recipes.schema, the checks of metadata.yaml and gpus.yaml: each broken copy is refused
with one line naming the problem.

Every case mutates a loaded copy of a real recipe's metadata (conftest `metadata_copy`), so the
rest of the file stays valid and the error can only come from the one thing broken.
"""

from __future__ import annotations

from typing import Any

import pytest
from llmb.recipes import catalog, schema
from llmb.recipes.catalog import CatalogError
from metadatarefusals import assert_refused


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
    assert_refused(metadata_copy(name, mutate), message)


def test_an_unchanged_copy_loads(metadata_copy, recipes):
    """The mutations above are the only reason their copies fail."""
    for name, original in recipes.items():
        copy = catalog.load_recipe(metadata_copy(name, lambda d: None))
        assert copy.rows() == original.rows()
        assert copy.data["references"] == original.data["references"]


def test_logged_tflops_is_a_boolean_and_only_nemotronh_distrusts_the_log(metadata_copy, recipes):
    folder = metadata_copy("nemotronh", lambda d: d.update(logged_tflops="no"))
    with pytest.raises(catalog.CatalogError, match="logged_tflops must be true or false"):
        catalog.load_recipe(folder)
    assert {name: r.logged_tflops for name, r in recipes.items() if not r.is_bridge} == {
        "llama3.1": True, "nemotron": True, "nemotronh": False}


def test_broken_provenance_is_refused(metadata_copy):
    folder = metadata_copy("nemotron", lambda d: d["sources"].pop("001"))
    with pytest.raises(CatalogError, match=r"configs\[1\]: source 001 has no entry under sources"):
        catalog.load_recipe(folder)
    folder = metadata_copy("nemotron", lambda d: d["sources"]["002"].pop("image"))
    with pytest.raises(CatalogError, match=r"sources\.002: missing key\(s\) image"):
        catalog.load_recipe(folder)


def test_only_the_gpu_types_given_are_known(recipes):
    """The GPU types come from the catalog (gpus.yaml); the schema knows no others."""
    with pytest.raises(CatalogError, match=r"configs\[\d+\]: GPU type 'b200' is not in gpus\.yaml"):
        schema.validate(recipes["nemotron"].data, "nemotron", known_gpus=["h100", "gb200"])
    schema.validate(recipes["nemotron"].data, "nemotron", known_gpus=catalog.gpu_types())


GPU = {"gpus_per_node": 8, "arch": "hopper", "peak_tflops": {"bf16": 989, "fp8": 1979},
       "cuda_device_max_connections": 1, "env": {}}


@pytest.mark.parametrize(("entry", "message"), [
    (["h100"], r"^gpus\.yaml: h100: expected a mapping, got list$"),
    ({k: v for k, v in GPU.items() if k != "arch"}, r"^gpus\.yaml: h100: missing key\(s\) arch$"),
    ({**GPU, "tdp": 700}, r"^gpus\.yaml: h100: unknown key\(s\) tdp$"),
    ({**GPU, "screen": {"colour": 1}}, r"^gpus\.yaml: h100\.screen: "),
])
def test_a_broken_gpu_type_is_refused_in_one_line(entry, message):
    with pytest.raises(CatalogError, match=message):
        schema.check_gpu("gpus.yaml: h100", entry)
    schema.check_gpu("gpus.yaml: h100", GPU)
