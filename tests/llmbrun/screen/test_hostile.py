"""The screen's state held to its type on the way in and on the way out: a --baseline file,
the job's task files and what --save-baseline writes are refused in one line (after the job,
one that says where its raw results are kept), never a traceback; what screen writes, its own
readers (report, verify-archive, --exclude-suspect) take back and render."""

from __future__ import annotations

import errno
import json
import os
import random
from pathlib import Path
from typing import Any

import pytest
import screenfiles
from llmb.llmbrun import clusterconfig
from llmb.llmbrun.errors import RunError
from llmb.llmbrun.screen import baseline, job, render
from llmb.shared.errors import UsageError


def healthy_baseline(tmp_path: Path) -> dict[str, Any]:
    doc = screenfiles.screen_json(tmp_path, repeats=5)
    return json.loads(json.dumps(baseline.of_screen(doc)))


def refused(path: Path, *words: str) -> str:
    with pytest.raises(UsageError) as err:
        baseline.load(path)
    said = str(err.value)
    assert "\n" not in said and said.startswith(f"--baseline {path}")
    for word in words:
        assert word in said
    return said


@pytest.mark.parametrize("change", [
    lambda b: b.update(nodes=[1], kind="x"),
    lambda b: b["figures"]["memory_gbps"]["values"].update({"node1 GPU 0": [int("9" * 401),
                                                                           None]}),
    lambda b: b["figures"]["memory_gbps"]["values"].update({"node1 GPU 0": [1e308, None]}),
    lambda b: b["figures"]["memory_gbps"]["values"].update({"node1 GPU 0": [1.0]}),
    lambda b: b["figures"]["memory_gbps"].update(values=[1, 2]),
    lambda b: b.update(versions={"mode": [1]}),
    lambda b: b.update(params="fast"),
    lambda b: b.update(figures={"x" * 300: b["figures"]["memory_gbps"]}),
])
def test_a_baseline_not_of_its_type_is_refused_in_one_line(tmp_path, change):
    base = healthy_baseline(tmp_path)
    change(base)
    (tmp_path / "b.json").write_text(json.dumps(base))
    refused(tmp_path / "b.json", "--save-baseline wrote")


@pytest.mark.parametrize("value", [-3.0, 0, 0.0])
def test_a_figure_that_is_not_positive_is_refused_never_read_as_a_drop(tmp_path, value):
    base = healthy_baseline(tmp_path)
    base["figures"]["memory_gbps"]["values"]["node1 GPU 0"] = [value, None]
    (tmp_path / "b.json").write_text(json.dumps(base))
    said = refused(tmp_path / "b.json", "memory_gbps", "node1 GPU 0", "a positive figure")
    assert "below" not in said


def test_a_screen_json_as_baseline_not_of_its_type_is_refused(tmp_path):
    doc = screenfiles.screen_json(tmp_path)
    doc["nodes"] = [1]
    (tmp_path / "s.json").write_text(json.dumps(doc))
    refused(tmp_path / "s.json", "nodes[0] is 1")


def cfg_of(tmp_path: Path) -> clusterconfig.ClusterConfig:
    import runinstall

    root = runinstall.make_install(tmp_path / "llmb", gpu_type="gb200", gres=None,
                                   workloads=("pretrain_nemotron4",))
    return clusterconfig.find_config(str(root / "cluster_config.yaml"), {})


def test_the_installs_dangling_baseline_link_is_said_and_how_to_get_past_it(tmp_path):
    cfg = cfg_of(tmp_path)
    cfg.tree.screens.mkdir(parents=True, exist_ok=True)
    os.symlink(tmp_path / "gone.json", baseline.default_path(cfg.tree))
    with pytest.raises(UsageError) as err:
        job.chosen_baseline(cfg, None)
    said = str(err.value)
    assert said.startswith(f"the install's baseline {baseline.default_path(cfg.tree)} is a "
                           f"link to {tmp_path / 'gone.json'}, which does not exist")
    # not "run screen again": every screen would meet the same baseline
    assert "move it away" in said and "--baseline PATH" in said and "again" not in said


def test_the_installs_bad_baseline_says_what_to_do_instead_of_screening_again(tmp_path):
    cfg = cfg_of(tmp_path)
    cfg.tree.screens.mkdir(parents=True, exist_ok=True)
    baseline.default_path(cfg.tree).write_text("{")
    with pytest.raises(UsageError, match="is not JSON; move it away"):
        job.chosen_baseline(cfg, None)


