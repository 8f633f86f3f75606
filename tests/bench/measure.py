"""Time the analyzer against `grep -rc` and NVIDIA's own parser on every bench tree; check targets.

    python tests/bench/measure.py TREE [--repeat N]

The shapes (make_tree.py, make_shapes.py):
- TREE: 100 runs of NeMo/NCCL output plus a 1 GB NCCL-trace run that the analyzer skips unread
  on its manifest's word (grep reads it, and is slow on its content);
- TREE-notrace: the same runs alone (grep reads NeMo output at page-cache speed);
- megatron: 100 Megatron-Bridge runs, glued Step Time lines in half of them;
- noise: 120 complete NeMo runs with 2 MB of warning lines each;
- many: 20,000 complete 50-step Megatron-Bridge logs in one directory (the cost per log);
- empty: 100,000 empty logs in one directory.
- hostile: 10 NeMo runs whose logs hold corrupted lines of 100,000 characters each: its target
  is a time (HOSTILE_MAX_S), not grep's (grep reads a line in no time whatever it holds).
For each, grep, the analyzer (--format=json, the full analysis), on the trees of many small
logs the floor (python_floor.py: the least a Python reader does per log, on every core; not a
target, a yardstick for how near grep any Python reader comes on this machine) and, when
LLMB_BENCH_NVIDIA_PARSER names NVIDIA llmb-run's pretrain_log_parser.py (not in this
repository; tests/bench/nvidia_parser.py runs it, one process, as llmb-run would), that parser
run alternately N times, page cache warm; the MEDIAN wall times make the ratios (the machine may
be shared), the largest peak RSS (GNU time) is the memory; each command's CPU time (user +
system) is printed beside its wall time, to set a per-log cost beside grep's on one core. Then,
for the memory target "whatever the log sizes", the analyzer reads the 1 GB trace log in full as
an ordinary log. Prints every figure, a table, and PASS/FAIL per target: within MAX_RATIO x grep
on each shape, ahead of NVIDIA's parser on each, peak RSS under MAX_RSS_MB; exits 1 when a target
fails.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

from make_shapes import ensure
from make_tree import TRACE_NAME, notrace_of
from nvidia_parser import VARIABLE as NVIDIA_VARIABLE

REPO = Path(__file__).resolve().parents[2]
MAX_RATIO = 3.0  # analyzer wall time / grep wall time, each shape
MAX_RSS_MB = 150.0
HOSTILE = "corrupted lines"  # the hostile shape: what it must finish in, in s
HOSTILE_MAX_S = 20.0


# GNU time as the launcher: a child's peak RSS (ru_maxrss) also counts the image it was forked
# from, which for a child of this Python is 20 MB of Python, but for GNU time's is 1 MB.
GNU_TIME = shutil.which("time", path="/usr/bin:/bin")


class Run(NamedTuple):
    wall: float  # seconds
    rss: float  # peak MiB
    status: int
    cpu: float  # user + system seconds, of the command and every process it waited for


def run(cmd: list[str], env: dict[str, str] | None = None) -> Run:
    """One run of cmd.

    Output goes to a real file: GNU grep writing to /dev/null stops at the first match.
    """
    with tempfile.TemporaryFile() as out, tempfile.NamedTemporaryFile("r") as rss:
        launcher = [GNU_TIME, "-q", "-f", "%M", "-o", rss.name] if GNU_TIME else []
        start = time.perf_counter()
        proc = subprocess.Popen([*launcher, *cmd], stdout=out, stderr=subprocess.DEVNULL,
                                env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        peak_kb = float(rss.read().split()[-1]) if GNU_TIME else usage.ru_maxrss
    return Run(wall, peak_kb / 1024, os.waitstatus_to_exitcode(status),
               usage.ru_utime + usage.ru_stime)


def analyzer_cmd(tree: str) -> list[str]:
    return ["bash", str(REPO / "common" / "parse_train_timing.sh"), "--format=json", tree]


def size_mib(tree: str) -> float:
    return sum(f.stat().st_size for f in Path(tree).rglob("*.out")) / (1 << 20)


# (name, where the tree is, what grep counts, the framework llmb-run would name to its parser,
# whether its cost is per log: the floor is run there)
Shape = tuple[str, str, str, str, bool]
SHAPE_KEYS = ("trace", "notrace", "megatron", "noise", "many", "empty", "hostile")  # --shapes


def shapes(tree: str, only: list[str] | None = None) -> list[Shape]:
    base = Path(tree).parent
    nemo, bridge = "train_step_timing", "elapsed time per iteration"
    made = {
        "trace": lambda: ("with the NCCL trace", tree, nemo, "nemo2", False),
        "notrace": lambda: ("without the NCCL trace", str(notrace_of(Path(tree))), nemo,
                            "nemo2", False),
        "megatron": lambda: ("Megatron-Bridge", str(ensure(base, "megatron")), bridge,
                             "megatron_bridge", False),
        "noise": lambda: ("2 MB of noise per log", str(ensure(base, "noise")), nemo, "nemo2",
                          False),
        "many": lambda: ("20,000 logs", str(ensure(base, "many")), bridge, "megatron_bridge",
                         True),
        "empty": lambda: ("100,000 empty logs", str(ensure(base, "empty")), bridge,
                          "megatron_bridge", True),
        "hostile": lambda: (HOSTILE, str(ensure(base, "hostile")), nemo, "nemo2", False),
    }
    return [made[key]() for key in SHAPE_KEYS if not only or key in only]


FLOOR_OUT = os.path.join(tempfile.gettempdir(), f"llmb-bench-floor-{os.getpid()}.json")


def commands(shape: Shape, nvidia: str | None) -> dict[str, list[str]]:
    _, tree, needle, framework, per_log = shape
    cmds = {"grep": ["grep", "-rc", needle, tree], "llmb": analyzer_cmd(tree)}
    if per_log:
        cmds["floor"] = [sys.executable, str(REPO / "tests" / "bench" / "python_floor.py"),
                         tree, FLOOR_OUT]
    if nvidia:
        cmds["nvidia"] = [sys.executable, str(REPO / "tests" / "bench" / "nvidia_parser.py"),
                          framework, tree]
    return cmds


def measure(shape: Shape, repeat: int, env: dict[str, str], nvidia: str | None
            ) -> dict[str, float] | None:
    """Median wall times (and the analyzer's peak RSS) of each command over one tree."""
    cmds = commands(shape, nvidia)
    runs: dict[str, list[Run]] = {who: [] for who in cmds}
    try:
        for _ in range(repeat):
            for who, cmd in cmds.items():
                done = run(cmd, env)
                # (grep and the analyzer exit 1 for what they found; the others only succeed)
                if done.status not in (0, 1) or (who in ("nvidia", "floor") and done.status):
                    print(f"bench: {' '.join(cmd)} exited with {done.status}", file=sys.stderr)
                    return None
                runs[who].append(done)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(FLOOR_OUT)
    medians = {who: statistics.median(r.wall for r in done) for who, done in runs.items()}
    rss = max(r.rss for r in runs["llmb"])
    name, tree = shape[0], shape[1]
    mib = size_mib(tree)
    print(f"{name}: {tree} ({mib:.0f} MiB of .out files)")
    for who, label in (("grep", "grep -rc:"), ("llmb", "analyzer:"), ("floor", "floor:"),
                       ("nvidia", "NVIDIA:")):
        if who in runs:
            print(f"  {label:10s} median {medians[who]:7.3f} s (of "
                  f"{', '.join(f'{r.wall:.3f}' for r in runs[who])}); CPU (user + system) "
                  f"{statistics.median(r.cpu for r in runs[who]):.3f} s")
    print(f"  analyzer peak RSS {rss:6.1f} MiB; {medians['llmb'] / medians['grep']:.2f} x grep")
    return {**medians, "rss": rss}


def table(figures: dict[str, dict[str, float]]) -> None:
    print(f"{'shape':24s} {'llmb s':>8s} {'grep -rc s':>10s} {'NVIDIA s':>9s} "
          f"{'llmb/grep':>9s} {'llmb/NVIDIA':>11s} {'floor/grep':>10s}")
    for name, f in figures.items():
        nvidia, floor = f.get("nvidia"), f.get("floor")
        theirs = f"{nvidia:.3f}" if nvidia else "-"
        ratio = f"{f['llmb'] / nvidia:.2f}" if nvidia else "-"
        least = f"{floor / f['grep']:.2f}" if floor else "-"
        print(f"{name:24s} {f['llmb']:8.3f} {f['grep']:10.3f} {theirs:>9s} "
              f"{f['llmb'] / f['grep']:9.2f} {ratio:>11s} {least:>10s}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tree")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--shapes", help=f"comma-separated shapes to run, of {SHAPE_KEYS} "
                        "(default: all)")
    args = parser.parse_args()
    python = os.environ.get("LLMB_PYTHON") or sys.executable
    env = {**os.environ, "LLMB_PYTHON": python}
    nvidia = os.environ.get(NVIDIA_VARIABLE) or None
    if not GNU_TIME:
        print("(no /usr/bin/time: peak RSS includes the 20 MB of Python each child forks from)")
    print(f"({len(os.sched_getaffinity(0))} CPU(s) to run on: grep -rc uses one, the analyzer "
          f"and the floor every one; medians of {args.repeat} runs each)")
    if nvidia is None:
        print(f"SKIP: NVIDIA's parser: set {NVIDIA_VARIABLE} to llmb-run's "
              "pretrain_log_parser.py (NVIDIA/dgxc-benchmarking, cli/llmb-run; not in this "
              "repository) to compare with it")
    figures = {}
    for shape in shapes(args.tree, args.shapes.split(",") if args.shapes else None):
        found = measure(shape, args.repeat, env, nvidia)
        if found is None:
            return 1
        figures[shape[0]] = found
    table(figures)
    ok = True
    for name, f in figures.items():
        if name == HOSTILE:
            good = f["llmb"] <= HOSTILE_MAX_S
            ok &= good
            print(f"{'PASS' if good else 'FAIL'}: analyzer wall time within {HOSTILE_MAX_S:g} s "
                  f"on {name} ({f['llmb']:.3f} s)")
            continue
        good = f["llmb"] / f["grep"] <= MAX_RATIO
        ok &= good
        floor = (f"; the floor alone: {f['floor'] / f['grep']:.2f}x" if "floor" in f else "")
        print(f"{'PASS' if good else 'FAIL'}: analyzer wall time within {MAX_RATIO:g}x grep on "
              f"{name} ({f['llmb'] / f['grep']:.2f}x{floor})")
        if "nvidia" in f:
            ahead = f["llmb"] < f["nvidia"]
            ok &= ahead
            print(f"{'PASS' if ahead else 'FAIL'}: analyzer ahead of NVIDIA's parser on {name} "
                  f"({f['llmb']:.3f} s against {f['nvidia']:.3f} s)")
    big_wall, big_rss, big_size = read_trace_in_full(args.tree, env)
    print(f"big log:   {big_wall:7.3f} s   peak RSS {big_rss:6.1f} MiB   (the {big_size:.0f} MiB "
          "trace log read in full as an ordinary log)")
    worst = max([f["rss"] for f in figures.values()] + [big_rss])
    ok_rss = worst < MAX_RSS_MB
    each = ", ".join(f"{f['rss']:.1f} MiB {n}" for n, f in figures.items())
    print(f"{'PASS' if ok_rss else 'FAIL'}: analyzer peak RSS under {MAX_RSS_MB:g} MB "
          f"({each}, {big_rss:.1f} MiB on the {big_size:.0f} MiB log)")
    return 0 if ok and ok_rss else 1


def read_trace_in_full(tree: str, env: dict[str, str]) -> tuple[float, float, float]:
    """(wall, peak RSS MiB, size MiB) of the analyzer reading the trace log as a plain log."""
    [log] = Path(tree).glob(f"{TRACE_NAME}/*/*/log-*.out")
    with tempfile.TemporaryDirectory() as tmp:
        link = Path(tmp) / "big-run" / "log-big-run_1_0.out"
        link.parent.mkdir()
        link.symlink_to(log)
        done = run(analyzer_cmd(tmp), env)  # status 1: a 5-step run, not 50
        shutil.rmtree(link.parent)
    return done.wall, done.rss, log.stat().st_size / (1 << 20)


if __name__ == "__main__":
    sys.exit(main())
