"""llmb.llmbrun.suite.verdict and `suite report --baseline` / `suite baseline --save`: upstream's
rule (every workload x dtype above 95% of its baseline; exactly 95% is not above; a missing run,
plan or baseline entry is no pass and says so), the table, JSON and HTML it shows, the verdict
kept beside the suite's record, and a suite's own figures saved as a baseline that judges it
again. The runs are shaped like real ones (tests/helpers/fakeinstall.py) and analyzed by the
real analyzer; Slurm's job states come from test doubles (tests/helpers/slurmshims.py)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import fakeinstall
import pytest
import yaml
from llmb.llmbrun import clusterconfig
from llmb.llmbrun.errors import RunError
from llmb.llmbrun.suite import baseline, sets, verdict
from llmb.llmbrun.suite import plan as suiteplan
from llmb.llmbrun.suite import record as suites
from llmb.llmbrun.suite import report as suitereport
from llmb.llmbrun.suite.plan import Selection
from llmb.llmbrun.suite.sets import SetEntry, SetRecord
from slurmshims import Slurm

SOURCE = {"repository": "NVIDIA/exemplar-performance", "release": "v26.08.00",
          "path": "exemplar.yaml"}
LLAMA = "pretrain_llama3.1_70b"


def entry(workload: str, dtype: str, config: int | None, missing: str | None = None
          ) -> SetEntry:
    return SetEntry(workload=workload, dtype=dtype, recipe="pretrain_llama3.1", config=config,
                    missing=missing)


def set_record(entries: list[SetEntry], scale: int = 16) -> SetRecord:
    return SetRecord(name="exemplar", source=SOURCE, scale=512, planned_scale=scale,
                     gpu_type="h100", entries=entries)


@pytest.fixture
def site(tmp_path: Path, monkeypatch):
    """A suite as `submit --set exemplar --scale 16` records one: two configurations (here the
    repository's llama3.1 8b at 16 GPUs stands for the set's 70b) and the set's entries."""
    root = fakeinstall.make_install(tmp_path / "install")
    cfg = clusterconfig.find_config(str(root / "cluster_config.yaml"), {})
    configs = suiteplan.published(cfg, Selection(("pretrain_llama3.1",), ("bf16", "fp8"), 16,
                                                 16), {})
    assert [c.dtype for c in configs] == ["bf16", "fp8"]
    found = set_record([entry(LLAMA, "bf16", 0), entry(LLAMA, "fp8", 1)])
    made = suites.create(cfg, suites.plan_data("x", configs, suiteplan.order_runs(configs, 1),
                                               {"repeats": 1, "set": found}))
    slurm = Slurm(tmp_path / "slurm")
    monkeypatch.setenv("PATH", f"{slurm.dir}:{os.environ['PATH']}")
    return cfg, made, slurm


def ran(site, steps: dict[str, float]) -> None:
    """One done run per dtype (run 1 bf16, run 2 fp8) at this step time."""
    cfg, made, slurm = site
    squeue = {}
    for number, (dtype, step) in enumerate(steps.items(), 1):
        job = str(700 + number)
        run_dir = fakeinstall.make_run(cfg.install, job, dtype=dtype, scale=16,
                                       stamp=int(job), step_time=step)
        cfg.history.append(fakeinstall.submit_record(
            job, run_dir, dtype=dtype, scale=16, suite=made.id, suite_run=number))
        squeue[job] = ["COMPLETED", f"acct-acct.{run_dir.parent.name}", "node1", "None"]
    slurm.set(squeue=squeue)


def baseline_file(tmp_path: Path, figures: dict[str, float], scale: int = 16) -> str:
    path = tmp_path / "baseline.yaml"
    path.write_text(yaml.safe_dump({
        "schema": 1, "set": "exemplar", "figure": "step_time_s", "scale": scale,
        "source": "NVIDIA", "baselines": {"h100": {LLAMA: figures}}}))
    return str(path)


def base_of(tmp_path: Path, figures: dict[str, float]) -> baseline.Baseline:
    return baseline.load(baseline_file(tmp_path, figures), sets.load("exemplar"))


class Made:
    """A suite record's stand-in for judge(): its id and its set."""

    def __init__(self, found: SetRecord) -> None:
        self.id = "20261128-100000"
        self.data = {"set": found}


@pytest.mark.parametrize(("base_s", "verdict_of", "margin"), [
    (1.9, "below", -5.0),  # 1.9 / 2.0 = exactly 95%: not above
    (1.9002, "pass", -4.99),  # just above
    (1.8998, "below", -5.01),  # just below
    (2.062, "pass", 3.1),
    (1.88, "below", -6.0),
])
def test_the_95_percent_edge(tmp_path, base_s, verdict_of, margin):
    judged = verdict.judge(Made(set_record([entry(LLAMA, "fp8", 0)])), [2.0],
                           base_of(tmp_path, {"fp8": base_s}))
    (one,) = judged["entries"]
    assert (one["verdict"], round(one["margin_pct"], 2)) == (verdict_of, margin)
    assert judged["passed"] is (verdict_of == "pass")


