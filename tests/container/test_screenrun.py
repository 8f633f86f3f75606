"""llmb.container.screenrun: who meets whom (the pairing rounds), what the tasks agree on, and
the per-task program run for real: four processes on the CPU (gloo), posing as two nodes of
two tasks each through the variables srun sets."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from itertools import chain
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from llmb.container import devices, screenrun
from paths import COMMON


def names(n: int) -> list[str]:
    return [f"n{i:03d}" for i in range(n)]


@given(st.integers(min_value=2, max_value=80), st.data())
def test_rounds_pair_disjoint_nodes_with_new_partners(n, data):
    rounds = data.draw(st.integers(min_value=1, max_value=screenrun.max_rounds(n)))
    schedule = screenrun.pair_rounds(names(n), rounds)
    assert len(schedule) == rounds
    met: set[frozenset[str]] = set()
    for pairs in schedule:
        nodes = list(chain.from_iterable(pairs))
        assert len(nodes) == len(set(nodes))  # disjoint
        assert len(pairs) == n // 2  # N/2 pairs a round (an odd count: one sits out)
        for pair in pairs:
            assert frozenset(pair) not in met  # never the same partner twice
            met.add(frozenset(pair))


@given(st.integers(min_value=3, max_value=200))
def test_default_rounds_give_every_node_two_partners(n):
    schedule = screenrun.pair_rounds(names(n), screenrun.default_rounds(n))
    partners = {node: set() for node in names(n)}
    for a, b in chain.from_iterable(schedule):
        partners[a].add(b)
        partners[b].add(a)
    assert min(len(p) for p in partners.values()) >= 2
    assert screenrun.default_rounds(n) == (2 if n % 2 == 0 else 3)  # fixed, whatever N is


@pytest.mark.parametrize(("n", "most", "default"), [(0, 0, 0), (1, 0, 0), (2, 1, 1),
                                                    (3, 3, 3), (4, 3, 2), (5, 5, 3)])
def test_round_counts_of_few_nodes(n, most, default):
    assert (screenrun.max_rounds(n), screenrun.default_rounds(n)) == (most, default)


def test_phases_of_four_nodes():
    phases = screenrun.phases(["a", "b", "c", "d"], 2)
    assert [(p.name, p.groups) for p in phases] == [
        ("nodes", (("a",), ("b",), ("c",), ("d",))),
        ("pairs-1", (("a", "d"), ("b", "c"))),
        ("pairs-2", (("a", "c"), ("d", "b"))),
        ("all", (("a", "b", "c", "d"),))]
    # two nodes: their pair is all of them; one node: no pairs
    assert [p.name for p in screenrun.phases(["a", "b"], 1)] == ["nodes", "pairs-1"]
    assert [p.name for p in screenrun.phases(["a"], 0)] == ["nodes"]


def test_task_from_srun_variables():
    task = screenrun.task_from_env({"SLURM_PROCID": "5", "SLURM_NTASKS": "8",
                                    "SLURM_LOCALID": "1", "SLURMD_NODENAME": "gpu7",
                                    "SLURM_JOB_ID": "42", "SLURM_STEP_ID": "0"})
    assert task == screenrun.Task(5, 8, 1, "gpu7", "42", "0", "0")
    with pytest.raises(screenrun.ScreenError, match="SLURM_NTASKS, SLURM_LOCALID not set: run "
                                                    "this under srun"):
        screenrun.task_from_env({"SLURM_PROCID": "0"})
    with pytest.raises(screenrun.ScreenError, match="must be whole numbers"):
        screenrun.task_from_env({"SLURM_PROCID": "x", "SLURM_NTASKS": "1",
                                 "SLURM_LOCALID": "0"})


@pytest.mark.parametrize(("content", "message"), [
    (None, "plan .* cannot be read"), ("{", "is not JSON"), ("[]", "lacks gpu/cpu settings"),
    ('{"gpu": {}, "cpu": {}}', "lacks gpu/cpu settings"),
    ({"phases": [{"name": "nodes", "groups": ["node1"]}]}, "the plan's phases are not a list"),
    ({"phases": {"nodes": []}}, "the plan's phases are not a list")])
def test_a_plan_that_cannot_be_used_is_one_line(tmp_path, content, message):
    path = tmp_path / "plan.json"
    if isinstance(content, dict):
        content = json.dumps({**PLAN, **content})
    if content is not None:
        path.write_text(content)
    with pytest.raises(screenrun.ScreenError, match=message) as err:
        screenrun.read_plan(path)
    assert "\n" not in str(err.value)


def test_layout_leaves_out_nodes_without_cuda_on_a_gpu_screen():
    everyone = [{"rank": r, "node": f"n{r // 2}", "cuda": r not in (2,)} for r in range(6)]
    layout = screenrun.Layout.of(everyone, force_cpu=False)
    assert (layout.mode, layout.nodes) == ("gpu", ["n0", "n2"])
    assert layout.unmeasured == {"n1": "no CUDA device visible to its task(s) 2"}
    assert layout.group_ranks(["n2", "n0"]) == [0, 1, 4, 5]
    # no CUDA anywhere, or --smoke: everyone on the CPU
    assert screenrun.Layout.of([{**e, "cuda": False} for e in everyone], False).mode == "cpu"
    smoke = screenrun.Layout.of(everyone, force_cpu=True)
    assert (smoke.mode, smoke.nodes, smoke.unmeasured) == ("cpu", ["n0", "n1", "n2"], {})


def test_nccl_tests_measure_only_where_every_measured_task_has_them():
    everyone = [{"rank": r, "node": f"n{r // 2}", "cuda": r != 4,
                 "nccl_tests": "/usr/bin/all_reduce_perf" if r != 5 else None}
                for r in range(6)]
    layout = screenrun.Layout.of(everyone, force_cpu=False)
    assert layout.nodes == ["n0", "n1"]  # n2 lacks CUDA on task 4: not measured
    assert layout.tool(everyone) == screenrun.NCCL_TESTS_TOOL  # n2's missing one does not count
    everyone[1]["nccl_tests"] = None
    assert layout.tool(everyone) == screenrun.TORCH_TOOL
    smoke = screenrun.Layout.of([{**e, "nccl_tests": "x"} for e in everyone], force_cpu=True)
    assert smoke.tool(everyone) == screenrun.TORCH_TOOL  # the CPU: torch.distributed (gloo)


def test_nccl_tests_used_only_when_built_with_mpi(tmp_path, monkeypatch):
    # a stand-in for the binary: what is looked at is whether it links libmpi
    binary = tmp_path / "all_reduce_perf"
    binary.write_bytes(b"\x7fELF...libnccl.so.2\0libcudart.so.12\0")
    binary.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert devices.nccl_tests_binary() is None
    binary.write_bytes(b"\x7fELF...libnccl.so.2\0libmpi.so.40\0")
    assert devices.nccl_tests_binary() == str(binary)
    monkeypatch.setenv("PATH", str(tmp_path / "none"))
    assert devices.nccl_tests_binary() is None


PLAN = {"schema": 1, "force_cpu": True, "rounds": None, "timeout_s": 120,
        "gpu": {"sizes": [1 << 20], "iters": 2, "warmup": 1, "window_s": 1, "matmul_n": 512,
                "memory_bytes": 1 << 20, "dtypes": ["bf16"]},
        "cpu": {"sizes": [4096, 65536], "iters": 3, "warmup": 1, "window_s": 0.1,
                "matmul_n": 32, "memory_bytes": 1 << 20, "dtypes": ["fp32"]}}


def run_tasks(folder: Path, count: int, per_node: int, plan: dict | None = None
              ) -> list[subprocess.CompletedProcess]:
    (folder / "plan.json").write_text(json.dumps(plan or PLAN))
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
    procs = []
    for rank in range(count):
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "llmb.container.screenrun", "--plan",
             str(folder / "plan.json")],
            env={**env, "PYTHONPATH": str(COMMON), "SLURM_PROCID": str(rank),
                 "SLURM_NTASKS": str(count), "SLURM_LOCALID": str(rank % per_node),
                 "SLURMD_NODENAME": f"node{rank // per_node + 1}", "SLURM_JOB_ID": "7"},
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    for p in procs:
        p.communicate(timeout=240)
    return procs


def test_four_tasks_on_two_nodes_measure_every_phase(tmp_path):
    procs = run_tasks(tmp_path, 4, 2)
    assert [p.returncode for p in procs] == [0, 0, 0, 0]
    ranks = [json.loads(p.read_text()) for p in sorted((tmp_path / "ranks").glob("*.json"))]
    assert [(r["rank"], r["node"], r["local_rank"]) for r in ranks] == [
        (0, "node1", 0), (1, "node1", 1), (2, "node2", 0), (3, "node2", 1)]
    assert all(r["errors"] == [] and r["figures"]["matmul_fp32_tflops"] > 0
               and r["figures"]["memory_gbps"] > 0 for r in ranks)
    run = ranks[0]["run"]
    assert (run["mode"], run["backend"], run["tool"]) == ("cpu", "gloo", "torch.distributed")
    assert (run["nodes"], run["rounds"], run["tasks"]) == (["node1", "node2"], 1, 4)
    assert [p["name"] for p in run["phases"]] == ["gpus", "nodes", "pairs-1"]
    assert all(p["wall_s"] > 0 for p in run["phases"])
    led = {(g["phase"], tuple(g["nodes"])): g for r in ranks for g in r["groups"]}
    assert set(led) == {("nodes", ("node1",)), ("nodes", ("node2",)),
                        ("pairs-1", ("node1", "node2"))}
    assert led[("pairs-1", ("node1", "node2"))]["ranks"] == 4
    assert [s["bytes"] for s in led[("nodes", ("node1",))]["sizes"]] == [4096, 65536]
    assert ranks[2]["groups"][0]["phase"] == "nodes"  # task 2 led node2's own all-reduce
    # the rendezvous was a file with task 0's address
    (rendezvous,) = (tmp_path / "rendezvous").iterdir()
    assert rendezvous.name == "7.0.r0" and len(rendezvous.read_text().split()) == 2


SERIAL = {**PLAN, "cpu": {**PLAN["cpu"], "window_s": 0.05, "repeats": 3,
                          "allreduce_repeats": 2, "allreduce_window_s": 0.02, "serial": True}}


def test_on_the_cpu_one_task_and_one_group_measure_at_a_time_in_repeats(tmp_path):
    procs = run_tasks(tmp_path, 4, 2, SERIAL)
    assert [p.returncode for p in procs] == [0, 0, 0, 0]
    ranks = [json.loads(p.read_text()) for p in sorted((tmp_path / "ranks").glob("*.json"))]
    for rank in ranks:
        assert {f: len(r) for f, r in rank["repeats"].items()} == {
            "matmul_fp32_tflops": 3, "memory_gbps": 3}
        assert rank["figures"]["memory_gbps"] == pytest.approx(
            sum(rank["repeats"]["memory_gbps"]) / 3)  # under 5 repeats: their mean
    groups = [g for r in ranks for g in r["groups"]]
    assert len(groups) == 3 and all(len(g["repeats"]) == 2 and g["repeat_iters"] >= 3
                                    for g in groups)
    # one task at a time: the phase lasts at least every task's windows end to end, its
    # warm-up pass (not recorded) and its three repeats of two figures
    gpus = next(p for p in ranks[0]["run"]["phases"] if p["name"] == "gpus")
    assert gpus["wall_s"] >= 4 * (1 + 3) * 2 * 0.05


def test_the_phases_a_plan_states_are_run_where_their_nodes_are(tmp_path):
    # the confirm pass's plan: its own phases; a group with a node this step does not run
    # on (node9) is left out, and a phase left empty with it
    stated = [{"name": "nodes", "groups": [["node2"]]},
              {"name": "pairs-1", "groups": [["node2", "node1"], ["node9", "node1"]]},
              {"name": "pairs-2", "groups": [["node9", "node2"]]}]
    procs = run_tasks(tmp_path, 4, 2, {**PLAN, "phases": stated})
    assert [p.returncode for p in procs] == [0, 0, 0, 0], [p.stderr for p in procs]
    ranks = [json.loads(p.read_text()) for p in sorted((tmp_path / "ranks").glob("*.json"))]
    run = ranks[0]["run"]
    assert run["schedule"] == [{"name": "nodes", "groups": [["node2"]]},
                               {"name": "pairs-1", "groups": [["node2", "node1"]]}]
    assert [p["name"] for p in run["phases"]] == ["gpus", "nodes", "pairs-1"]
    led = {(g["phase"], tuple(g["nodes"])) for r in ranks for g in r["groups"]}
    assert led == {("nodes", ("node2",)), ("pairs-1", ("node2", "node1"))}


def test_a_task_without_srun_says_so_in_one_line(tmp_path):
    (tmp_path / "plan.json").write_text(json.dumps(PLAN))
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
    proc = subprocess.run([sys.executable, "-m", "llmb.container.screenrun", "--plan",
                           str(tmp_path / "plan.json")], env={**env, "PYTHONPATH": str(COMMON)},
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        "llmb screen: SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID not set: run this under srun "
        "(llmb-run screen writes the job)"]
