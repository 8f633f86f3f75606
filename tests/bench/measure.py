"""Time the analyzer against `grep -rc train_step_timing` over the bench tree; check targets.

    python tests/bench/measure.py TREE [--repeat N]

Runs grep and the analyzer (--format=json, the full analysis: reasons, configurations and
verdicts included) alternately N times (page cache warm after the first round), keeps each
one's best wall time and its peak RSS (os.wait4: the child's own rusage), prints both, the
ratio and PASS/FAIL per target, and exits 1 when a target fails. Then, for the memory target
"whatever the log sizes", it has the analyzer read the 1 GB trace log in full as an ordinary
log (a link to it, without its manifest) and checks that run's peak RSS too.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from make_tree import TRACE_NAME

REPO = Path(__file__).resolve().parents[2]
MAX_RATIO = 3.0  # analyzer wall time / grep wall time
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tree")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    python = os.environ.get("LLMB_PYTHON") or sys.executable
    env = {**os.environ, "LLMB_PYTHON": python}
    grep = ["grep", "-rc", "train_step_timing", args.tree]
    analyzer = ["bash", str(REPO / "common" / "parse_train_timing.sh"), "--format=json",
                args.tree]
    # For information: grep over only the logs the analyzer reads (it skips the NCCL trace
    # unread, grep cannot), so the speed of the scan itself is visible too.
    grep_logs = ["grep", "-rc", f"--exclude-dir={TRACE_NAME}*", "train_step_timing", args.tree]
    best = {k: (float("inf"), 0.0) for k in ("grep", "analyzer", "grep_logs")}
    for _ in range(args.repeat):
        for name, cmd in (("grep", grep), ("analyzer", analyzer), ("grep_logs", grep_logs)):
            wall, rss, status = run(cmd, env)
            if status not in (0, 1) or (name == "analyzer" and status != 0):
                print(f"bench: {' '.join(cmd)} exited with {status}", file=sys.stderr)
                return 1
            best[name] = (min(best[name][0], wall), max(best[name][1], rss))
    (g_wall, g_rss), (a_wall, a_rss) = best["grep"], best["analyzer"]
    ratio = a_wall / g_wall
    size = sum(f.stat().st_size for f in Path(args.tree).rglob("*.out")) / (1 << 20)
    logs = sum(1 for _ in Path(args.tree).rglob("log-*.out"))
    print(f"tree:      {args.tree} ({logs} logs, {size:.0f} MiB of .out files)")
    if not GNU_TIME:
        print("(no /usr/bin/time: peak RSS includes the 20 MB of Python each child forks from)")
    print(f"grep -rc:  {g_wall:7.3f} s   peak RSS {g_rss:6.1f} MiB   (best of {args.repeat})")
    print(f"analyzer:  {a_wall:7.3f} s   peak RSS {a_rss:6.1f} MiB   (best of {args.repeat})")
    print(f"ratio:     {ratio:7.2f} x grep")
    print(f"(info: grep over the same logs without the NCCL trace {best['grep_logs'][0]:.3f} s; "
          f"analyzer {a_wall / best['grep_logs'][0]:.2f}x that)")
    big_wall, big_rss, big_size = read_trace_in_full(args.tree, env)
    print(f"big log:   {big_wall:7.3f} s   peak RSS {big_rss:6.1f} MiB   (the {big_size:.0f} MiB "
          "trace log read in full as an ordinary log)")
    ok_time, ok_rss = ratio <= MAX_RATIO, max(a_rss, big_rss) < MAX_RSS_MB
    print(f"{'PASS' if ok_time else 'FAIL'}: analyzer wall time within {MAX_RATIO:g}x grep "
          f"({ratio:.2f}x)")
    print(f"{'PASS' if ok_rss else 'FAIL'}: analyzer peak RSS under {MAX_RSS_MB:g} MB "
          f"({a_rss:.1f} MiB on the tree, {big_rss:.1f} MiB on the {big_size:.0f} MiB log)")
    return 0 if ok_time and ok_rss else 1


def read_trace_in_full(tree: str, env: dict[str, str]) -> tuple[float, float, float]:
    """(wall, peak RSS MiB, size MiB) of the analyzer reading the trace log as a plain log."""
    [log] = Path(tree).glob(f"{TRACE_NAME}/*/*/log-*.out")
    with tempfile.TemporaryDirectory() as tmp:
        link = Path(tmp) / "big-run" / "log-big-run_1_0.out"
        link.parent.mkdir()
        link.symlink_to(log)
        cmd = ["bash", str(REPO / "common" / "parse_train_timing.sh"), "--format=json", tmp]
        wall, rss, _status = run(cmd, env)  # status 1: the log is a 5-step run, not 50
        shutil.rmtree(link.parent)
    return wall, rss, log.stat().st_size / (1 << 20)


if __name__ == "__main__":
    sys.exit(main())
