"""llmb.analysis.identify: where a run's manifest is found, every manifest field the analysis uses
checked (one line, and the run is identified by its name instead), the names around a log in
the order they are tried, and a name or manifest turned into the catalog identity with the
published reference only for the published row.

The naming styles themselves (identify.parse_name) are in tests/analysis/test_cli.py; the
manifests here are the launcher's (tests/helpers/trainmanifests.py)."""

from __future__ import annotations

import copy
import itertools
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from llmb import manifest
from llmb.analysis import identify
from trainmanifests import find, make_manifest

WORKLOADS = ["pretrain_llama3.1", "pretrain_nemotron4", "pretrain_nemotronh"]
LLAMA8_16 = make_manifest(*find("llama3.1", "8b", "fp8", "h100", 16))
PATHS = (f"/runs/{i}/llmb_manifest.json" for i in itertools.count())


@pytest.fixture(scope="module")
def identifier() -> identify.Identifier:
    return identify.Identifier(None)


def changed(change: Callable[[dict[str, Any]], object]) -> dict[str, Any]:
    m = copy.deepcopy(LLAMA8_16)
    change(m)
    return m


def plain(ident: dict[str, Any] | None) -> dict[str, Any]:
    """An identity without its Recipe and Reference objects, for comparing."""
    assert ident is not None
    ref = ident["reference"]
    return {**{k: v for k, v in ident.items() if k not in ("recipe", "reference")},
            "recipe": ident["recipe"].name, "reference": ref.step_time if ref else None}


# --- finding the manifest ---------------------------------------------------------------------

