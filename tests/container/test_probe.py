"""llmb.container.probe: the screen's measurements, held to nccl-tests' definitions
(NVIDIA/nccl-tests v2.19.6: doc/PERFORMANCE.md, src/all_reduce.cu AllReduceGetBw, the table
src/util.cu prints), and the CPU path measured for real (gloo, two processes)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest
from llmb.container import probe
from paths import COMMON
from screenfiles import nccl_tests_rank, nccl_tests_row

# all_reduce_perf's output as nccl-tests v2.19.6 prints it (src/util.cu's formats, reproduced
# by tests/helpers/screenfiles.py): a header, a line per rank, a line per size, the footer.
NCCL_TESTS_OUTPUT = "\n".join([
    "# nThread 1 nGpus 1 minBytes 1048576 maxBytes 1073741824 step: 2(factor) warmup iters: 5 "
    "iters: 20 agg iters: 1 validation: 1 graph: 0",
    "#", "# Using devices",
    nccl_tests_rank(0, "gpu001", 0), nccl_tests_rank(1, "gpu001", 1),
    nccl_tests_rank(2, "gpu002", 0), nccl_tests_rank(3, "gpu002", 1),
    "#",
    "#                                                              out-of-place              "
    "         in-place",
    "#       size         count      type   redop    root     time   algbw   busbw  #wrong     "
    "time   algbw   busbw  #wrong",
    nccl_tests_row(1048576, (62.51, 16.77, 25.16, "0"), (61.90, 16.94, 25.41, "0")),
    nccl_tests_row(536870912, (8012.3, 67.01, 100.51, "0"), (7990.1, 67.19, 100.79, "N/A")),
    nccl_tests_row(1073741824, (16001.0, 67.10, 100.65, "0"), (15987.4, 67.16, 100.74, "0")),
    "# Out of bounds values : 0 OK", "# Avg bus bandwidth    : 75.5 ", "#",
    "# Collective test concluded: all_reduce_perf", ""])


@pytest.mark.parametrize(("ranks", "factor"), [(1, 0.0), (2, 1.0), (4, 1.5), (8, 1.75),
                                               (16, 1.875), (2048, 2 * 2047 / 2048)])
def test_bus_factor_is_nccl_tests_all_reduce_correction(ranks, factor):
    assert probe.bus_factor(ranks) == pytest.approx(factor)


def test_bandwidths_are_bytes_over_time_in_gb_per_s():
    # 1 GiB in 10 ms among 8 ranks: algbw = S/t, busbw = algbw * 2(n-1)/n
    algbw, busbw = probe.bandwidths(1 << 30, 0.010, 8)
    assert algbw == pytest.approx(107.3741824)
    assert busbw == pytest.approx(107.3741824 * 1.75)


def test_nccl_tests_table_in_place_columns():
    parsed = probe.parse_nccl_tests(NCCL_TESTS_OUTPUT)
    assert parsed["ranks"] == 4
    assert parsed["hosts"] == ["gpu001", "gpu002"]
    assert parsed["sizes"] == [
        {"bytes": 1048576, "time_us": 61.90, "algbw_gbps": 16.94, "busbw_gbps": 25.41},
        {"bytes": 536870912, "time_us": 7990.1, "algbw_gbps": 67.19, "busbw_gbps": 100.79},
        {"bytes": 1073741824, "time_us": 15987.4, "algbw_gbps": 67.16, "busbw_gbps": 100.74}]
    # nccl-tests' own figures obey its definitions: busbw = algbw * 2(n-1)/n with n = 4
    for row in parsed["sizes"]:
        assert row["busbw_gbps"] == pytest.approx(row["algbw_gbps"] * 1.5, rel=2e-3)


def test_nccl_tests_output_without_a_table():
    assert probe.parse_nccl_tests("all_reduce_perf: command not found\n") == {
        "ranks": 0, "hosts": [], "sizes": []}


def test_cpu_device_measures_matmul_and_memory():
    cpu = probe.Device("cpu")
    assert (cpu.kind, cpu.backend) == ("cpu", "gloo")
    assert probe.Device("cuda", 3).backend == "nccl"
    assert 0 < probe.matmul_tflops(cpu, "fp32", 64, 0.05) < 100
    assert 0 < probe.memory_gbps(cpu, 1 << 20, 0.05) < 10_000


def test_timed_window_runs_at_least_the_window():
    calls = []
    count, seconds = probe.timed_window(lambda: calls.append(1), probe.Device("cpu"), 0.05,
                                        warmup=3)
    assert seconds >= 0.05 and count == len(calls) - 3 > 0


def test_value_of_repeats_leaves_out_the_extremes_from_five_on():
    assert probe.value_of([5.0, 1.0, 3.0, 3.0, 3.0]) == 3.0
    assert probe.value_of([1.0, 2.0, 3.0, 6.0]) == 3.0


WINDOW = """
import json, os, sys, time
from llmb.container import probe
os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # every process on the same core
import torch
torch.set_num_threads(1)
a = torch.randn(64, 64)
cpu = probe.Device("cpu")
print("ready", flush=True)
sys.stdin.readline()  # every window starts together, after the imports
start, waited = time.perf_counter(), cpu.waited()
calls, seconds = probe.timed_window(lambda: a @ a, cpu, 1.0, warmup=0)
print(json.dumps({"seconds": seconds, "wall": time.perf_counter() - start,
                  "waited": cpu.waited() - waited}))
