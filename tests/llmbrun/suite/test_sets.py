"""llmb.llmbrun.suite.sets: the Exemplar set as data (common/suites/exemplar.yaml, held to
upstream's lists: NVIDIA/exemplar-performance v26.08.00, exemplar.yaml and
Exemplar_validation.md), planned per GPU type through the recipes' `upstream` field
(tests/helpers/setrecipes.py: recipe folders in tmp that carry it), every workload x dtype that
cannot run named in one line, and `suite submit --set` (its dry run and its record)."""

from __future__ import annotations

import re
from pathlib import Path

import fakeinstall
import pytest
import runinstall
import setrecipes
import yaml
from llmb.launch.placement import Placement
from llmb.llmbrun import clusterconfig
from llmb.llmbrun.errors import RunError
from llmb.llmbrun.suite import commands as suitecmd
from llmb.llmbrun.suite import record as suites
from llmb.llmbrun.suite import sets
from llmb.llmbrun.suite.plan import Selection
from llmb.recipes import catalog
from llmb.shared.errors import UsageError

INSTALLED = ("pretrain_llama3.1_mb", "pretrain_qwen3_mb")  # not pretrain_nemotronh_mb


def install(tmp_path: Path, gpu: str, workloads: tuple[str, ...] = INSTALLED
            ) -> clusterconfig.ClusterConfig:
    root = runinstall.make_install(tmp_path / gpu, gpu_type=gpu, workloads=workloads)
    return clusterconfig.find_config(str(root / "cluster_config.yaml"), {})


def test_the_set_file_holds_upstreams_lists():
    the_set = sets.load("exemplar")
    assert (the_set.scale, the_set.repeats, the_set.profile) == (512, 1, False)
    assert the_set.origin() == "NVIDIA/exemplar-performance v26.08.00, exemplar.yaml"
    # Exemplar_validation.md's tables: workloads and workload x dtype per GPU type
    counts = {gpu: (len(ws), sum(len(w.dtypes) for w in ws))
              for gpu, ws in the_set.workloads.items()}
    assert counts == {"gb300": (8, 14), "gb200": (8, 13), "b300": (8, 13), "b200": (8, 12),
                      "h100": (4, 5)}
    h100 = {w.name: (w.key, w.size, w.dtypes) for w in the_set.for_gpu("h100")}
    assert h100 == {
        "pretrain_gpt_oss_120b": ("pretrain_gpt_oss", "120b", ("bf16",)),
        "pretrain_llama3.1_70b": ("pretrain_llama3.1", "70b", ("bf16", "fp8")),
        "pretrain_nemotron-h_56b": ("pretrain_nemotron-h", "56b", ("fp8",)),
        "pretrain_qwen3_235b": ("pretrain_qwen3", "235b", ("bf16",))}
    assert the_set.for_gpu("gb300")[0].dtypes == ("bf16", "fp8", "nvfp4")
    assert {w.size for w in the_set.for_gpu("b200")} >= {"1t", "671b"}


def test_h100_plans_each_workload_x_dtype_and_names_what_cannot_run(tmp_path, monkeypatch):
    setrecipes.seen(tmp_path, monkeypatch)
    cfg = install(tmp_path, "h100")
    configs, found = sets.plan_set(cfg, sets.load("exemplar"), 512, {})
    assert [c.key for c in configs] == ["pretrain_llama3.1_mb/70b/bf16/weak/512",
                                        "pretrain_llama3.1_mb/70b/fp8/weak/512",
                                        "pretrain_qwen3_mb/235b/bf16/weak/512"]
    assert (found["scale"], found["planned_scale"], found["gpu_type"]) == (512, 512, "h100")
    assert [(e["workload"], e["dtype"], e["config"]) for e in found["entries"]] == [
        ("pretrain_gpt_oss_120b", "bf16", None), ("pretrain_llama3.1_70b", "bf16", 0),
        ("pretrain_llama3.1_70b", "fp8", 1), ("pretrain_nemotron-h_56b", "fp8", None),
        ("pretrain_qwen3_235b", "bf16", 2)]
    assert sets.missing_lines(found) == [
        "not planned: pretrain_gpt_oss_120b bf16: no llmb recipe carries upstream workload "
        "pretrain_gpt_oss with size 120b; add it (bridge/)",
        "not planned: pretrain_nemotron-h_56b fp8: pretrain_nemotronh_mb is not installed here "
        "(installed: pretrain_llama3.1_mb, pretrain_qwen3_mb); rerun the installer with it"]


