"""llmb-run screen end to end on a real 4-node test Slurm cluster (tests/slurm, a second
cluster beside the 2-node one: the conftest's slurm_cluster4), on the CPU path (--smoke: gloo,
small sizes, one task per GPU of a gb200 install, 4 per node, one task or group measuring at a
time, every figure in repeats):

1. a healthy cluster: every node and two pairing rounds are measured, nothing is named, exit 0;
2. node3 made twice as slow from outside the product, once the tasks have met: its task
   processes, found through their environment (SLURMD_NODENAME), paused half of every 0.2 s
   (tests/helpers/nodeslowdown.py), through both passes; the confirm pass measures node3
   again beside the three others and the screen names node3 alone and exits 3;
3. `single ... --exclude-suspect --dry-run` then leaves node3 out: `#SBATCH --exclude=node3`.

On an install of its own: node3 slowed during the first pass only (the slowdown ends when the
confirm plan appears in the screen's folder, watched from here): the confirm pass clears it,
nothing is named, exit 0, the table says it was seen once and cleared, and --save-baseline
keeps the screen as the cluster's baseline.

On an install of its own, on two of the nodes (a baseline needs no peers; half the tasks, half
the time): a healthy screen saved as the cluster's baseline (--save-baseline), then every node
made twice as slow (all paused together, in step): the peers see nothing, the baseline names
the cluster and no node (exit 3, no suspect).

And Ctrl-C while waiting cancels the job (it holds its nodes exclusively).
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import runinstall
from nodeslowdown import NodeSlowdown
from paths import E2E_BIN, REPO

pytestmark = [pytest.mark.e2e, pytest.mark.alone]

NODES = ["node1", "node2", "node3", "node4"]
SCREEN = ["screen", "--nodes", "4", "--smoke", "--format=json"]
TIMEOUT_S = 600


def make_site(tmp_path_factory, slurm_cluster4) -> tuple[Path, dict[str, str]]:
    root = tmp_path_factory.mktemp("llmb-screen") / "llmb"
    image = root / "images" / "nvidia+nemo+25.04.01.sqsh"
    image.parent.mkdir(parents=True)
    image.write_bytes(b"hsqs" + bytes(4092))  # the test cluster runs no container
    runinstall.make_install(root, gpu_type="gb200", gres=None, image=str(image),
                            workloads=("pretrain_nemotron4",), account="testacct")
    env = runinstall.llmb_run_env(**slurm_cluster4)
    # the tasks run on this host: `python` is this venv's (torch for the CPU path)
    env["PATH"] = f"{E2E_BIN}:{Path(sys.executable).parent}:{env.get('PATH', '/usr/bin:/bin')}"
    return root, env


@pytest.fixture(scope="module")
def site(tmp_path_factory, slurm_cluster4) -> tuple[Path, dict[str, str]]:
    return make_site(tmp_path_factory, slurm_cluster4)


def default_sigint() -> None:
    # a child started without job control would inherit SIGINT ignored
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def llmb_run(site, *args: str) -> subprocess.Popen[str]:
    root, env = site
    return subprocess.Popen(["bash", str(REPO / "installer" / "llmb-run"), *args], cwd=root,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL, preexec_fn=default_sigint)


def finish(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=TIMEOUT_S)
    return proc.returncode, out, err


def newest_screen(root: Path, before: set[Path]) -> Path | None:
    new = sorted(set((root / "screens").glob("*")) - before) if (root / "screens").is_dir() \
        else []
    return new[-1] if new else None


def wait_until_met(root: Path, proc: subprocess.Popen[str], before: set[Path],
                   tasks: int = 16) -> None:
    """Until every task of the newest screen has written its record (its imports, the
    meeting, are not what the slowdown is about)."""
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        folder = newest_screen(root, before)
        if folder is not None and len(list((folder / "ranks").glob("rank-*.json"))) == tasks:
            return
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the screen's tasks never met"
        time.sleep(0.5)


def test_screen_measures_then_names_a_node_slowed_from_outside(site):
    root, env = site
    # 1. healthy
    rc, out, err = finish(llmb_run(site, *SCREEN))
    assert rc == 0, out + err
    doc = json.loads(out)
    assert [n["node"] for n in doc["nodes"]] == NODES
    for node in doc["nodes"]:
        assert node["verdict"] == "pass", node
        assert len(node["gpus"]) == 4  # one task per GPU (gb200: 4 per node)
        assert all(g["figures"]["matmul_fp32_tflops"] > 0 and g["figures"]["memory_gbps"] > 0
                   for g in node["gpus"])
        assert node["allreduce"]["busbw_gbps"] > 0 and node["allreduce"]["ranks"] == 4
        partners = {p["with"] for p in node["pairs"]}
        assert len(partners) == len(node["pairs"]) >= 2  # two pairings, new partner each
    assert sorted({p["round"] for p in doc["pairs"]}) == [1, 2]
    assert all(p["busbw_gbps"] > 0 and p["ranks"] == 8 for p in doc["pairs"])
    assert doc["all_nodes"]["nodes"] == NODES and doc["all_nodes"]["busbw_gbps"] > 0
    assert [r["name"] for r in doc["rounds"]] == ["gpus", "nodes", "pairs-1", "pairs-2", "all"]
    assert (doc["mode"], doc["backend"], doc["measured_by"]) == (
        "cpu", "gloo", "torch.distributed")
    assert (doc["suspects"], doc["named"], doc["job_state"]) == ([], [], "COMPLETED")
    # two leaf switches (slurm_cluster4): partners under one leaf first, each node's leaf kept
    assert doc["topology"] == "Slurm's topology: 4 node(s) under 2 leaf switches"
    assert [n["leaf"] for n in doc["nodes"]] == ["leaf1", "leaf1", "leaf2", "leaf2"]
    assert sorted(p["nodes"] for p in doc["pairs"] if p["round"] == 1) == [
        ["node1", "node2"], ["node3", "node4"]]
    saved = root / "screens" / doc["stamp"] / "screen.json"
    assert json.loads(saved.read_text())["suspects"] == []

    # 2. node3 slowed from outside, once every task has met (its imports are not the point)
    before = set((root / "screens").glob("*"))
    proc = llmb_run(site, *SCREEN)
    wait_until_met(root, proc, before)
    with NodeSlowdown(env["SLURM_CONF"], "node3", "llmb-screen", stopped=0.1) as slow:
        rc, out, err = finish(proc)
    # node3's four tasks of each pass, and nothing else (the confirm plan's step runs on the
    # batch host, node1)
    assert len(slow.seen) == 8, slow.seen
    assert rc == 3, out + err
    doc = json.loads(out)
    assert doc["suspects"] == ["node3"], json.dumps(doc["named"], indent=1)
    assert {n["node"]: n["verdict"] for n in doc["nodes"]} == {
        "node1": "pass", "node2": "pass", "node3": "slow", "node4": "pass"}
    assert doc["named"] and all(n["name"].startswith("node3") for n in doc["named"])
    # named after the confirm pass measured it again, beside the three others
    assert doc["confirm"]["nodes"] == NODES and doc["confirm"]["error"] is None
    assert all(n["again"] is not None for n in doc["named"]), json.dumps(doc["named"])
    assert "suspects: node3" in err

    # 3. the next launch leaves it out
    rc, out, err = finish(llmb_run(site, "single", "-w", "pretrain_nemotron4", "-s", "340b",
                                   "--dtype", "fp8", "--scale", "128", "--dry-run",
                                   "--exclude-suspect"))
    assert rc == 0, err
    assert "#SBATCH --exclude=node3" in out
    assert f"--exclude-suspect: leaving out node3 (named by {root}/screens/" in err


def wait_for_confirm_plan(root: Path, proc: subprocess.Popen[str], before: set[Path]) -> Path:
    """Until the job's step between the passes has written the confirm plan: the screen's
    folder."""
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        folder = newest_screen(root, before)
        if folder is not None and (folder / "confirm" / "plan.json").exists():
            return folder
        assert proc.poll() is None, ("the job ended without a confirm plan",
                                     proc.communicate())
        assert time.monotonic() < deadline, "no confirm plan"
        time.sleep(0.1)


def test_a_node_slow_in_the_first_pass_only_is_cleared_and_kept_as_baseline(tmp_path_factory,
                                                                           slurm_cluster4):
    own = make_site(tmp_path_factory, slurm_cluster4)
    root, env = own
    before: set[Path] = set()
    proc = llmb_run(own, "screen", "--nodes", "4", "--smoke", "--save-baseline")
    wait_until_met(root, proc, before)
    with NodeSlowdown(env["SLURM_CONF"], "node3", "llmb-screen", stopped=0.1) as slow:
        folder = wait_for_confirm_plan(root, proc, before)  # the first pass is over
    rc, out, err = finish(proc)
    assert len(slow.seen) == 4, slow.seen  # node3's tasks of the first pass
    assert rc == 0, out + err
    doc = json.loads((folder / "screen.json").read_text())
    assert (doc["named"], doc["suspects"]) == ([], []), json.dumps(doc["named"], indent=1)
    assert {n["verdict"] for n in doc["nodes"]} == {"pass"}
    cleared = doc["confirm"]["cleared"]
    assert cleared and all(c["name"].startswith("node3") for c in cleared), cleared
    assert doc["confirm"]["nodes"] == NODES and doc["confirm"]["peers"] == [
        "node1", "node2", "node4"]
    assert "seen once, not named:" in out.splitlines()
    assert "[seen once, cleared by the confirm pass]" in out
    assert f"saved as the cluster's baseline: {root}/screens/baseline.json" in err
    assert "cleared by the confirm pass" in err
    kept = json.loads((root / "screens" / "baseline.json").read_text())
    assert kept["screen"] == doc["stamp"]
    # what was seen once is not kept: its figure was the disturbance's, not the node's
    for entry in cleared:
        if entry["kind"] == "gpu":
            assert entry["name"] not in kept["figures"][entry["figure"]]["values"], entry


def test_a_cluster_slow_all_over_is_named_against_its_baseline(tmp_path_factory,
                                                                slurm_cluster4):
    own = make_site(tmp_path_factory, slurm_cluster4)
    root, env = own
    two = ["screen", "--nodelist", "node1,node2", "--smoke", "--format=json"]
    rc, out, err = finish(llmb_run(own, *two, "--save-baseline"))
    assert rc == 0, out + err
    assert f"saved as the cluster's baseline: {root}/screens/baseline.json" in err
    kept = json.loads((root / "screens" / "baseline.json").read_text())
    assert kept["screen"] == json.loads(out)["stamp"]

    before = set((root / "screens").glob("*"))
    proc = llmb_run(own, *two)
    wait_until_met(root, proc, before, tasks=8)
    with NodeSlowdown(env["SLURM_CONF"], NODES[:2], "llmb-screen", stopped=0.1) as slow:
        rc, out, err = finish(proc)
    # the first pass's eight tasks, and the step that judges it on node1 where a rescan
    # (every second) caught it; the peers see nothing, so there is no confirm pass
    assert len(slow.seen) in (8, 9), slow.seen
    assert rc == 3, out + err
    doc = json.loads(out)
    assert "confirm" not in doc
    assert doc["baseline"]["comparable"] and doc["baseline"]["screen"] == kept["screen"]
    assert doc["named"] and {n["kind"] for n in doc["named"]} == {"cluster"}, \
        json.dumps(doc["named"], indent=1)
    assert doc["suspects"] == [] and {n["verdict"] for n in doc["nodes"]} == {"pass"}
    assert "suspects: none" in err


def test_ctrl_c_cancels_the_screen_job(site):
    _, env = site
    proc = llmb_run(site, *SCREEN)
    assert proc.stderr is not None
    job = None
    for line in proc.stderr:  # "llmb-run: screen job N: 4 node(s), ..."
        if found := re.match(r"llmb-run: screen job (\d+): 4 node", line):
            job = found.group(1)
            break
    assert job is not None, proc.communicate()
    proc.send_signal(signal.SIGINT)
    rc, _, err = finish(proc)
    assert rc == 130, err
    assert f"llmb-run: screen job {job} cancelled" in err
    state = subprocess.run(["squeue", "-h", "-t", "all", "-j", job, "-o", "%T"], env=env,
                           capture_output=True, text=True, timeout=30).stdout.strip()
    assert state in ("CANCELLED", "COMPLETING"), state