def test_save_baseline_onto_a_directory_keeps_the_results_and_says_where(tmp_path):
    cfg = cfg_of(tmp_path)
    folder = cfg.tree.screens / "20260102-030405"
    doc = screenfiles.screen_json(cfg.tree.root, repeats=5)
    baseline.default_path(cfg.tree).mkdir()
    with pytest.raises(RunError) as err:
        job.keep(cfg, doc, folder)
    said = str(err.value)
    assert "\n" not in said and "--save-baseline: cannot write" in said
    assert f"raw results are kept in {folder}" in said
    assert (folder / "ranks").is_dir()


def test_a_node_the_run_names_that_no_task_reported_is_a_verdict(tmp_path):
    screenfiles.write_screen(tmp_path)
    rank0 = tmp_path / "ranks" / "rank-00000.json"
    data = json.loads(rank0.read_text())
    data["run"]["nodes"] = [*data["run"]["nodes"], "node9"]
    data["run"]["rounds"] = 0
    rank0.write_text(json.dumps(data))
    doc = job.results_of(tmp_path, screenfiles.H100_GPU, screenfiles.NODES, screenfiles.PER_NODE)
    assert doc is not None
    (ghost,) = [n for n in doc["nodes"] if n["node"] == "node9"]
    assert "none of its tasks reported" in ghost["error"]
    job.written(tmp_path, doc)


# --- what screen writes, its readers take back -------------------------------------------------

HOSTILE: list[Any] = [
    float("inf"), float("-inf"), float("nan"), int("9" * 401), 1e308, -1e308, True, None,
    "x" * 70_000, "\x1b[31m\n# heading\n![x](http://e/x.png)", [], {}, [[[[1]]]], 0, -5,
    "inf", "nan", [1e308] * 3, ["x" * 70_000] * 2]


def _poison(value: Any, rng: random.Random) -> Any:
    """value with one of its leaves (or itself) swapped for something hostile."""
    if isinstance(value, dict) and value and rng.random() < 0.8:
        key = rng.choice(sorted(value))
        return {**value, key: _poison(value[key], rng)}
    if isinstance(value, list) and value and rng.random() < 0.8:
        i = rng.randrange(len(value))
        return [*value[:i], _poison(value[i], rng), *value[i + 1:]]
    return rng.choice(HOSTILE)


TARGETS = ("figures", "repeats", "health", "errors", "device", "groups", "run")


def _hostile_screen(folder: Path, seed: int) -> None:
    """A screen's task files with hostile values where the tasks' own fields are (a foreign
    file altogether is skipped, as a task that wrote nothing)."""
    rng = random.Random(seed)
    screenfiles.write_screen(folder, repeats=3, mode=rng.choice(["cpu", "gpu"]))
    for path in sorted((folder / "ranks").glob("rank-*.json")):
        if rng.random() < 0.5:
            continue
        data = json.loads(path.read_text())
        data.setdefault("health", {"temperature.gpu": "40", "power.limit": "700",
                                   "clocks_throttle_reasons.active": "0x4"})
        data.setdefault("errors", ["x"])
        for _ in range(rng.randrange(1, 4)):
            key = rng.choice([k for k in TARGETS if k in data])
            data[key] = _poison(data[key], rng)
        path.write_text(json.dumps(data))


@pytest.mark.parametrize("seed", range(60))
def test_a_screen_of_hostile_task_files_is_refused_in_one_line_or_read_back_and_rendered(
        tmp_path, seed):
    folder = tmp_path / "screens" / "20260102-030405"
    _hostile_screen(folder, seed)
    try:
        doc = job.results_of(folder, screenfiles.H100_GPU, screenfiles.NODES, screenfiles.PER_NODE)
        if doc is None:
            return
        doc.update(stamp=folder.name, job_id="9", job_state="COMPLETED", output="o")
        job.written(folder, doc)
    except RunError as exc:
        assert "\n" not in str(exc) and f"kept in {folder}" in str(exc)
        return
    from llmb import layout

    found = render.load_newest(layout.Install(tmp_path))
    assert found is not None
    back = found[1]
    render.table(back)
    md = render.markdown_section(back, plot=False)
    render.html_section(back, None)
    render.plot_png(back)
    assert "\x1b" not in md


@pytest.mark.parametrize(("change", "field"), [
    (lambda d: d.update(baseline={"path": "b", "screen": None, "saved": None,
                                  "comparable": True, "why_not": None, "changed": [1, 2],
                                  "figures": []}), "baseline.changed[0]"),
    (lambda d: d["expectations"].update(x={"expected": 1.0, "tolerance": 0.1}),
     "expectations.x.floor"),
    (lambda d: d["nodes"][0]["gpus"][0]["figures"].update(memory_gbps=1e308),
     "nodes[0].gpus[0].figures.memory_gbps"),
    (lambda d: d["nodes"][0]["gpus"][0]["figures"].update(memory_gbps=-1e308),
     "nodes[0].gpus[0].figures.memory_gbps"),
])
def test_what_the_renderers_cannot_draw_does_not_pass_the_type_check(tmp_path, change, field):
    from llmb.llmbrun.screen import document
    from llmb.shared import records

    doc = screenfiles.screen_json(tmp_path)
    doc.setdefault("expectations", {})
    change(doc)
    with pytest.raises(records.BadRecord) as err:
        document.checked(json.loads(json.dumps(doc)))
    assert err.value.field == field


