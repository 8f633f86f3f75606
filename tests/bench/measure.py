"""Time the analyzer against `grep -rc train_step_timing` over both bench trees; check targets.

    python tests/bench/measure.py TREE [--repeat N]

Two shapes (make_tree.py): TREE, 100 runs of NeMo/NCCL output plus a 1 GB NCCL-trace run that
the analyzer skips unread on its manifest's word (grep reads it, and is slow on its content),
and TREE-notrace, the same runs alone (grep reads NeMo output at page-cache speed: the shape
that holds the analyzer to the target). For each, grep and the analyzer (--format=json, the
full analysis) run alternately N times, page cache warm; the MEDIAN wall times make the ratio
(the machine may be shared), the largest peak RSS (GNU time) is the memory. Then, for the
memory target "whatever the log sizes", the analyzer reads the 1 GB trace log in full as an
ordinary log. Prints every figure and PASS/FAIL per target; exits 1 when a target fails.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from make_tree import TRACE_NAME, notrace_of

REPO = Path(__file__).resolve().parents[2]
MAX_RATIO = 3.0  # analyzer wall time / grep wall time, each shape
MAX_RSS_MB = 150.0


# GNU time as the launcher: a child's peak RSS (ru_maxrss) also counts the image it was forked
# from, which for a child of this Python is 20 MB of Python, but for GNU time's is 1 MB.
GNU_TIME = shutil.which("time", path="/usr/bin:/bin")


def run(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, float, int]:
    """(wall seconds, peak RSS MiB, exit status) of one run.

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
    return wall, peak_kb / 1024, os.waitstatus_to_exitcode(status)


def analyzer_cmd(tree: str) -> list[str]:
    return ["bash", str(REPO / "common" / "parse_train_timing.sh"), "--format=json", tree]


def size_mib(tree: str) -> float:
    return sum(f.stat().st_size for f in Path(tree).rglob("*.out")) / (1 << 20)


def shape(name: str, tree: str, repeat: int, env: dict[str, str]) -> dict[str, float] | None:
    """Median wall times and peak RSS of grep and the analyzer over one tree."""
    walls: dict[str, list[float]] = {"grep": [], "analyzer": []}
    rss = {"grep": 0.0, "analyzer": 0.0}
    for _ in range(repeat):
        for who, cmd in (("grep", ["grep", "-rc", "train_step_timing", tree]),
                         ("analyzer", analyzer_cmd(tree))):
            wall, peak, status = run(cmd, env)
            if status not in (0, 1) or (who == "analyzer" and status != 0):
                print(f"bench: {' '.join(cmd)} exited with {status}", file=sys.stderr)
                return None
            walls[who].append(wall)
            rss[who] = max(rss[who], peak)
    g, a = statistics.median(walls["grep"]), statistics.median(walls["analyzer"])
    mib = size_mib(tree)
    print(f"{name}: {tree} ({mib:.0f} MiB of .out files)")
    print(f"  grep -rc:  median {g:7.3f} s (of {', '.join(f'{w:.3f}' for w in walls['grep'])})"
          f"   {mib / g:6.0f} MiB/s   peak RSS {rss['grep']:6.1f} MiB")
    print(f"  analyzer:  median {a:7.3f} s (of {', '.join(f'{w:.3f}' for w in walls['analyzer'])})"
          f"   peak RSS {rss['analyzer']:6.1f} MiB")
    print(f"  ratio:     {a / g:7.2f} x grep")
    return {"grep": g, "analyzer": a, "ratio": a / g, "rss": rss["analyzer"],
            "grep_mib_s": mib / g}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tree")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    python = os.environ.get("LLMB_PYTHON") or sys.executable
    env = {**os.environ, "LLMB_PYTHON": python}
    if not GNU_TIME:
        print("(no /usr/bin/time: peak RSS includes the 20 MB of Python each child forks from)")
    print(f"({os.cpu_count()} CPU(s); medians of {args.repeat} runs each)")
    shapes = {"with the NCCL trace": args.tree, "without the NCCL trace": str(
        notrace_of(Path(args.tree)))}
    figures = {}
    for name, tree in shapes.items():
        found = shape(name, tree, args.repeat, env)
        if found is None:
            return 1
        figures[name] = found
    fast = min(figures, key=lambda n: figures[n]["grep"])
    slow = max(figures, key=lambda n: figures[n]["grep"])
    print(f"grep is fast on the tree {fast} ({figures[fast]['grep']:.3f} s, against "
          f"{figures[slow]['grep']:.3f} s {slow}: the analyzer skips the trace unread, grep reads "
          "it): that shape is the one that holds the analyzer to the target")
    big_wall, big_rss, big_size = read_trace_in_full(args.tree, env)
    print(f"big log:   {big_wall:7.3f} s   peak RSS {big_rss:6.1f} MiB   (the {big_size:.0f} MiB "
          "trace log read in full as an ordinary log)")
    ok = True
    for name, f in figures.items():
        good = f["ratio"] <= MAX_RATIO
        ok &= good
        print(f"{'PASS' if good else 'FAIL'}: analyzer wall time within {MAX_RATIO:g}x grep on "
              f"the tree {name} ({f['ratio']:.2f}x)")
    worst = max(max(f["rss"] for f in figures.values()), big_rss)
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
        wall, rss, _status = run(analyzer_cmd(tmp), env)  # status 1: a 5-step run, not 50
        shutil.rmtree(link.parent)
    return wall, rss, log.stat().st_size / (1 << 20)


if __name__ == "__main__":
    sys.exit(main())
