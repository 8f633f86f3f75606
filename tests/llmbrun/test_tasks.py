"""llmb.llmbrun.tasks: a bulk file expanded into tasks (sizes x dtypes x scales x repeats, the
defaults under each task) with every structural error collected, --env overrides parsed and
normalised, and each task checked against the recipe and the install (scale rules, placement).
The command-line view of the same (one line per error, nothing submitted) is in test_cli.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from llmb.launch import placement
from llmb.llmbrun import clusterconfig, tasks
from llmb.llmbrun.errors import RunError
from llmb.llmbrun.tasks import Task
from llmb.shared.errors import UsageError
from llmb.shared.values import BadValue
from runconfig import installed

NEMOTRON = {"workload": "pretrain_nemotron4", "size": "340b", "dtype": "fp8", "scale": 128}


def expand(data: Any, place: placement.Placement | None = None
           ) -> tuple[list[Task], list[str]]:
    return tasks.tasks_from_bulk(data, "sweep.yaml", place)


@pytest.fixture
def gb200(tmp_path: Path) -> clusterconfig.ClusterConfig:
    """An install of Llama 3.1 and Nemotron-4 on GB200 (4 GPUs per node)."""
    return installed(tmp_path / "gb200", gpu_type="gb200")


# --- bulk files -------------------------------------------------------------------------------

def test_the_product_in_order_with_the_defaults_under_each_task() -> None:
    data = {"defaults": {"dtype": "fp8", "repeats": 2, "env": {"MAX_STEPS": 20,
                                                               "NCCL_DEBUG": "WARN"}},
            "tasks": [{"workload": "pretrain_nemotron4", "sizes": ["15b", "340B"],
                       "scales": [256, 128], "env": {"NCCL_DEBUG": "INFO"}},
                      {"workload": "pretrain_llama3.1", "size": "8b", "dtype": "BF16",
                       "scale": 8, "repeats": 1}]}
    expanded, errors = expand(data)
    assert errors == []
    assert [(t.size, t.dtype, t.scale, t.repeat) for t in expanded] == [
        ("15b", "fp8", 256, 1), ("15b", "fp8", 256, 2), ("15b", "fp8", 128, 1),
        ("15b", "fp8", 128, 2), ("340b", "fp8", 256, 1), ("340b", "fp8", 256, 2),
        ("340b", "fp8", 128, 1), ("340b", "fp8", 128, 2), ("8b", "bf16", 8, 1)]
    # the task's env over the defaults', key by key; values as launch.sh reads them
    assert expanded[0].env == {"MAX_STEPS": "20", "NCCL_DEBUG": "INFO"}
    assert expanded[-1].env == {"MAX_STEPS": "20", "NCCL_DEBUG": "WARN"}
    assert not any(t.profile for t in expanded)


def test_a_tasks_own_spelling_replaces_the_defaults_other_spelling() -> None:
    """defaults: {dtype: fp8} under a task with dtypes: [...] is no 'give dtype or dtypes, not
    both': the task's list wins, as the task's dtype would."""
    data = {"defaults": {"dtype": "fp8", "sizes": ["15b"], "scale": 128},
            "tasks": [{"workload": "pretrain_nemotron4", "dtypes": ["bf16", "fp8"],
                       "size": "340b", "scales": [256]},
                      {"workload": "pretrain_nemotron4"}]}
    expanded, errors = expand(data)
    assert errors == []
    assert [(t.size, t.dtype, t.scale) for t in expanded] == [
        ("340b", "bf16", 256), ("340b", "fp8", 256), ("15b", "fp8", 128)]
    _, errors = expand([{**NEMOTRON, "dtypes": ["bf16"]}])  # both in one task: still refused
    assert errors == ["sweep.yaml: task 1: give dtype or dtypes, not both"]


def test_a_bare_list_is_a_list_of_tasks_and_the_placement_goes_to_each() -> None:
    place = placement.build(exclude="node[3-4]", qos="high")
    expanded, errors = expand([NEMOTRON, {**NEMOTRON, "scale": 256}], place)
    assert errors == [] and len(expanded) == 2
    assert all(t.placement == place for t in expanded)
    assert expand([NEMOTRON])[0][0].placement == placement.Placement()