def test_figures_at_the_edge_of_their_range_render(tmp_path):
    from llmb.llmbrun.screen import document

    doc = screenfiles.screen_json(tmp_path)
    doc["nodes"][0]["gpus"][0]["figures"]["memory_gbps"] = document.MAX_FIGURE
    doc["nodes"][1]["gpus"][0]["figures"]["memory_gbps"] = -document.MAX_FIGURE
    back = document.checked(json.loads(json.dumps(doc)))
    render.table(back)
    assert render.plot_png(back).startswith(b"\x89PNG")


@pytest.mark.parametrize(("change", "said"), [
    (lambda d: d["nodes"][0]["gpus"][0]["figures"].update(memory_gbps=float("nan")),
     "the screen's results hold Out of range float values"),
    (lambda d: d.update(nodes=d["nodes"] * 4097), "nodes is a list of 16388 item(s), more "
                                                  "than the 16384 it can hold"),
    (lambda d: d["nodes"][0].update(error="x" * 70_000), "nodes[0].error is 'xxx"),
    (lambda d: d.update(extra=_deep(100)),
     "nested deeper than 64 levels"),
])
def test_what_its_readers_would_refuse_is_never_written(tmp_path, change, said):
    folder = tmp_path / "screens" / "20260102-030405"
    doc = screenfiles.screen_json(tmp_path)
    (folder / "screen.json").unlink()
    change(doc)
    with pytest.raises(RunError) as err:
        job.written(folder, doc)
    assert said in str(err.value) and "\n" not in str(err.value)
    assert f"raw results are kept in {folder}" in str(err.value)
    assert not (folder / "screen.json").exists()


def _deep(levels: int) -> list[Any]:
    out: list[Any] = []
    for _ in range(levels):
        out = [out]
    return out


@pytest.mark.parametrize("value", [-5, -0.5, float("inf"), int("9" * 401), 1e308, True, "7"])
def test_a_task_figure_that_is_no_figure_is_left_out_and_its_gpu_says_so(tmp_path, value):
    screenfiles.write_screen(tmp_path)
    rank1 = tmp_path / "ranks" / "rank-00001.json"
    data = json.loads(rank1.read_text())
    data["figures"]["memory_gbps"] = value
    rank1.write_text(json.dumps(data))
    doc = job.results_of(tmp_path, screenfiles.H100_GPU, screenfiles.NODES, screenfiles.PER_NODE)
    assert doc is not None
    node = doc["nodes"][0]
    if value == float("inf"):  # JSON's Infinity: the task's file is no record, not read
        assert node["error"] == "1 of its 2 tasks never reported"
    else:
        gpu = node["gpus"][1]
        assert "memory_gbps" not in gpu["figures"] and gpu["error"] == "no memory_gbps"
    job.written(tmp_path, doc)


def test_a_screen_whose_baseline_cannot_be_saved_is_still_written_and_shown(
        tmp_path, monkeypatch, capsys):
    """The job ran and was judged: --save-baseline failing afterwards keeps screen.json (what
    report and archive read) and prints the screen, then says why it was not kept."""
    from llmb.launch.placement import Placement
    from llmb.llmbrun import slurmjob
    from llmb.shared import slurmquery

    cfg = cfg_of(tmp_path)
    doc = screenfiles.screen_json(cfg.tree.root, repeats=5)
    folder = cfg.tree.screens / "20260102-030405"
    (folder / "screen.json").unlink()

    def full_disk(*_args: object) -> None:  # the file system fills as the baseline is written
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(baseline, "save", full_disk)
    monkeypatch.setattr(job, "submit", lambda *a: ("20260102-030405", folder, "77", "img"))
    monkeypatch.setattr(slurmjob, "wait", lambda *a, **k: slurmjob.Ended(
        slurmquery.JobInfo("77", "COMPLETED"), False))
    monkeypatch.setattr(job, "results_of", lambda *a: dict(doc))
    with pytest.raises(RunError, match=r"--save-baseline: cannot write .*No space left") as err:
        job.cmd_screen(cfg, 2, Placement(), True, None, "table", save_baseline=True)
    assert f"this screen is in {folder / 'screen.json'}" in str(err.value)
    kept = json.loads((folder / "screen.json").read_text())
    assert kept["job_id"] == "77" and "saved_baseline" not in kept
    assert capsys.readouterr().out.strip()  # the screen's table was printed
