"""llmb.llmbrun.suite.record: the record (ids, the newest, a damaged file), each run's state
from the
history, Slurm (test doubles of squeue/scontrol/sacct answering as Slurm 22.05 does) and the
real analyzer over run directories shaped like real ones, and which runs --max-jobs lets into
the queue. Real submissions: tests/e2e/test_suite_e2e.py."""

from __future__ import annotations

import json
import os
from pathlib import Path

import fakeinstall
import pytest
from llmb.launch import placement
from llmb.llmbrun import clusterconfig
from llmb.llmbrun.errors import RunError
from llmb.llmbrun.suite import plan as suiteplan
from llmb.llmbrun.suite import record as suites
from llmb.llmbrun.suite.plan import Selection
from llmb.shared.errors import UsageError
from slurmshims import Slurm


def make_suite(cfg, repeats: int = 2, max_jobs: int | None = None,
               place: dict | None = None) -> suites.Suite:
    """llama3.1 8b fp8 at 16 and 8 GPUs: runs 1, 2 (x16), 3, 4 (x8)."""
    configs = suiteplan.published(cfg, Selection(("pretrain_llama3.1",), ("fp8",), 8, 16), {})
    runs = suiteplan.order_runs(configs, repeats)
    return suites.create(cfg, suites.plan_data("x", configs, runs, {
        "repeats": repeats, "max_jobs": max_jobs, "smoke": False, "placement": place or {}}))


@pytest.fixture
def cfg(tmp_path: Path) -> clusterconfig.ClusterConfig:
    root = fakeinstall.make_install(tmp_path / "install")
    return clusterconfig.find_config(str(root / "cluster_config.yaml"), {})


def test_ids_the_newest_and_a_second_suite_in_the_same_second(cfg):
    first, second = make_suite(cfg), make_suite(cfg)
    assert suites.ID_RE.fullmatch(first.id)
    if first.id[:15] == second.id[:15]:
        assert second.id == f"{first.id}-2"
    assert suites.load(cfg, None).id == second.id
    assert suites.load(cfg, first.id).runs == first.runs
    assert oct(first.path.stat().st_mode & 0o777) == "0o600"
    for name in ("20250101-000000-10", "20250101-000000-2", "20250101-000000"):
        (cfg.tree.suites / name).mkdir()
        (cfg.tree.suites / name / "suite.json").write_text("{}")
    assert suites.suite_ids(cfg.tree)[:3] == ["20250101-000000", "20250101-000000-2",
                                              "20250101-000000-10"]


@pytest.mark.parametrize(("text", "message"), [
    ("latest", "suite id latest is not a suite id (the time it was submitted, like "
               "20250411-144845)"),
    ("../x", "suite id ../x is not a suite id"),
    ("20250411-144845\n", "suite id 20250411-144845\\n is not a suite id"),
])
def test_a_bad_id_is_one_line(text, message):
    with pytest.raises(UsageError) as info:
        suites.check_id(text)
    assert str(info.value).startswith(message) and "\n" not in str(info.value)


def test_a_missing_or_damaged_record_is_one_line(cfg):
    with pytest.raises(RunError, match=r"^no suite yet under .*; start one with llmb-run suite "
                       "submit$"):
        suites.load(cfg, None)
    made = make_suite(cfg)
    with pytest.raises(RunError, match=rf"^no suite 20990101-000000 in .* \(the newest: "
                       rf"{made.id}\)$"):
        suites.load(cfg, "20990101-000000")
    for damage in ("{", json.dumps({"schema": 1, "id": made.id}), "[]",
                   json.dumps({**json.loads(made.path.read_text()), "runs": [{"run": 1}]}),
                   json.dumps({**json.loads(made.path.read_text()),
                               "placement": {"exclude": "a b"}})):
        made.path.write_text(damage)
        with pytest.raises(RunError) as info:
            suites.load(cfg, made.id)
        assert str(info.value).startswith(f"suite record {made.path} cannot be used (")
        assert "\n" not in str(info.value)
    made.path.unlink()
    made.path.mkdir()
    with pytest.raises(RunError) as info:
        suites.load(cfg, made.id)
    assert str(info.value) == f"suite record {made.path} cannot be read (Is a directory)"