def write_manifest(folder: Path, data: object | str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / manifest.NAME
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def a_log(run_dir: Path) -> Path:
    """A log where nemo-run puts it: <run dir>/<experiment>/log-..._0.out."""
    log = run_dir / "exp" / "log-acct.exp_1_0.out"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("")
    return log


def test_the_manifest_is_found_in_the_logs_folder_or_two_above(tmp_path: Path) -> None:
    log = a_log(tmp_path / "a" / "b" / "run")
    for folder in (log.parent, log.parent.parent, log.parent.parent.parent):
        path = write_manifest(folder, LLAMA8_16)
        assert identify.Manifests().near(str(log)) == (str(path), LLAMA8_16)
        path.unlink()
    write_manifest(tmp_path / "a", LLAMA8_16)  # three above: another run's, not this one's
    assert identify.Manifests().near(str(log)) is None


def test_the_nearest_manifest_wins(tmp_path: Path) -> None:
    log = a_log(tmp_path / "run")
    write_manifest(tmp_path / "run", changed(lambda d: d.update(experiment="outer")))
    write_manifest(log.parent, changed(lambda d: d.update(experiment="inner")))
    found = identify.Manifests().near(str(log))
    assert found is not None and isinstance(found[1], dict)
    assert found[1]["experiment"] == "inner"


@pytest.mark.parametrize(("content", "problem"), [
    ("{", "is not valid JSON (Expecting property name enclosed in double quotes: line 1 "
          "column 2 (char 1))"),
    ("[1, 2]", "is not a JSON object"),
    ('{"schema": 2}', "has schema=2, which is not supported; supported: 1"),
])
def test_a_broken_manifest_is_its_problem_not_nothing(tmp_path: Path, content: str,
                                                      problem: str) -> None:
    path = write_manifest(tmp_path, content)
    assert identify.Manifests().read(str(tmp_path)) == (str(path), problem)


def test_each_folder_is_read_once(tmp_path: Path) -> None:
    path = write_manifest(tmp_path, LLAMA8_16)
    found = identify.Manifests()
    first = found.read(str(tmp_path))
    path.unlink()
    assert found.read(str(tmp_path)) == first
    assert identify.Manifests().read(str(tmp_path)) is None


@pytest.mark.parametrize(("data", "traced"), [
    ({"options": {"nccl_trace": True}}, True),
    ({"options": {"nccl_trace": False}}, False),
    ({"options": {"nccl_trace": "true"}}, False),  # only a JSON true
    ({"options": None}, False),
    ({}, False),
    ("is not valid JSON (...)", False),
    (None, False),
])
def test_nccl_traced(data: Any, traced: bool) -> None:
    assert identify.nccl_traced(data) is traced


# --- names around a log -----------------------------------------------------------------------

@pytest.mark.parametrize(("rel", "root", "candidates"), [
    # DIR is an experiments folder: <experiment>/<experiment>_<stamp>/<experiment>/log-...
    ("pretrain_llama3.1_8b_fp8_16/pretrain_llama3.1_8b_fp8_16_1744/pretrain_llama3.1_8b_fp8_16/"
     "log-acct.x_7_0.out", "/i/workloads/pretrain_llama3.1/experiments",
     ["pretrain_llama3.1_8b_fp8_16", "pretrain_llama3.1_8b_fp8_16_1744", "experiments",
      "pretrain_llama3.1", "acct.x_7_0"]),
    # DIR is the run itself: the folder names above it come next
    ("log-pretrain_nemotron4_15b_bf16_16_2201346_0.out", "/r/pretrain_nemotron4_15b_bf16_16",
     ["pretrain_nemotron4_15b_bf16_16", "r", "pretrain_nemotron4_15b_bf16_16_2201346_0"]),
    ("a/b/c.out", "/", ["a", "b", "c"]),
])
def test_name_candidates_nearest_first(rel: str, root: str, candidates: list[str]) -> None:
    assert identify.name_candidates(rel, root) == candidates


def test_a_relative_root_is_named_by_its_absolute_path(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "pretrain_llama3.1_8b_bf16_16").mkdir()
    monkeypatch.chdir(tmp_path / "pretrain_llama3.1_8b_bf16_16")
    assert identify.name_candidates("log-x.out", ".") == [
        "pretrain_llama3.1_8b_bf16_16", tmp_path.name, "x"]


@pytest.mark.parametrize(("name", "expected"), [
    ("pretrain_llama3.1_8B_FP8_16", ("8b", "fp8", 16, None)),  # case does not matter
    ("pretrain_llama3.1_8b_fp8_0", None),  # no GPUs is no run
    ("pretrain_llama3.1_8b_fp8_gpus0_tp1_pp1_cp1_vpNone_mbs1_gbs128", None),
    ("pretrain_llama3.1_8b", None),
    ("pretrain_nemotron4_15b_fp8_gpus16_tp2_pp1_cp1_vpNone_mbs2_gbs64_nsys_ckpt_1744_3",
     ("15b", "fp8", 16, 64)),
])
def test_parse_name_edges(name: str, expected: tuple[Any, ...] | None) -> None:
    info = identify.parse_name(name, WORKLOADS)
    if expected is None:
        assert info is None
        return
    assert info is not None
    assert (info.model_size, info.dtype, info.num_gpus, info.gbs) == expected


def test_display_replaces_what_cannot_be_encoded() -> None:
    undecodable = os.fsdecode(b"runs/bad-\xff-name/log-x.out")
    assert identify.display(undecodable) == "runs/bad-\ufffd-name/log-x.out"
    assert identify.display("naïve/日本語") == "naïve/日本語"
    identify.display(undecodable).encode("utf-8")  # never raises


# --- the manifest's fields --------------------------------------------------------------------

BAD_FIELDS = [
    (lambda d: d.update(workload="pretrain_gpt3", recipe="gpt3"),
     "workload pretrain_gpt3 is not a known recipe (10 known: llmb-run list names them)"),
    (lambda d: d.update(num_gpus=0), "num_gpus is 0, not a positive whole number"),
    (lambda d: d.update(num_gpus=True), "num_gpus is true, not a positive whole number"),
    (lambda d: d.update(num_gpus="1e3"), 'num_gpus is "1e3", not a positive whole number'),
    (lambda d: d.update(num_gpus="\u0663"),  # a digit, but not an ASCII one
     'num_gpus is "\\u0663", not a positive whole number'),
    (lambda d: d.update(num_gpus="9" * 30), "num_gpus is \"999999999999999999999999999999\""),
    (lambda d: d["parallelism"].pop("gbs"), "parallelism.gbs is null, not a positive whole "
                                            "number"),
    (lambda d: d.update(parallelism=[]), "parallelism is not a mapping"),
    (lambda d: d.update(options="x"), "options is not a mapping"),
    (lambda d: d["options"].update(max_steps=0), "options.max_steps is 0, not a positive whole "
                                                 "number"),
    (lambda d: d["options"].update(smoke_test="yes"), "options.smoke_test is not true or false"),
    (lambda d: d.update(scaling="diagonal"), "scaling is diagonal, not weak or strong"),
    (lambda d: d.update(model_size=""), 'model_size is "", not a name'),
    (lambda d: d.update(dtype=8), "dtype is 8, not a name"),
]


@pytest.mark.parametrize(("change", "problem"), BAD_FIELDS, ids=[p[:30] for _, p in BAD_FIELDS])
def test_a_bad_field_is_one_line_and_the_name_is_used_instead(
        identifier: identify.Identifier, change: Callable[[dict[str, Any]], object],
        problem: str) -> None:
    ident, warning = identifier.from_manifest(next(PATHS), changed(change))
    assert ident is None and warning is not None
    assert warning.startswith(problem) and warning.endswith("; identified by name instead")
    assert "\n" not in warning and len(warning) < 200


def test_a_launchers_manifest_is_the_published_row(identifier: identify.Identifier) -> None:
    ident, warning = identifier.from_manifest(next(PATHS), LLAMA8_16)
    assert warning is None
    assert plain(ident) == {
        "recipe": "llama3.1", "experiment": LLAMA8_16["experiment"], "model_size": "8b",
        "dtype": "fp8", "gpu_type": "h100", "num_gpus": 16, "gbs": 256, "scaling": "weak",
        "num_layers": 32, "seq_length": 8192, "by": "manifest", "final_index": 49,
        "smoke": False, "reference": 9.36, "gbs_from": "manifest", "parallel": (1, 1, 2)}


@pytest.mark.parametrize(("change", "expect"), [
    # by recipe folder name when the workload is not given
    (lambda d: d.pop("workload"), {"recipe": "llama3.1"}),
    # whole numbers as strings of digits, names in any case
    (lambda d: d.update(num_gpus=" 16 ", dtype="FP8", gpu_type="H100"),
     {"num_gpus": 16, "dtype": "fp8", "gpu_type": "h100", "reference": 9.36}),
    # no gpu_type: the analyzer's own (default h100); no seq_length: the recipe's
    (lambda d: (d.pop("gpu_type"), d.pop("seq_length")), {"gpu_type": "h100",
                                                          "seq_length": 8192}),
    # no max_steps: the log's own count decides
    (lambda d: d["options"].pop("max_steps"), {"final_index": None}),
    # another GBS than the published row's: no reference
    (lambda d: d["parallelism"].update(gbs="512"), {"gbs": 512, "reference": None}),
    # scaling not known: no reference
    (lambda d: d.update(scaling=None), {"scaling": None, "reference": None}),
    # a smoke test trains a stand-in model: no reference
    (lambda d: d["options"].update(smoke_test=True), {"smoke": True, "reference": None}),
    (lambda d: d.update(experiment=["not", "a", "name"]), {"experiment": None}),
])
def test_what_a_manifest_may_leave_out_or_say_otherwise(
        identifier: identify.Identifier, change: Callable[[dict[str, Any]], object],
        expect: dict[str, Any]) -> None:
    ident, warning = identifier.from_manifest(next(PATHS), changed(change))
    assert warning is None
    got = plain(ident)
    assert {k: got[k] for k in expect} == expect


def test_a_manifest_is_worked_out_once_per_path(identifier: identify.Identifier) -> None:
    path = next(PATHS)
    first = identifier.from_manifest(path, LLAMA8_16)
    assert identifier.from_manifest(path, changed(lambda d: d.update(num_gpus=0))) is first
    # a manifest that could not be read arrives as its problem
    assert identifier.from_manifest(next(PATHS), "is not a JSON object") == (
        None, "is not a JSON object; identified by name instead")


# --- names ------------------------------------------------------------------------------------

@pytest.mark.parametrize(("gpu", "name", "expect"), [
    # the old style takes its GBS from the published weak row at that scale
    (None, "pretrain_llama3.1_8b_fp8_16", {"gbs": 256, "scaling": "weak", "num_layers": 32,
                                          "reference": 9.36, "gpu_type": "h100"}),
    # a scale nobody published: identified by the weak rule, no reference
    (None, "pretrain_llama3.1_8b_fp8_24", {"gbs": 384, "scaling": "weak", "reference": None}),
    # another GBS than the weak rule's, on a GPU that publishes no strong scaling
    (None, "pretrain_llama3.1_8b_fp8_gpus16_tp1_pp1_cp2_vpNone_mbs1_gbs512",
     {"gbs": 512, "scaling": "strong", "num_layers": None, "reference": None}),
    # the GPU type comes from --gpu-type; strong scaling is published for GB200
    ("gb200", "pretrain_nemotron4_340b_fp8_gpus128_tp8_pp4_cp1_vp12_mbs1_gbs512",
     {"gpu_type": "gb200", "scaling": "strong", "gbs": 512}),
])
def test_from_name(gpu: str | None, name: str, expect: dict[str, Any]) -> None:
    identifier = identify.Identifier(gpu)
    info = identify.parse_name(name, list(identifier.recipes))
    assert info is not None
    got = plain(identifier.from_name(info))
    assert {k: got[k] for k in expect} == expect
    assert (got["by"], got["final_index"], got["smoke"]) == ("name", None, False)


def test_figures_need_a_known_size_dtype_and_gpu(identifier: identify.Identifier) -> None:
    ident, _ = identifier.from_manifest(next(PATHS), LLAMA8_16)
    assert ident is not None
    assert identifier.model_flops(ident) == ident["recipe"].model_flops("8b", 32)
    assert identifier.peak_tflops(ident) == 1979.0
    assert identifier.peak_tflops(ident, "b200") == 4500.0
    assert identifier.peak_tflops(ident, "a100") is None
    assert identifier.peak_tflops({**ident, "dtype": "fp16"}) is None
    assert identifier.model_flops({**ident, "model_size": "7b"}) is None


def test_identify_tries_the_manifest_then_the_names(identifier: identify.Identifier) -> None:
    rel = "pretrain_llama3.1_8b_bf16_16/log-acct.x_7_0.out"
    by_manifest, warning = identifier.identify((next(PATHS), LLAMA8_16), rel, "/e")
    assert by_manifest is not None and warning is None
    assert (by_manifest["by"], by_manifest["dtype"]) == ("manifest", "fp8")
    broken = changed(lambda d: d.update(dtype=None))
    by_name, warning = identifier.identify((next(PATHS), broken), rel, "/e")
    assert by_name is not None and (by_name["by"], by_name["dtype"]) == ("name", "bf16")
    assert warning == "dtype is null, not a name; identified by name instead"
    assert identifier.identify(None, "my-run/log-x_1_0.out", "/e") == (None, None)
