"""The Megatron-Bridge recipes' smoke jobs end to end on the real test Slurm cluster
(tests/slurm: 2 nodes x 8 GPUs), through the Exemplar suite and through launch.sh.

1. `llmb-run suite submit --set exemplar --smoke --scale 8`: an H100 install with every
   Megatron-Bridge recipe runs the WHOLE H100 set, its 5 workload x dtype (GPT-OSS, Llama 3.1
   70B twice, Nemotron-H, Qwen3: dense, hybrid and MoE), at 8 GPUs: one H100 node, which no row
   publishes (a smoke suite runs it with the nearest published layout and one warning line a
   row), 12 steps each (the fewest that reach the analyzer's window, which begins at index 11).
   The GB300 set (14 runs) took over 10 minutes to submit beside the other e2e workers; every
   family's smoke model, DeepSeek's MTP included, is run by the unit tier. Each run writes its
   llmb_manifest.json (framework megatron-bridge) and every rank runs the smoke workload of its
   family (the MoE families' tiny MoE models: their iteration lines carry the router's losses);
   `suite baseline --save` writes the suite's own figures, `suite report --baseline --check`
   passes every workload against them (exit 0) and finds every one `below` against a baseline
   10x faster (exit 3, each margin -90%); `archive --suite` holds the verdict; the analyzer reads
   a run's steps.
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
from llmb.llmbrun.suite import sets
from llmb.recipes import catalog, images
from paths import E2E_BIN, REPO
from runinstall import llmb_run

pytestmark = pytest.mark.e2e

WORKLOADS = tuple(r.workload for r in catalog.all_recipes() if r.is_bridge)
H100 = [(w.name, dtype) for w in sets.load("exemplar").for_gpu("h100") for dtype in w.dtypes]
IMAGE = "nvidia+nemo+26.06.01.sqsh"
WAIT_S = 900


@pytest.fixture(scope="module")
def site(tmp_path_factory, slurm_cluster) -> tuple[Path, dict[str, str]]:
    root = tmp_path_factory.mktemp("llmb-bridge")
    (root / "images").mkdir()
    for recipe in catalog.all_recipes():  # a placeholder of each recipe's image
        if recipe.is_bridge:
            (root / "images" / images.Image(recipe.image).file_name).write_bytes(
                b"hsqs" + bytes(4092))
    image = root / "images" / IMAGE
    runinstall.make_install(root, gpu_type="h100", image=str(image), workloads=WORKLOADS,
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


def submitted(root: Path, suite_id: str) -> dict[tuple[str, str, str], dict]:
    """The suite's submissions by (workload, size, dtype), from llmb-run's history."""
    return {(r["workload"], r["size"], r["dtype"]): r for r in history(root)
            if r.get("suite") == suite_id and r["type"] == "submit"}


def check_qwen3_run(rec: dict, env: dict[str, str]) -> None:
    """A Qwen3 run: its manifest, the MoE field of its log, the analyzer's read."""
    run_dir = Path(rec["experiment_dir"])
    manifest = json.loads((run_dir / "llmb_manifest.json").read_text())
    assert (manifest["framework"], manifest["options"]["smoke_test"]) == ("megatron-bridge", True)
    assert (manifest["num_gpus"], manifest["nodes"], manifest["gpu_type"]) == (8, 1, "h100")
    assert manifest["family"] == "qwen3" and manifest["bridge"]["compute_dtype"] == "bf16"
    text = job_log(run_dir, rec["job_id"]).read_text()
    assert "Step Time : " in text and "iteration       12/      12 |" in text  # ranks 0 and 7
    assert "Configuration Summary (Non-Default Values vs Megatron Core)" in text
    (last,) = [line for line in text.splitlines() if "iteration       12/      12 |" in line]
    assert re.search(r"\| lm loss: \S+ \| load_balancing_loss: \S+ \| loss scale: ", last)
    code, analysis = analyze(run_dir, env)
    assert code == 0, analysis
    (result,) = analysis["results"]
    assert result["status"] == "Success" and result["time_mean"] > 0, result
    assert (result["max_iteration"], result["final_iteration"]) == (11, 11), result


def test_exemplar_smoke_suite_baseline_verdict_archive(site):
    root, env = site
    proc = llmb_run(site, "suite", "submit", "--set", "exemplar", "--scale", "8", "--smoke",
                    "--yes", timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (suite_id,) = re.findall(r"^llmb-run: suite (\S+): recorded in ", proc.stdout, re.MULTILINE)
    assert "on h100: 5 of 5 workload x dtype planned at 8 GPUs" in proc.stdout
    assert "not planned:" not in proc.stdout
    runs = submitted(root, suite_id)
    assert len(runs) == 5

    waited = llmb_run(site, "suite", "status", suite_id, "--wait", "--timeout", str(WAIT_S),
                      timeout=WAIT_S + 60)
    rec = runs[("pretrain_qwen3", "235b", "bf16")]
    assert waited.returncode == 0, waited.stdout + waited.stderr + describe(
        Path(rec["experiment_dir"]), rec["job_id"])
    status = llmb_run(site, "suite", "status", suite_id, "--format=json")
    assert json.loads(status.stdout)["totals"]["done"] == 5, status.stdout
    check_qwen3_run(rec, env)

    own = root / "baseline.yaml"
    saved = llmb_run(site, "suite", "baseline", suite_id, "--save", str(own))
    assert saved.returncode == 0, saved.stdout + saved.stderr
    figures = yaml.safe_load(own.read_text())["baselines"]["h100"]
    assert sorted((w, d) for w, by in figures.items() for d in by) == sorted(H100)
    code, judged, err = report(site, suite_id, own)
    entries = judged["set_verdict"]["entries"]
    assert code == 0 and judged["set_verdict"]["passed"], err
    assert sorted((e["workload"], e["dtype"]) for e in entries) == sorted(H100)
    for e in entries:
        assert e["verdict"] == "pass" and e["step_time_s"] == figures[e["workload"]][e["dtype"]]
        assert abs(e["margin_pct"]) < 1e-6, e
    assert "a rehearsal at 8 GPUs, not the set's 512" in err

    faster = root / "baseline-10x.yaml"
    data = yaml.safe_load(own.read_text())
    for by_dtype in data["baselines"]["h100"].values():
        for dtype in by_dtype:
            by_dtype[dtype] /= 10
    faster.write_text(yaml.safe_dump(data))
    code, judged, err = report(site, suite_id, faster)
    entries = judged["set_verdict"]["entries"]
    assert code == 3 and {e["verdict"] for e in entries} == {"below"}, err
    assert [e["margin_pct"] for e in entries] == pytest.approx([-90.0] * 5)
    first = entries[0]
    assert f"5 below (e.g. {first['workload']} {first['dtype']} at -90.0%)" in err

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
