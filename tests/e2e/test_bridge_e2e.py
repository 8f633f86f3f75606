"""A Megatron-Bridge recipe's smoke job end to end on the real test Slurm cluster (tests/slurm:
2 nodes x 8 GPUs), through the Exemplar suite and through launch.sh.

1. `llmb-run suite submit --set exemplar --smoke --scale 8`: the install is a GB300 one with
   pretrain_nemotron-h, the one workload of the set whose recipe publishes a scale this
   cluster holds on any GPU type the set lists (nemotron-h 56b fp8 on GB300: 8 to 512 GPUs; on
   H100 every workload of the set starts at 32 GPUs or more, and GB300 at 16 GPUs needs 4
   nodes). Its run writes its llmb_manifest.json (framework megatron-bridge) and every rank
   runs the smoke workload, whose log holds Megatron-Bridge's lines; `suite baseline --save`
   writes the suite's own figure, `suite report --baseline` judges the workload `pass` against
   it and `below` against a baseline 10x faster (its margin shown); `--check` exits 3 either
   way, since the set's other GB300 workloads are not planned here; `archive --suite` holds
   the verdict; parse_train_timing.sh reads the run's steps.
2. `JOB_TOTAL_GPUS=16 GPU_TYPE=h100 SMOKE_TEST=true ./launch.sh` from bridge/llama3.1: 16 tasks
   on 2 nodes, the log read by the analyzer.

What cannot exist here is doubled, as in test_slurm_e2e.py: the container (the pyxis SPANK
stub), the image file (a placeholder), a NUMA host (tests/e2e/bin/numactl).
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
from launchjobs import analyze, describe, job_log, wait_for
from llmb.recipes import catalog, images
from paths import E2E_BIN, REPO
from runinstall import llmb_run

pytestmark = pytest.mark.e2e

WORKLOAD = "pretrain_nemotron-h"
ENTRY = "pretrain_nemotron-h_56b"
IMAGE = "nvidia+nemo+26.06.01.sqsh"
WAIT_S = 300


@pytest.fixture(scope="module")
def site(tmp_path_factory, slurm_cluster) -> tuple[Path, dict[str, str]]:
    root = tmp_path_factory.mktemp("llmb-bridge")
    recipe = catalog.find_recipe(WORKLOAD)  # its image: nemo 26.04.01
    image = root / "images" / images.Image(recipe.image).file_name
    image.parent.mkdir()
    image.write_bytes(b"hsqs" + bytes(4092))
    runinstall.make_install(root, gpu_type="gb300", image=str(image), workloads=(WORKLOAD,),
                            account="testacct", env={"TIME_LIMIT": "00:10:00", "MAX_STEPS": "12"})
    env = runinstall.llmb_run_env(**slurm_cluster)
    env.update(PATH=f"{E2E_BIN}:{Path(sys.executable).parent}:{env.get('PATH', '/usr/bin:/bin')}")
    return root, env


def history(root: Path) -> list[dict]:
    path = root / "llmb_run_history.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def report(site, suite_id: str, baseline: Path) -> tuple[int, dict, str]:
    proc = llmb_run(site, "suite", "report", suite_id, "--baseline", str(baseline), "--check",
                    "--format=json")
    return proc.returncode, json.loads(proc.stdout), proc.stderr


def test_exemplar_smoke_suite_baseline_verdict_archive(site):
    root, env = site
    proc = llmb_run(site, "suite", "submit", "--set", "exemplar", "--scale", "8", "--smoke",
                    "--yes")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (suite_id,) = re.findall(r"^llmb-run: suite (\S+): recorded in ", proc.stdout, re.MULTILINE)
    assert "not planned: pretrain_qwen3_235b bf16" in proc.stdout
    (rec,) = [r for r in history(root) if r.get("suite") == suite_id and r["type"] == "submit"]
    run_dir = Path(rec["experiment_dir"])
    manifest = json.loads((run_dir / "llmb_manifest.json").read_text())
    assert (manifest["framework"], manifest["options"]["smoke_test"]) == ("megatron-bridge", True)
    assert manifest["bridge"]["compute_dtype"] == "fp8_cs"
    assert (manifest["num_gpus"], manifest["nodes"], manifest["gpu_type"]) == (8, 2, "gb300")

    waited = llmb_run(site, "suite", "status", suite_id, "--wait", "--timeout", str(WAIT_S),
                      timeout=WAIT_S + 60)
    assert waited.returncode == 0, waited.stdout + waited.stderr + describe(run_dir, rec["job_id"])
    text = job_log(run_dir, rec["job_id"]).read_text()
    assert "Step Time : " in text and "iteration       12/      12 |" in text  # ranks 0 and 7
    assert "Configuration Summary (Non-Default Values vs Megatron Core)" in text

    # the analyzer on the run directory: every rank's lines in the one log
    code, analysis = analyze(run_dir, env)
    assert code == 0, analysis
    (result,) = analysis["results"]
    assert result["status"] == "Success" and result["time_mean"] > 0, result
    assert (result["max_iteration"], result["final_iteration"]) == (11, 11), result

    own = root / "baseline.yaml"
    saved = llmb_run(site, "suite", "baseline", suite_id, "--save", str(own))
    assert saved.returncode == 0, saved.stdout + saved.stderr
    figure = yaml.safe_load(own.read_text())["baselines"]["gb300"][ENTRY]["fp8"]
    code, judged, err = report(site, suite_id, own)
    entries = {e["workload"]: e for e in judged["set_verdict"]["entries"]}
    assert (entries[ENTRY]["verdict"], entries[ENTRY]["step_time_s"]) == ("pass", figure), judged
    assert abs(entries[ENTRY]["margin_pct"]) < 1e-6
    # every other GB300 workload of the set is not planned here: the set cannot pass
    assert code == 3 and {e["verdict"] for w, e in entries.items() if w != ENTRY} == {
        "not_planned"}, err
    assert "a rehearsal at 8 GPUs, not the set's 512" in err

    faster = root / "baseline-10x.yaml"
    data = yaml.safe_load(own.read_text())
    data["baselines"]["gb300"][ENTRY]["fp8"] = figure / 10
    faster.write_text(yaml.safe_dump(data))
    code, judged, err = report(site, suite_id, faster)
    entries = {e["workload"]: e for e in judged["set_verdict"]["entries"]}
    assert code == 3 and entries[ENTRY]["verdict"] == "below"
    assert entries[ENTRY]["margin_pct"] == pytest.approx(-90.0)
    assert f"1 below (e.g. {ENTRY} fp8 at -90.0%)" in err

    out = root / "suite.tar.gz"
    packed = llmb_run(site, "archive", "--suite", suite_id, "--output", str(out))
    assert packed.returncode == 0, packed.stderr
    with tarfile.open(out) as tar:
        kept = json.load(tar.extractfile("llmb-archive/verdict.json"))  # type: ignore[arg-type]
    assert kept["suite"] == suite_id and kept["entries"] == judged["set_verdict"]["entries"]


def test_launch_sh_smoke_on_h100(install):
    """The plain launch: 16 tasks on 2 nodes, one log holding rank 0's and rank 15's lines."""
    images = Path(install["LLMB_INSTALL"]) / "images"
    (images / IMAGE).write_bytes(b"")
    env = {**install, "JOB_TOTAL_GPUS": "16", "GPU_TYPE": "h100", "MODEL_SIZE": "8b",
           "DTYPE": "fp8", "MAX_STEPS": "6"}
    proc = subprocess.run([str(REPO / "bridge" / "llama3.1" / "launch.sh")], env=env, cwd="/",
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    job_id = re.search(r"as job (\d+)", proc.stdout).group(1)  # type: ignore[union-attr]
    run_dir = Path(re.search(r"experiment directory: (\S+)", proc.stdout).group(1))  # type: ignore
    assert wait_for(job_id, install) == "COMPLETED", describe(run_dir, job_id)
    text = job_log(run_dir, job_id).read_text()
    assert text.count("Step Time : ") == 6 and "iteration        6/       6 |" in text
    manifest = json.loads((run_dir / "llmb_manifest.json").read_text())
    assert (manifest["framework"], manifest["num_gpus"]) == ("megatron-bridge", 16)
    code, analysis = analyze(run_dir, install)
    assert code == 0, analysis
    (result,) = analysis["results"]
    assert result["status"] == "Success" and result["max_iteration"] == 5, result