@pytest.mark.parametrize(("data", "message"), [
    (None, "sweep.yaml: no tasks (a list of tasks, or a mapping with 'tasks')"),
    ([], "sweep.yaml: no tasks"),
    ({"tasks": []}, "sweep.yaml: no tasks"),
    ({"tasks": NEMOTRON}, "sweep.yaml: no tasks"),
    ({"tasks": ["pretrain_nemotron4 340b"]}, "sweep.yaml: task 1: must be a mapping"),
    ([{**NEMOTRON, "sizes": ["15b"]}], "sweep.yaml: task 1: give size or sizes, not both"),
    ([{**NEMOTRON, "dtype": None}], "sweep.yaml: task 1: dtype (or dtypes) is required"),
    ([{**NEMOTRON, "dtype": ["fp8", ["bf16"]]}],
     "sweep.yaml: task 1: dtypes=['bf16'] is not a plain value"),
    ([{**NEMOTRON, "scale": "128"}],
     "sweep.yaml: task 1: scales must be integers (GPUs), got '128'"),
    ([{**NEMOTRON, "scale": True}], "sweep.yaml: task 1: scales must be integers (GPUs), got "
                                    "True"),
    ([{**NEMOTRON, "scale": 0}], "sweep.yaml: task 1: scale 0 must be a whole number of GPUs "
                                 "from 1 to 1048576"),
    ([{**NEMOTRON, "scale": 1 << 21}], "sweep.yaml: task 1: scale 2097152 must be a whole "
                                       "number of GPUs"),
    ([{**NEMOTRON, "repeats": True}], "sweep.yaml: task 1: repeats=True must be a whole number "
                                      "from 1 to 1000"),
    ([{**NEMOTRON, "repeats": 1001}], "sweep.yaml: task 1: repeats=1001 must be"),
    ([{k: v for k, v in NEMOTRON.items() if k != "workload"}],
     "sweep.yaml: task 1: workload is required"),
    ([{**NEMOTRON, "workload": ["pretrain_nemotron4"]}],
     "sweep.yaml: task 1: workload=['pretrain_nemotron4'] is not a name"),
    ([{**NEMOTRON, "env": ["NCCL_DEBUG=INFO"]}],
     "sweep.yaml: task 1: env must be a mapping of NAME: value"),
    ([{**NEMOTRON, "env": {"ENABLE_CHECKPOINT": "sometimes"}}],
     "sweep.yaml: task 1: env ENABLE_CHECKPOINT=sometimes is not a boolean"),
    ([{**NEMOTRON, "env": {"LLMB_QOS": "high"}}],
     "sweep.yaml: task 1: env LLMB_QOS=high: llmb-run sets LLMB_QOS itself"),
])
def test_a_structural_error_is_one_line_naming_file_and_task(data: Any, message: str) -> None:
    expanded, errors = expand(data)
    assert expanded == []
    assert len(errors) == 1 and errors[0].startswith(message), errors
    assert "\n" not in errors[0]


@pytest.mark.parametrize(("data", "errors"), [
    ({"task": [NEMOTRON]}, ["sweep.yaml: unknown top-level key(s) task; allowed: defaults, tasks",
                            "sweep.yaml: no tasks (a list of tasks, or a mapping with 'tasks')"]),
    ({"defaults": ["fp8"], "tasks": [NEMOTRON]}, ["sweep.yaml: defaults must be a mapping"]),
])
def test_a_top_level_error_is_reported_with_the_rest(data: Any, errors: list[str]) -> None:
    expanded, found = expand(data)
    assert found == errors
    assert len(expanded) == ("tasks" in data)  # the tasks are still read for their errors


def test_every_error_of_every_task_is_collected_and_the_good_tasks_kept() -> None:
    data = {"colour": "red", "defaults": {"dtype": "fp8"},
            "tasks": [NEMOTRON, {**NEMOTRON, "scale": "x"}, "oops",
                      {**NEMOTRON, "size": "15b", "scale": 16}, {**NEMOTRON, "repeats": 0}]}
    expanded, errors = expand(data)
    assert [(t.size, t.scale) for t in expanded] == [("340b", 128), ("15b", 16)]
    assert [e.split(":")[1].strip() for e in errors] == [
        "unknown top-level key(s) colour; allowed", "task 2", "task 3", "task 5"]


# --- --env ------------------------------------------------------------------------------------