"""


def windows_together(count: int) -> list[dict[str, float]]:
    """`count` processes pinned to one core time a 1 s window each, all starting at once."""
    procs = [subprocess.Popen([sys.executable, "-c", WINDOW], env={"PYTHONPATH": str(COMMON)},
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
             for _ in range(count)]
    for p in procs:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    return [json.loads(p.communicate(timeout=120)[0]) for p in procs]


def test_timed_window_on_the_cpu_leaves_out_waiting_for_a_core():
    assert probe.Device("cuda", 0).waited() == 0.0  # asks the kernel only on the CPU
    cpu = probe.Device("cpu")
    assert 0.0 <= cpu.waited() <= cpu.waited()
    # Three busy processes on one core: each runs about a third of the wall time. What the
    # window counts is its own running time (a full second), not the wall time it took;
    # unless WAIT_LIMIT windows of wall time passed first (on a machine busy with more than
    # these three, as a test worker's is, a process's share of the core can fall below a
    # tenth): then it ends with what it ran.
    for run in windows_together(3):
        assert run["seconds"] >= 1.0 or run["wall"] >= probe.WAIT_LIMIT * 1.0
        assert run["waited"] > 0.5 * run["wall"]  # the sharing was real
        assert run["seconds"] == pytest.approx(run["wall"] - run["waited"], abs=0.05)


SWEEP = """
import datetime, json, sys, torch.distributed as dist
from llmb.container import probe
rank, port = int(sys.argv[1]), int(sys.argv[2])
store = dist.TCPStore("127.0.0.1", port, 2, is_master=rank == 0,
                      timeout=datetime.timedelta(seconds=60))
dist.init_process_group("gloo", store=store, rank=rank, world_size=2)
rows = probe.allreduce_sweep(probe.Device("cpu"), None, 2, [4096, 65536], 4, 1)
largest = rows[-1]
repeats, count = probe.allreduce_repeats(probe.Device("cpu"), None, 2, largest["bytes"],
                                         largest["time_us"] / 1e6, 0.05, 4, 3)
print(json.dumps({"rows": rows, "repeats": repeats, "count": count}))
dist.barrier()
dist.destroy_process_group()
"""


def test_allreduce_sweep_two_gloo_processes():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {"PYTHONPATH": str(COMMON)}
    procs = [subprocess.Popen([sys.executable, "-c", SWEEP, str(r), str(port)], env=env,
                              stdout=subprocess.PIPE, text=True) for r in (0, 1)]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    got = [json.loads(o) for o in outs]
    rows = [g["rows"] for g in got]
    assert rows[0] == rows[1]  # the time is the ranks' mean: both report the same
    # the repeats: the same count of all-reduces on both ranks, enough to fill the window
    assert got[0]["repeats"] == got[1]["repeats"] and len(got[0]["repeats"]) == 3
    assert got[0]["count"] >= max(4, 0.05 / (rows[0][-1]["time_us"] / 1e6)) - 1
    assert all(r > 0 for r in got[0]["repeats"])
    for row in rows[0]:
        assert row["busbw_gbps"] == pytest.approx(row["algbw_gbps"])  # n = 2: factor 1
        assert row["algbw_gbps"] == pytest.approx(row["bytes"] / 1e9 / (row["time_us"] / 1e6))
    assert [r["bytes"] for r in rows[0]] == [4096, 65536]
