"""`llmb-run suite` end to end on the real test Slurm cluster (tests/slurm: 2 nodes x 8 GPUs).

1. A dry run plans exactly the published configurations of the installed workloads up to
   --max-scale (read here from the recipes' metadata.yaml, not through llmb's catalog) and
   submits and records nothing; without --max-scale the largest scale is what sinfo says the
   partition offers (16 GPUs).
2. A smoke suite with --max-jobs 1: only its first (largest) run enters the queue; the test
   cancels that job with scancel (outside the product); `suite status --wait` releases the held
   run and waits for it; `suite report --check` exits 3 (a configuration has no successful
   run); `suite resume` submits exactly the cancelled run again; `suite report --check` exits 0
   and the HTML report is written; `archive --suite` packs that suite alone.

The install is written by hand (cluster_config.yaml as the installer writes it, the dev venv as
every workload's venv, a squashfs-headed placeholder where setup.sh would import the image).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import runinstall
import yaml
from paths import E2E_BIN, REPO
from runinstall import llmb_run
from screenfiles import LEAST

pytestmark = pytest.mark.e2e

WORKLOADS = ("pretrain_llama3.1", "pretrain_nemotron4", "pretrain_nemotronh")
WAIT_S = 600


@pytest.fixture(scope="module")
def site(tmp_path_factory, slurm_cluster) -> tuple[Path, dict[str, str]]:
    root = tmp_path_factory.mktemp("llmb-suite")
    image = root / "images" / "nvidia+nemo+25.04.01.sqsh"
    image.parent.mkdir()
    image.write_bytes(b"hsqs" + bytes(4092))
    runinstall.make_install(root, image=str(image), workloads=WORKLOADS, account="testacct",
                            env={"TIME_LIMIT": "00:10:00", "MAX_STEPS": "12"})
    env = runinstall.llmb_run_env(**slurm_cluster)
    env.update(PATH=f"{E2E_BIN}:{Path(sys.executable).parent}:{env.get('PATH', '/usr/bin:/bin')}")
    return root, env


def published_h100(max_scale: int) -> set[tuple[str, str, str, str, int]]:
    """What the recipes publish for h100 up to max_scale, from their metadata.yaml."""
    found = set()
    for meta in REPO.glob("*/metadata.yaml"):
        data = yaml.safe_load(meta.read_text())
        if data["workload"] not in WORKLOADS:
            continue
        for entry in data["configs"]:
            if "h100" in entry["gpu_types"]:
                found |= {(data["workload"], entry["size"], d, entry["scaling"], n)
                          for d in entry["dtypes"] for n in entry["scales"] if n <= max_scale}
    return found


def planned(stdout: str) -> list[tuple[str, str, str, str, int]]:
    rows = re.findall(r"^  (pretrain_\S+)\s+(\S+)\s+(\S+)\s+(weak|strong)\s+(\d+)\s+3\s",
                      stdout, re.MULTILINE)
    return [(w, s, d, sc, int(n)) for w, s, d, sc, n in rows]


def jobs_in_queue(site) -> set[str]:
    out = subprocess.run(["squeue", "-h", "-o", "%i"], env=site[1], capture_output=True,
                         text=True, timeout=30, check=True).stdout
    return set(out.split())


def history(root: Path) -> list[dict]:
    path = root / "llmb_run_history.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_dry_run_plans_exactly_the_published_configurations(site):
    root, _ = site
    before = jobs_in_queue(site)
    proc = llmb_run(site, "suite", "submit", "--max-scale", "128", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    plan = planned(proc.stdout)
    expected = published_h100(128)
    assert len(plan) == len(set(plan)) and set(plan) == expected
    assert f"{len(expected)} configuration(s) x 3 repeat(s) = {3 * len(expected)} run(s)" \
        in proc.stdout
    scales = [row[-1] for row in plan]
    assert scales == sorted(scales, reverse=True)  # largest first
    assert "dry run: nothing was submitted or recorded" in proc.stdout
    # the partition's size, asked of sinfo: 2 nodes x 8 GPUs
    default = llmb_run(site, "suite", "submit", "--dry-run")
    assert default.returncode == 0, default.stderr
    assert "(at most 16: partition batch: 2 node(s) x 8 h100 GPUs)" in default.stdout
    assert set(planned(default.stdout)) == published_h100(16)
    assert jobs_in_queue(site) == before
    assert not (root / "suites").exists() and history(root) == []


def suite_status(site, suite_id: str) -> dict:
    proc = llmb_run(site, "suite", "status", suite_id, "--format=json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_smoke_suite_cancelled_job_check_resume_check(site):
    root, env = site
    proc = llmb_run(site, "suite", "submit", "-w", "pretrain_llama3.1", "--dtype", "fp8",
                    "--max-scale", "16", "--repeats", "1", "--max-jobs", "1", "--smoke",
                    "--yes")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (suite_id,) = re.findall(r"^llmb-run: suite (\S+): recorded in ", proc.stdout, re.MULTILINE)
    assert "1 run(s) submitted, 1 held (at most 1 in the queue)" in proc.stdout
    (first,) = history(root)
    assert (first["suite"], first["suite_run"], first["scale"], first["smoke"]) == (
        suite_id, 1, 16, True)
    held = suite_status(site, suite_id)
    assert held["totals"]["held"] == 1 and held["totals"]["held"] + held["totals"]["pending"] \
        + held["totals"]["running"] + held["totals"]["done"] == 2

    # the 16-GPU job is cancelled from outside llmb
    subprocess.run(["scancel", first["job_id"]], env=env, check=True, timeout=30)
    waited = llmb_run(site, "suite", "status", suite_id, "--wait", "--timeout", str(WAIT_S),
                      timeout=WAIT_S + 60)
    assert waited.returncode == 0, waited.stdout + waited.stderr
    released = [r for r in history(root) if r["type"] == "submit"][1:]
    assert [(r["suite_run"], r["scale"]) for r in released] == [(2, 8)]
    state = suite_status(site, suite_id)
    by_scale = {c["scale"]: c for c in state["configurations"]}
    assert (by_scale[16]["failed"], by_scale[8]["done"]) == (1, 1), state
    assert by_scale[16]["runs"][0]["detail"].startswith("CANCELLED")

    check = llmb_run(site, "suite", "report", suite_id, "--check")
    assert check.returncode == 3, check.stdout + check.stderr
    assert "1 configuration(s) without a successful run (e.g. pretrain_llama3.1/8b/fp8/weak/16)" \
        in check.stderr

    resumed = llmb_run(site, "suite", "resume", suite_id)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    again = [r for r in history(root) if r["type"] == "submit"][2:]
    assert [(r["suite_run"], r["scale"], r["rerun_of"]) for r in again] == [
        (1, 16, first["job_id"])]
    waited = llmb_run(site, "suite", "status", suite_id, "--wait", "--timeout", str(WAIT_S),
                      timeout=WAIT_S + 60)
    assert waited.returncode == 0, waited.stderr
    assert len([r for r in history(root) if r["type"] == "submit"]) == 3  # nothing else ran

    passed = llmb_run(site, "suite", "report", suite_id, "--check", "--format=json")
    assert passed.returncode == 0, passed.stdout + passed.stderr
    report = json.loads(passed.stdout)
    assert report["check"]["passed"] and report["check"]["problems"] == []
    assert sorted((c["scale"], c["successful_runs"], c["verdict"])
                  for c in report["configurations"]) == [(8, 1, "no_reference"),
                                                         (16, 1, "no_reference")]
    html = Path(report["report"]).read_text()
    for gpus in (8, 16):  # the HTML report covers both configurations of the suite
        assert f"pretrain_llama3.1_8b_fp8_gpus{gpus}_" in html

    out = root / "suite.tar.gz"
    packed = llmb_run(site, "archive", "--suite", suite_id, "--output", str(out))
    assert packed.returncode == 0, packed.stderr
    with tarfile.open(out) as tar:
        index = json.load(tar.extractfile("llmb-archive/ARCHIVE.json"))  # type: ignore[arg-type]
        lines = tar.extractfile("llmb-archive/history.jsonl").read().decode()  # type: ignore
        assert "llmb-archive/suite.json" in tar.getnames()
    assert index["suite"] == suite_id
    kept = [json.loads(line) for line in lines.splitlines()]
    assert {r["job_id"] for r in kept if r["type"] == "submit"} == {
        r["job_id"] for r in history(root) if r["type"] == "submit"}


def test_exclude_suspect_leaves_out_what_the_newest_screen_named(site):
    """A screen.json (written here, as `llmb-run screen` would) names node1: the suite's job
    goes through the placement path: --exclude in suite.json, the history, the manifest and
    the job script, and Slurm runs it elsewhere."""
    root, env = site
    screen = root / "screens" / "20250101-000000"
    screen.mkdir(parents=True)
    (screen / "screen.json").write_text(json.dumps({**LEAST, "suspects": ["node1"]}))
    proc = llmb_run(site, "suite", "submit", "-w", "pretrain_llama3.1", "--dtype", "fp8",
                    "--max-scale", "8", "--repeats", "1", "--smoke", "--yes",
                    "--exclude-suspect")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (suite_id,) = re.findall(r"^llmb-run: suite (\S+): recorded in ", proc.stdout, re.MULTILINE)
    assert 'Placement: {"exclude": "node1"} (suspects of ' in proc.stdout
    record = json.loads((root / "suites" / suite_id / "suite.json").read_text())
    assert (record["placement"], record["excluded_suspects"]) == ({"exclude": "node1"},
                                                                  ["node1"])
    (rec,) = [r for r in history(root) if r.get("suite") == suite_id]
    assert rec["placement"] == {"exclude": "node1"}
    run_dir = Path(rec["experiment_dir"])
    assert json.loads((run_dir / "llmb_manifest.json").read_text())["placement"] == {
        "exclude": "node1"}
    (script,) = [p.read_text() for p in run_dir.glob("*_sbatch.sh")]
    assert "#SBATCH --exclude=node1" in script
    out = subprocess.run(["scontrol", "show", "job", rec["job_id"]], env=env,
                         capture_output=True, text=True, timeout=30, check=True).stdout
    assert "ExcNodeList=node1" in out
    subprocess.run(["scancel", rec["job_id"]], env=env, check=True, timeout=30)