def test_b200_plans_its_own_list_and_names_unpublished_dtypes(tmp_path, monkeypatch):
    setrecipes.seen(tmp_path, monkeypatch)
    cfg = install(tmp_path, "b200")
    configs, found = sets.plan_set(cfg, sets.load("exemplar"), 512, {})
    assert [c.key for c in configs] == ["pretrain_qwen3_mb/235b/bf16/weak/512",
                                        "pretrain_qwen3_mb/235b/fp8/weak/512"]
    assert len(found["entries"]) == 12  # every workload x dtype of b200, planned or not
    lines = sets.missing_lines(found)
    assert len(lines) == 10
    assert "not planned: pretrain_llama3.1_405b nvfp4: pretrain_llama3.1_mb 405b publishes no " \
           "nvfp4 on b200 (published: none)" in lines


def test_a_recipe_of_another_release_is_not_taken_and_says_so(tmp_path, monkeypatch):
    setrecipes.seen(tmp_path, monkeypatch, release="v26.06.00")
    cfg = install(tmp_path, "h100")
    with pytest.raises(RunError) as err:
        sets.plan_set(cfg, sets.load("exemplar"), 512, {})
    assert str(err.value) == (
        "no workload of the exemplar set can run on h100 here (e.g. pretrain_gpt_oss_120b "
        "bf16: no llmb recipe carries upstream workload pretrain_gpt_oss with size 120b; add "
        "it (bridge/))")
    llama = sets.resolve(sets.load("exemplar"), sets.load("exemplar").for_gpu("h100")[1])
    assert llama == (None, ["v26.06.00"])


def test_a_rehearsal_scale_must_be_below_the_sets_and_published(tmp_path, monkeypatch):
    setrecipes.seen(tmp_path, monkeypatch)
    cfg = install(tmp_path, "h100")
    the_set = sets.load("exemplar")
    with pytest.raises(UsageError, match=r"^--scale 1024 is not a rehearsal scale of the "
                       r"exemplar set; give 1 to 512"):
        sets.plan_set(cfg, the_set, 1024, {})
    configs, found = sets.plan_set(cfg, the_set, 64, {})
    assert found["planned_scale"] == 64 and {c.scale for c in configs} == {64}
    assert "pretrain_qwen3_mb 235b bf16 publishes no 64-GPU row on h100" in \
        " ".join(sets.missing_lines(found))


def test_a_gpu_type_the_set_lacks_is_one_line():
    with pytest.raises(RunError, match=r"^the exemplar set has no workloads for gpu_type "
                       r"h200; it has: gb300, gb200, b300, b200, h100$"):
        sets.load("exemplar").for_gpu("h200")


BAD_SETS = [
    ({"workloads": {"h100": [{"llama": {"dtypes": ["bf16"]}}]}},
     "workloads.h100[0] is llama, not <upstream workload>_<size>"),
    ({"workloads": {"h100": [{"a_1b": {"dtypes": []}}]}}, "dtypes (); give distinct dtype"),
    ({"workloads": {"h100": [{"a_1b": {"dtypes": ["bf16", "bf16"]}}]}}, "give distinct dtype"),
    ({"workloads": {"h100": [{"a_1b": {"dtypes": ["bf16"]}}, {"a_1b": {"dtypes": ["fp8"]}}]}},
     "a_1b is given twice for h100; keep one"),
    ({"workloads": {"h100": [{"a_1b": {"dtypes": ["x"]}, "b_2b": {"dtypes": ["x"]}}]}},
     "has 2 keys; give one"),
    ({"config": {"scale": 0, "repeats": 1, "profile": False}}, "config.scale is 0"),
    ({"config": {"scale": "512", "repeats": 1, "profile": False}}, "config.scale is '512'"),
]