@pytest.mark.parametrize(("items", "env"), [
    (["NCCL_DEBUG=INFO"], {"NCCL_DEBUG": "INFO"}),
    (["LOAD_CHECKPOINT_PATH=/ckpt/a=b"], {"LOAD_CHECKPOINT_PATH": "/ckpt/a=b"}),  # first '='
    (["NOTE="], {"NOTE": ""}),
    (["MAX_STEPS=10", "MAX_STEPS=20"], {"MAX_STEPS": "20"}),  # the last one given
    (["SMOKE_TEST=Yes", "ENABLE_NCCLTRACE=0"], {"SMOKE_TEST": "true",
                                                "ENABLE_NCCLTRACE": "false"}),
    ([], {}),
])
def test_env_overrides(items: list[str], env: dict[str, str]) -> None:
    assert tasks.parse_env_overrides(items) == env


@pytest.mark.parametrize(("items", "message"), [
    (["NCCL_DEBUG"], "--env NCCL_DEBUG is not NAME=VALUE"),
    (["=INFO"], "--env =INFO is not NAME=VALUE"),
    (["NCCL DEBUG=INFO"], "--env: NCCL DEBUG is not a variable name"),
    (["SMOKE_TEST=maybe"], "--env SMOKE_TEST=maybe is not a boolean; use true or false"),
    (["DTYPE=bf16"], "--env DTYPE=bf16: llmb-run sets DTYPE itself"),
    (["SBATCH_QOS=high"], "--env: SBATCH_QOS=high is set; sbatch would apply it"),
])
def test_a_bad_env_override_is_a_usage_error(items: list[str], message: str) -> None:
    with pytest.raises(UsageError) as err:
        tasks.parse_env_overrides(items)
    assert str(err.value).startswith(message) and err.value.status == 2


def test_smoke_of_reads_the_boolean_strictly() -> None:
    assert tasks.smoke_of({}) is False
    assert tasks.smoke_of({"SMOKE_TEST": "on"}) is True
    with pytest.raises(BadValue, match="SMOKE_TEST=perhaps is not a boolean"):
        tasks.smoke_of({"SMOKE_TEST": "perhaps"})


def test_a_tasks_label_is_one_printable_line() -> None:
    assert Task("pretrain_llama3.1", "8b", "fp8", 8, True, 2).label() == (
        "pretrain_llama3.1 8b fp8 x8 profile (repeat 2)")
    assert Task("x\ny", "8b", "fp8", 8).label() == "x\\ny 8b fp8 x8 (repeat 1)"


# --- checks against the recipe and the install ------------------------------------------------

def task(size: str = "340b", dtype: str = "fp8", scale: int = 128, **kw: Any) -> Task:
    return Task("pretrain_nemotron4", size, dtype, scale, **kw)


@pytest.mark.parametrize(("one", "error"), [
    (task("15b", scale=16), "--dtype fp8 is not published for pretrain_nemotron4 15b on gb200; "
                            "allowed: none"),
    (task(scale=64), "--scale 64 is below the smallest published scale 128; published: 128, "
                     "256, 512"),
    (task(scale=192), "--scale 192 is not a published scale; published: 128, 256, 512"),
    (task(scale=1022), "--scale 1022: 1022 GPUs is not a positive multiple of 4 GPUs per node"),
    (task(repeat=0), "repeats must be a positive integer"),
    # 128 GB200 GPUs are 32 nodes
    (task(placement=placement.build(segment=5)),
     "--segment=5 does not divide the job's 32 node(s); give a divisor of 32"),
    (task(placement=placement.build(nodelist="node[1-40]")),
     "--nodelist=node[1-40] names 40 nodes but the job runs on 32; name at most 32"),
    (Task("pretrain_nemotronh", "56b", "fp8", 64),
     "pretrain_nemotronh is not installed here (installed: pretrain_llama3.1, "
     "pretrain_nemotron4); rerun the installer with it"),
])
def test_a_task_the_install_cannot_run(gb200: clusterconfig.ClusterConfig, one: Task,
                                       error: str) -> None:
    errors, warnings, _ = tasks.check_task(gb200, one)
    assert errors == [f"{one.label()}: {error}"] and warnings == []


def test_above_the_largest_scale_is_a_warning_not_an_error(
        gb200: clusterconfig.ClusterConfig) -> None:
    errors, warnings, above = tasks.check_task(gb200, task(scale=1024))
    assert (errors, above) == ([], True)
    assert warnings == ["pretrain_nemotron4 340b fp8 x1024 (repeat 1): --scale 1024 is above "
                        "the largest published scale 512: an unvalidated configuration, no "
                        "reference applies"]
    fits = placement.build(segment=16, nodelist="node[1-256]")
    assert tasks.check_task(gb200, task(scale=1024, placement=fits))[0] == []