def test_missing_runs_plans_and_baselines_are_no_pass_and_say_so(tmp_path):
    found = set_record([entry(LLAMA, "bf16", 0), entry(LLAMA, "fp8", 1),
                        entry("pretrain_qwen3_235b", "bf16", None, "not installed here"),
                        entry("pretrain_gpt_oss_120b", "bf16", 2)])
    judged = verdict.judge(Made(found), [2.0, None, 3.0],
                           base_of(tmp_path, {"bf16": 2.5, "fp8": 2.0}))
    assert [e["verdict"] for e in judged["entries"]] == ["pass", "no_run", "not_planned",
                                                        "no_baseline"]
    assert not judged["passed"]
    assert judged["problems"] == [
        "1 no_run (e.g. pretrain_llama3.1_70b fp8: no successful run)",
        "1 not_planned (e.g. pretrain_qwen3_235b bf16: not installed here)",
        f"1 no_baseline (e.g. pretrain_gpt_oss_120b bf16: {tmp_path}/baseline.yaml has no "
        "h100 figure for it)"]
    assert verdict.summary(judged).startswith("set verdict: failed: 1 no_run")
    assert verdict.summary(judged).endswith("(a rehearsal at 16 GPUs, not the set's 512: it "
                                            "accepts nothing)")
    assert not verdict.judge(Made(set_record([])), [], base_of(tmp_path, {}))["passed"]


def test_report_with_a_baseline_shows_figure_baseline_margin_and_one_verdict(
        site, tmp_path, capsys):
    cfg, made, _ = site
    ran(site, {"bf16": 10.0, "fp8": 8.0})
    path = baseline_file(tmp_path, {"bf16": 10.31, "fp8": 7.52})  # +3.1 % and -6.0 %
    rc = suitereport.cmd_report(cfg, None, True, "table", None, path)
    captured = capsys.readouterr()
    assert rc == 3
    lines = captured.out.splitlines()
    at = lines.index(next(ln for ln in lines if ln.startswith("set exemplar (v26.08.00)")))
    assert lines[at + 1].split() == list(verdict.TABLE)
    # the analyzer's median of the logged step times: within a few ms of the run's 10 s and 8 s
    assert re.fullmatch(rf"{LLAMA} +bf16 +16 +10\.00\d +10\.310 +\+3\.1% +pass", lines[at + 2])
    assert re.fullmatch(rf"{LLAMA} +fp8 +16 +8\.00\d +7\.520 +-6\.0% +below", lines[at + 3])
    assert captured.err.strip().endswith(
        "check failed: set verdict: failed: 1 below (e.g. pretrain_llama3.1_70b fp8 at -6.0%) "
        "(a rehearsal at 16 GPUs, not the set's 512: it accepts nothing)")
    kept = json.loads((made.path.parent / verdict.VERDICT_FILE).read_text())
    assert (kept["passed"], kept["baseline"]["path"], kept["suite"]) == (False, path, made.id)
    assert yaml.safe_load((made.path.parent / verdict.BASELINE_FILE).read_text())[
        "baselines"]["h100"][LLAMA] == {"bf16": 10.31, "fp8": 7.52}
    page = (cfg.tree.suite(made.id) / "report" / verdict.HTML_FILE).read_text()
    assert "<td>+3.1%</td><td>pass</td>" in page and "<td>-6.0%</td><td>below</td>" in page
    rc = suitereport.cmd_report(cfg, None, True, "json", None,
                                baseline_file(tmp_path, {"bf16": 10.31, "fp8": 8.1}))
    data = json.loads(capsys.readouterr().out)
    assert rc == 0 and data["check"] == {"passed": True, "problems": []}
    assert [round(e["margin_pct"], 1) for e in data["set_verdict"]["entries"]] == [3.1, 1.2]


def test_a_baseline_of_another_scale_or_a_suite_without_a_set_is_refused(site, tmp_path):
    cfg, made, _ = site
    with pytest.raises(RunError, match=r"holds figures at 512 GPUs; suite .* ran at 16: give a "
                       "baseline of that scale"):
        suitereport.cmd_report(cfg, None, True, "table", None,
                               baseline_file(tmp_path, {"fp8": 1.0}, scale=512))
    plain = suites.create(cfg, suites.plan_data("x", made.configs, made.runs, {"repeats": 1}))
    with pytest.raises(RunError, match=r"was not planned from a set; --baseline and suite "
                       "baseline apply to"):
        suitereport.cmd_report(cfg, plain.id, True, "table", None, baseline_file(tmp_path, {}))


def test_a_suites_own_figures_saved_as_a_baseline_judge_it_again(site, tmp_path, capsys):
    cfg, made, _ = site
    ran(site, {"bf16": 10.0})  # fp8 has no run: left out, said in one line
    target = tmp_path / "own.yaml"
    assert suitereport.cmd_baseline(cfg, None, str(target)) == 0
    captured = capsys.readouterr()
    assert "pretrain_llama3.1_70b fp8 has no figure (no successful run); left out" in \
        captured.err
    saved = yaml.safe_load(target.read_text())
    assert saved["baselines"] == {"h100": {LLAMA: {"bf16": pytest.approx(10.0, abs=0.01)}}}
    assert (saved["scale"], saved["suite"], saved["set"]) == (16, made.id, "exemplar")
    rc = suitereport.cmd_report(cfg, None, False, "json", None, str(target))
    entries = json.loads(capsys.readouterr().out)["set_verdict"]["entries"]
    assert rc == 0
    assert [(e["verdict"], e["margin_pct"]) for e in entries] == [("pass", 0.0),
                                                                 ("no_run", None)]
    with pytest.raises(RunError, match="exists; choose another name"):
        suitereport.cmd_baseline(cfg, None, str(target))
    with pytest.raises(RunError, match="--save is empty"):
        suitereport.cmd_baseline(cfg, None, " ")