def world(cfg, suite_id: str, tmp_path: Path) -> tuple[Slurm, dict[str, dict]]:
    """Run 1 done (job 101), run 2 cancelled before it started (102), run 3 pending (103),
    run 4 held; the history holds their submissions."""
    root = cfg.install
    done = fakeinstall.make_run(root, "101", scale=16)
    recs = {
        "101": fakeinstall.submit_record("101", done, scale=16, suite=suite_id, suite_run=1),
        "102": fakeinstall.submit_record("102", done, scale=16, suite=suite_id, suite_run=2,
                                         repeat=2, experiment_dir=None),
        "103": fakeinstall.submit_record("103", done, scale=8, suite=suite_id, suite_run=3),
    }
    for rec in recs.values():
        cfg.history.append(rec)
    cfg.history.append(fakeinstall.submit_record("104", done, suite="another", suite_run=4))
    name = f"acct-acct.{done.parent.name}"
    slurm = Slurm(tmp_path / "slurm")
    slurm.set(squeue={"101": ["COMPLETED", name, "node1", "None"],
                      "102": ["CANCELLED", name, "", "None"],
                      "103": ["PENDING", name, "", "Resources"]})
    return slurm, recs


def test_each_run_state_and_what_max_jobs_lets_into_the_queue(cfg, tmp_path, monkeypatch):
    made = make_suite(cfg, max_jobs=2)
    slurm, _ = world(cfg, made.id, tmp_path)
    monkeypatch.setenv("PATH", f"{slurm.dir}:{os.environ['PATH']}")
    view = suites.slots(cfg, made)
    assert [(s.run.number, s.state, s.job_id) for s in view] == [
        (1, "done", "101"), (2, "failed", "102"), (3, "pending", "103"), (4, "held", None)]
    assert view[1].why == "CANCELLED, no training log" and view[2].why == "Resources"
    assert suites.summary(view) == "1 done, 1 pending, 1 held, 1 failed"
    # at most 2 in the queue, 1 there: one more; resume takes the failed run first (its order)
    now, later = suites.to_submit(made, view, resume=False)
    assert ([s.run.number for s in now], later) == ([4], 0)
    now, later = suites.to_submit(made, view, resume=True)
    assert ([s.run.number for s in now], later) == ([2], 1)
    assert suites.ended_jobs(view) == {"101": view[0].attempts[0]["experiment_dir"]}
    unlimited = suites.parse(made.id, made.path, {**made.data, "max_jobs": None})
    now, _ = suites.to_submit(unlimited, view, resume=True)
    assert [s.run.number for s in now] == [2, 4]
    light = suites.slots(cfg, made, analyze=False)  # no analyzer: ended is just ended
    assert [s.state for s in light] == ["ended", "ended", "pending", "held"]


def test_the_latest_attempt_of_a_run_is_what_counts(cfg, tmp_path, monkeypatch):
    made = make_suite(cfg)
    slurm, _recs = world(cfg, made.id, tmp_path)
    again = fakeinstall.make_run(cfg.install, "105", scale=16, stamp=7)
    cfg.history.append(fakeinstall.submit_record("105", again, scale=16, suite=made.id,
                                                 suite_run=2, rerun_of="102"))
    name = f"acct-acct.{again.parent.name}"
    slurm.set(squeue={"101": ["COMPLETED", name, "node1", "None"],
                      "102": ["CANCELLED", name, "", "None"],
                      "103": ["PENDING", name, "", "Resources"],
                      "105": ["COMPLETED", name, "node2", "None"]})
    monkeypatch.setenv("PATH", f"{slurm.dir}:{os.environ['PATH']}")
    view = suites.slots(cfg, made)
    assert [(s.state, s.job_id) for s in view[:2]] == [("done", "101"), ("done", "105")]
    assert [a["job_id"] for a in view[1].attempts] == ["102", "105"]
    assert set(suites.ended_jobs(view)) == {"101", "105"}  # 102 left no log


def test_resume_exclude_suspect_adds_to_the_recorded_placement(cfg):
    made = make_suite(cfg, place={"exclude": "node7", "qos": "high"})
    updated = suites.with_exclusion(made, ("node7", "node9"), Path("/s/screen.json"))
    assert updated.placement.record() == {"exclude": "node[7,9]", "qos": "high"}
    assert (updated.data["excluded_suspects"], updated.data["screen"]) == (
        ["node9"], "/s/screen.json")
    assert suites.load(cfg, made.id).placement.exclude == "node7"  # not saved yet
    saved = suites.save(made, updated.data)
    assert suites.load(cfg, made.id).placement == saved.placement
    assert suites.with_exclusion(saved, ("node9",), None) is saved
    pinned = make_suite(cfg, place={"nodelist": "node[1-2]"})
    with pytest.raises(RunError, match=rf"^suite {pinned.id}: suspect node node2 is in its "
                       r"--nodelist node\[1-2\]"):
        suites.with_exclusion(pinned, ("node2",), None)
    assert placement.build(exclude="node7").exclude == "node7"
