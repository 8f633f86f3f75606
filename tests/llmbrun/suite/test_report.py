"""llmb.llmbrun.suite.report: the real analyzer (through its command line) over exactly one
suite's runs, one verdict per configuration, and `--check`: 3 while a configuration is below
the reference, has no successful run or lacks repeats; 0 once every one passes. Slurm's job
states come from test doubles (tests/helpers/slurmshims.py); the runs are shaped like real ones
(tests/helpers/fakeinstall.py: step times at a chosen share of the published reference)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import fakeinstall
import pytest
from llmb.llmbrun import clusterconfig
from llmb.llmbrun.suite import plan as suiteplan
from llmb.llmbrun.suite import record as suites
from llmb.llmbrun.suite import report as suitereport
from llmb.llmbrun.suite.plan import Selection
from slurmshims import Slurm


@pytest.fixture
def site(tmp_path: Path, monkeypatch):
    root = fakeinstall.make_install(tmp_path / "install")
    cfg = clusterconfig.find_config(str(root / "cluster_config.yaml"), {})
    configs = suiteplan.published(cfg, Selection(("pretrain_llama3.1",), ("fp8",), 8, 16), {})
    made = suites.create(cfg, suites.plan_data("x", configs, suiteplan.order_runs(configs, 2),
                                               {"repeats": 2, "max_jobs": None, "smoke": False,
                                                "placement": {}}))
    slurm = Slurm(tmp_path / "slurm")
    monkeypatch.setenv("PATH", f"{slurm.dir}:{os.environ['PATH']}")
    return cfg, made, slurm


def ran(site, jobs: dict[str, tuple[int, int, str, float | None]]) -> None:
    """jobs: id -> (suite run, GPUs, Slurm state, step time or None for no log)."""
    cfg, made, slurm = site
    squeue = {}
    for job, (number, scale, state, step) in jobs.items():
        run_dir = fakeinstall.make_run(cfg.install, job, scale=scale, stamp=int(job),
                                       step_time=step) if step else None
        exp = run_dir.parent.name if run_dir else f"pretrain_llama3.1_x{scale}"
        cfg.history.append(fakeinstall.submit_record(
            job, run_dir or Path(f"/nowhere/{exp}/run"), scale=scale, suite=made.id,
            suite_run=number, experiment_dir=str(run_dir) if run_dir else None))
        squeue[job] = [state, f"acct-acct.{exp}", "node1", "None"]
    old = json.loads((slurm.dir / "world.json").read_text()).get("squeue", {})
    slurm.set(squeue={**old, **squeue})


# published fp8 step times of llama3.1 8b: 9.36 s at 16 GPUs, 9.33 s at 8 (seed 003)
AT_98 = {16: 9.36 / 0.98, 8: 9.33 / 0.98}


def report(site, capsys, check: bool = True) -> tuple[int, dict, str]:
    cfg, _made, _ = site
    rc = suitereport.cmd_report(cfg, None, check, "json", None)
    captured = capsys.readouterr()
    return rc, json.loads(captured.out), captured.err


def test_check_fails_until_every_configuration_has_its_repeats_then_passes(site, capsys):
    cfg, made, _ = site
    # run 1 (x16) done, run 2 (x16) cancelled before it started, runs 3-4 (x8) not submitted
    ran(site, {"201": (1, 16, "COMPLETED", AT_98[16]), "202": (2, 16, "CANCELLED", None)})
    rc, data, err = report(site, capsys)
    assert rc == 3
    rows = {c["scale"]: c for c in data["configurations"]}
    assert (rows[16]["successful_runs"], rows[16]["failed_runs"], rows[16]["verdict"],
            round(rows[16]["pct_of_reference"])) == (1, 1, "pass", 98)
    assert (rows[8]["successful_runs"], rows[8]["held_runs"], rows[8]["verdict"]) == (
        0, 2, "no_successful_run")
    assert rows[16]["config_key"] == "llama3.1/8b/fp8/h100/16gpu/weak/gbs256"
    assert err.splitlines()[-1] == (
        f"llmb-run: suite {made.id} check failed: 1 configuration(s) without a successful run "
        "(e.g. pretrain_llama3.1/8b/fp8/weak/8); 1 configuration(s) with fewer runs done than "
        "the suite's 2 repeats (e.g. pretrain_llama3.1/8b/fp8/weak/16: 1 done); failed runs: "
        "`llmb-run suite resume` submits them again")
    assert not data["check"]["passed"]
    # the cancelled run resumed and done, the others done: every configuration passes
    ran(site, {"203": (2, 16, "COMPLETED", AT_98[16]), "204": (3, 8, "COMPLETED", AT_98[8]),
               "205": (4, 8, "COMPLETED", AT_98[8])})
    rc, data, err = report(site, capsys)
    assert rc == 0, err
    assert [(c["scale"], c["successful_runs"], c["verdict"]) for c in data["configurations"]] \
        == [(16, 2, "pass"), (8, 2, "pass")]
    assert data["configurations"][0]["jobs"] == ["201", "202", "203"]
    assert data["check"] == {"passed": True, "problems": []}
    index = Path(data["report"])
    assert index == cfg.tree.suite(made.id) / "report" / "index.html" and index.is_file()
    assert data["summary"]["logs"] == 4  # exactly the suite's logs: 201, 203, 204, 205


def test_a_configuration_below_the_reference_fails_the_check(site, capsys):
    cfg, made, _ = site
    ran(site, {"301": (1, 16, "COMPLETED", AT_98[16]), "302": (2, 16, "COMPLETED", AT_98[16]),
               "303": (3, 8, "COMPLETED", 9.33 / 0.8), "304": (4, 8, "COMPLETED", 9.33 / 0.8)})
    rc, _data, err = report(site, capsys)
    assert rc == 3
    assert "1 configuration(s) below 95% of the reference (worst: pretrain_llama3.1/8b/fp8/" \
           "weak/8 at 80.0%)" in err
    rc = suitereport.cmd_report(cfg, made.id, False, "table", None)
    out = capsys.readouterr().out
    assert rc == 0  # without --check the verdicts are shown, the exit is 0
    assert tuple(out.splitlines()[1].split()) == suitereport.TABLE
    row = r"^pretrain_llama3.1 +8b +fp8 +weak +8 +2/2 +11.6\d\d +9.33 +80.0 +below$"
    assert re.search(row, out, re.MULTILINE), out
    assert out.splitlines()[-1].startswith("verdict: 1 configuration(s) below 95%")


def test_runs_of_other_suites_and_single_runs_are_not_in_the_verdict(site, capsys):
    cfg, _made, _ = site
    ran(site, {str(400 + n): (n, 16 if n < 3 else 8, "COMPLETED",
                              AT_98[16 if n < 3 else 8]) for n in (1, 2, 3, 4)})
    slow = fakeinstall.make_run(cfg.install, "499", scale=8, stamp=499, step_time=99.0)
    cfg.history.append(fakeinstall.submit_record("499", slow, scale=8, suite="20000101-000000",
                                                 suite_run=3))
    cfg.history.append(fakeinstall.submit_record("498", slow, scale=8))
    rc, data, _ = report(site, capsys)
    assert rc == 0 and data["summary"]["logs"] == 4
    assert "499" not in json.dumps(data["configurations"])
