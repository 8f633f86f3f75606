"""`llmb-run archive --suite ID` of a suite planned from a set (`suite submit --set exemplar`):
beside what every suite's archive holds (its runs' logs, job scripts and manifests, suite.json,
its history, the analysis, system.json), the set's verdict (verdict.json) and the baseline it
was judged against (baseline.yaml), redacted like every text, left out when a link, and the
archive verifies. The verdict is made by `suite report --baseline` over real-shaped runs
(tests/helpers/fakeinstall.py) with Slurm's states from a test double."""

from __future__ import annotations

import json
import os
import subprocess
import tarfile
from pathlib import Path

import fakeinstall
import pytest
import runinstall
import yaml
from llmb.llmbrun import clusterconfig
from llmb.llmbrun.archive.format import INDEX, ROOT
from llmb.llmbrun.suite import plan as suiteplan
from llmb.llmbrun.suite import record as suites
from llmb.llmbrun.suite import report as suitereport
from llmb.llmbrun.suite import verdict
from llmb.llmbrun.suite.sets import SetEntry, SetRecord
from slurmshims import Slurm

LLAMA = "pretrain_llama3.1_70b"


def llmb_run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return runinstall.run(args, cwd, timeout=300)


@pytest.fixture
def judged(tmp_path: Path, monkeypatch):
    """A set suite with one done run, judged against a baseline whose source names the HF
    token (a careless paste: the archive masks it)."""
    root = fakeinstall.make_install(tmp_path / "llmb")
    cfg = clusterconfig.find_config(str(root / "cluster_config.yaml"), {})
    configs = suiteplan.published(cfg, suiteplan.Selection(("pretrain_llama3.1",), ("fp8",),
                                                           16, 16), {})
    found = SetRecord(name="exemplar", source={"repository": "NVIDIA/exemplar-performance",
                                               "release": "v26.08.00", "path": "exemplar.yaml"},
                      scale=512, planned_scale=16, gpu_type="h100",
                      entries=[SetEntry(workload=LLAMA, dtype="fp8", recipe="pretrain_llama3.1",
                                        config=0, missing=None)])
    made = suites.create(cfg, suites.plan_data("x", configs, suiteplan.order_runs(configs, 1),
                                               {"repeats": 1, "set": found}))
    run_dir = fakeinstall.make_run(root, "801", scale=16, stamp=801, step_time=8.0)
    cfg.history.append(fakeinstall.submit_record("801", run_dir, scale=16, suite=made.id,
                                                 suite_run=1))
    slurm = Slurm(tmp_path / "slurm")
    slurm.set(squeue={"801": ["COMPLETED", f"acct-acct.{run_dir.parent.name}", "node1",
                              "None"]})
    monkeypatch.setenv("PATH", f"{slurm.dir}:{os.environ['PATH']}")
    base = tmp_path / "nvidia.yaml"
    base.write_text(yaml.safe_dump({
        "schema": 1, "set": "exemplar", "figure": "step_time_s", "scale": 16,
        "source": f"mail of 2026-11-02 (token {fakeinstall.HF_TOKEN})",
        "baselines": {"h100": {LLAMA: {"fp8": 8.1}}}}))
    assert suitereport.cmd_report(cfg, made.id, True, "json", None, str(base)) == 0
    return root, made


def unpack(path: Path, dest: Path) -> Path:
    with tarfile.open(path) as tar:
        tar.extractall(dest, filter="data")
    return dest / ROOT


def test_the_archive_holds_the_runs_the_verdict_and_its_baseline(judged, tmp_path):
    root, made = judged
    out = tmp_path / "exemplar.tar.gz"
    proc = llmb_run(["archive", "--suite", made.id, "--output", str(out)], root)
    assert proc.returncode == 0, proc.stderr
    assert "  set verdict: verdict.json, judged against baseline.yaml" in proc.stdout
    tree = unpack(out, tmp_path / "u")
    index = json.loads((tree / INDEX).read_text())
    assert {"suite.json", "verdict.json", "baseline.yaml", "system.json", "analysis.json",
            "history.jsonl"} <= set(index["files"])
    (run,) = index["runs"]
    assert run["manifest"] and run["logs"] and run["job_script"]
    kept = json.loads((tree / "verdict.json").read_text())
    assert (kept["suite"], kept["passed"], kept["set"]) == (made.id, True, "exemplar")
    assert [(e["workload"], e["verdict"]) for e in kept["entries"]] == [(LLAMA, "pass")]
    base = (tree / "baseline.yaml").read_text()
    assert yaml.safe_load(base)["baselines"] == {"h100": {LLAMA: {"fp8": 8.1}}}
    assert fakeinstall.HF_TOKEN not in base and fakeinstall.HF_TOKEN not in (
        tree / "verdict.json").read_text()
    check = llmb_run(["verify-archive", str(out)], tmp_path)
    assert check.returncode == 0, check.stdout + check.stderr


def test_a_verdict_that_is_a_link_is_left_out(judged, tmp_path):
    root, made = judged
    kept = made.path.parent / verdict.VERDICT_FILE
    elsewhere = tmp_path / "elsewhere.json"
    kept.rename(elsewhere)
    kept.symlink_to(elsewhere)
    out = tmp_path / "linked.tar.gz"
    proc = llmb_run(["archive", "--suite", made.id, "--output", str(out)], root)
    assert proc.returncode == 0, proc.stderr
    assert "the suite's verdict.json is left out" in proc.stderr
    index = json.loads((unpack(out, tmp_path / "u") / INDEX).read_text())
    assert "verdict.json" not in index["files"] and "baseline.yaml" in index["files"]
    assert index["left_out"]["links"]["files"] == 1