def test_the_gpu_type_of_the_install_decides(tmp_path: Path) -> None:
    h100 = installed(tmp_path / "h100", gpu_type="h100")
    assert tasks.check_task(h100, task("15b", scale=16)) == ([], [], False)
    # 2048 is published for H100, above the largest for GB200
    assert tasks.check_task(h100, task(scale=2048))[2] is False


def test_a_gpu_type_no_recipe_publishes_is_refused_saying_which_it_has(tmp_path: Path) -> None:
    """B300 is known to the analyzer and the screen (gpus.yaml) and to the Megatron-Bridge
    recipes, not to nemotron: a run of it on a B300 install is refused in one line, before
    anything is submitted."""
    b300 = installed(tmp_path / "b300", gpu_type="b300")
    errors, warnings, above = tasks.check_task(b300, task("15b", scale=16))
    assert errors == [f"{task('15b', scale=16).label()}: gpu_type b300 is not supported by "
                      "nemotron; allowed: h100, gb200, b200 (the GPU types it publishes rows "
                      "for); the analyzer (--gpu-type) and llmb-run screen also support h200"]
    assert (warnings, above) == ([], False)


def test_a_refusal_quotes_the_value_as_it_was_written(tmp_path: Path) -> None:
    """-s 99B and --dtype FP16 are matched in lower case, and quoted as written."""
    h100 = installed(tmp_path / "h100", gpu_type="h100")
    (size,), _ = tasks.tasks_from_bulk([{"workload": "pretrain_nemotron4", "size": "99B",
                                         "dtype": "fp8", "scale": 16}], "f")
    assert size.size == "99b"
    assert tasks.check_task(h100, size)[0] == [
        f"{size.label()}: -s 99B is not a size of pretrain_nemotron4; allowed: 15b, 340b"]
    (dtype,), _ = tasks.tasks_from_bulk([{"workload": "pretrain_nemotron4", "size": "15B",
                                          "dtype": "FP16", "scale": 16}], "f")
    assert tasks.check_task(h100, dtype)[0] == [
        f"{dtype.label()}: --dtype FP16 is not published for pretrain_nemotron4 15b on h100; "
        "allowed: bf16, fp8"]


def test_validate_all_reports_each_problem_once(gb200: clusterconfig.ClusterConfig) -> None:
    sweep = [task(scale=64), task(scale=64), task(scale=1024), task(), task(scale=2048)]
    errors, warnings, above = tasks.validate_all(gb200, sweep)
    assert errors == [f"{sweep[0].label()}: --scale 64 is below the smallest published scale "
                      "128; published: 128, 256, 512"]
    assert len(warnings) == 2 and above == {2, 4}


def test_a_bulk_tasks_env_is_checked_like_env_overrides() -> None:
    with pytest.raises(RunError, match=r"^t: env SMOKE_TEST=2 is not a boolean"):
        tasks.normalize_env("t: env", {"SMOKE_TEST": 2}.items())
    assert tasks.normalize_env("t: env", {"ENABLE_GPU_METRICS": True, "MAX_STEPS": 5}.items()) == {
        "ENABLE_GPU_METRICS": "true", "MAX_STEPS": "5"}


@pytest.mark.parametrize(("data", "runs"), [
    ({"tasks": [{**NEMOTRON, "sizes": [f"s{i}" for i in range(100)],
                 "dtypes": [f"d{i}" for i in range(100)], "scales": list(range(1, 101)),
                 "repeats": 10}]}, 10_000_000),
    ({"defaults": {"repeats": 1000}, "tasks": [NEMOTRON, {**NEMOTRON, "scales": [8, 16]}]},
     3000),
    ([{**NEMOTRON, "repeats": 1000}, NEMOTRON], 1001),
])
def test_a_sweep_is_counted_before_it_is_expanded(data: Any, runs: int) -> None:
    """100 sizes x 100 dtypes x 100 scales x 10 repeats expanded to ten million runs and 3 GB
    before anything was checked; the file is refused with its count, at once."""
    found, errors = tasks.tasks_from_bulk(data, "sweep.yaml")
    assert found == [] and len(errors) == 1
    assert errors[0].startswith(f"sweep.yaml asks for {runs} runs (task ")
    assert errors[0].endswith(f"a bulk file runs at most {tasks.MAX_BULK_RUNS}: split the "
                              "sweep into files of fewer runs")