@pytest.mark.parametrize(("change", "message"), BAD_SETS, ids=[m for _, m in BAD_SETS])
def test_a_damaged_set_file_is_one_line(tmp_path, change, message):
    data = yaml.safe_load((sets.SETS_DIR / "exemplar.yaml").read_text())
    data.update(change)
    (tmp_path / "exemplar.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(RunError) as err:
        sets.load("exemplar", tmp_path)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_an_unknown_set_is_refused():
    with pytest.raises(UsageError, match=r"^--set mlperf is not a set; known: exemplar$"):
        sets.load("mlperf")


def test_submit_set_dry_run_prints_the_set_and_records_nothing(tmp_path, monkeypatch, capsys):
    setrecipes.seen(tmp_path, monkeypatch)
    root = fakeinstall.make_install(tmp_path / "install", workloads=INSTALLED)  # with an image
    cfg = clusterconfig.find_config(str(root / "cluster_config.yaml"), {})
    rc = suitecmd.cmd_submit(cfg, Selection(), None, None, False, True, True, Placement(),
                             False, set_name="exemplar", scale=64)
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    out = captured.out
    lines = out.splitlines()
    assert lines[0] == ("Suite plan: 2 configuration(s) x 1 repeat(s) = 2 run(s) of "
                        "pretrain_llama3.1_mb on h100, 64 to 64 GPUs (at most 64: --scale 64, "
                        "a rehearsal of the exemplar set's 512)")
    assert ("Set exemplar (NVIDIA/exemplar-performance v26.08.00, exemplar.yaml) on h100: 2 of "
            "5 workload x dtype planned at 64 GPUs") in lines
    assert "Rehearsal: 64 GPUs, not the set's 512: its verdict accepts nothing" in lines
    assert sum(line.startswith("  not planned: ") for line in lines) == 3
    assert not cfg.tree.suites.exists()


@pytest.mark.parametrize(("kw", "message"), [
    ({"sel": Selection(dtypes=("fp8",))}, "--set exemplar plans the set's workloads, dtypes"),
    ({"repeats": 3}, "--repeats 3: the exemplar set runs each workload 1 time(s)"),
    ({"set_name": None, "scale": 64}, "--scale 64 applies with --set only"),
])
def test_set_flags_that_do_not_fit_are_refused(tmp_path, monkeypatch, kw, message):
    setrecipes.seen(tmp_path, monkeypatch)
    cfg = install(tmp_path, "h100")
    args = {"sel": Selection(), "repeats": None, "set_name": "exemplar", "scale": None, **kw}
    with pytest.raises(UsageError, match="^" + re.escape(message)):
        suitecmd.cmd_submit(cfg, args["sel"], args["repeats"], None, False, True, True,
                            Placement(), False, set_name=args["set_name"],
                            scale=args["scale"])


def test_the_set_record_is_kept_and_read_back(tmp_path, monkeypatch):
    setrecipes.seen(tmp_path, monkeypatch)
    cfg = install(tmp_path, "h100")
    configs, found = sets.plan_set(cfg, sets.load("exemplar"), 512, {})
    made = suites.create(cfg, suites.plan_data("x", configs, [], {"repeats": 1, "set": found}))
    again = suites.load(cfg, made.id)
    assert again.data["set"] == found
    assert suitecmd.set_lines(again)[0].endswith("on h100: 3 of 5 workload x dtype planned "
                                                 "at 512 GPUs")
    damaged = {**again.data, "set": {**found, "entries": [{**found["entries"][1],
                                                           "config": 7}]}}
    with pytest.raises(ValueError, match=r"set\.entries name a configuration"):
        suites.parse(made.id, made.path, damaged)


def test_the_repositorys_bridge_recipes_carry_the_h100_set(tmp_path):
    """Without stand-ins: each workload of the set for h100 resolves to the bridge recipe that
    carries its upstream name, at the set's scale, fp8 being the recipe's own FP8 recipe."""
    cfg = install(tmp_path, "h100", workloads=("pretrain_gpt_oss", "pretrain_llama3.1-bridge",
                                               "pretrain_nemotron-h", "pretrain_qwen3"))
    configs, found = sets.plan_set(cfg, sets.load("exemplar"), 512, {})
    assert [c.key for c in configs] == [
        "pretrain_gpt_oss/120b/bf16/weak/512", "pretrain_llama3.1-bridge/70b/bf16/weak/512",
        "pretrain_llama3.1-bridge/70b/fp8/weak/512", "pretrain_nemotron-h/56b/fp8/weak/512",
        "pretrain_qwen3/235b/bf16/weak/512"]
    assert sets.missing_lines(found) == []


def test_a_smoke_suite_plans_a_scale_a_row_does_not_publish(tmp_path, monkeypatch):
    """As SMOKE_TEST=true ./launch.sh runs an off-matrix scale; a benchmark suite refuses it."""
    setrecipes.seen(tmp_path, monkeypatch)
    cfg = install(tmp_path, "h100")
    the_set = sets.load("exemplar")
    refused, found = sets.plan_set(cfg, the_set, 64, {})
    configs, smoked = sets.plan_set(cfg, the_set, 64, {}, smoke=True)
    assert [c.key for c in configs] == [c.key for c in refused] + [
        "pretrain_qwen3_mb/235b/bf16/weak/64"]
    assert configs[-1].reference is None  # no published row: no reference
    qwen = [e for e in smoked["entries"] if e["workload"] == "pretrain_qwen3_235b"]
    assert [(e["config"], e["missing"]) for e in qwen] == [(2, None)]
    # what cannot run for another reason stays unplanned
    assert sets.missing_lines(smoked) == [line for line in sets.missing_lines(found)
                                          if "publishes no 64-GPU row" not in line]


def test_submit_smoke_set_warns_once_per_off_scale_row(tmp_path, monkeypatch, capsys):
    setrecipes.seen(tmp_path, monkeypatch)
    root = fakeinstall.make_install(tmp_path / "install", workloads=INSTALLED)
    cfg = clusterconfig.find_config(str(root / "cluster_config.yaml"), {})
    rc = suitecmd.cmd_submit(cfg, Selection(), None, None, True, True, True, Placement(),
                             False, set_name="exemplar", scale=64)
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    assert "Suite plan: 3 configuration(s) x 1 repeat(s) = 3 run(s)" in captured.out
    warned = [line for line in captured.err.splitlines() if "not a published scale" in line]
    assert len(warned) == 1 and warned[0].startswith("llmb-run: warning: "), captured.err
    assert "pretrain_qwen3_mb 235b bf16" in warned[0] and "a smoke run uses the nearest " \
        "published layout, no reference applies" in warned[0]


def test_the_whole_gb300_set_plans_on_one_node_as_a_smoke_suite(tmp_path):
    """The repository's bridge recipes: every workload x dtype of the GB300 set at 4 GPUs (one
    GB300 node, a scale none of them publishes) when --smoke; none without it."""
    workloads = tuple(r.workload for r in catalog.all_recipes() if r.is_bridge)
    cfg = install(tmp_path, "gb300", workloads=workloads)
    configs, found = sets.plan_set(cfg, sets.load("exemplar"), 4, {}, smoke=True)
    assert len(configs) == len(found["entries"]) == 14 and sets.missing_lines(found) == []
    assert {c.scale for c in configs} == {4} and {c.reference for c in configs} == {None}
    with pytest.raises(RunError, match=r"^no workload of the exemplar set can run on gb300 here"):
        sets.plan_set(cfg, sets.load("exemplar"), 4, {})
