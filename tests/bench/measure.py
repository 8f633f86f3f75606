"""Time the analyzer against `grep -rc train_step_timing` over the bench tree; check targets.

    python tests/bench/measure.py TREE [--repeat N]

Runs grep and the analyzer alternately N times (page cache warm after the first round),
keeps each one's best wall time and its peak RSS (os.wait4: the child's own rusage), prints
both, the ratio and PASS/FAIL per target, and exits 1 when a target fails.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MAX_RATIO = 10.0  # analyzer wall time / grep wall time
MAX_RSS_MB = 150.0


def run(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, float, int]:
    """(wall seconds, peak RSS MiB, exit status) of one run.

    Output goes to a real file: GNU grep writing to /dev/null stops at the first match.
    """
    with tempfile.TemporaryFile() as out:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.DEVNULL, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    return wall, usage.ru_maxrss / 1024, proc.returncode


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
    grep_logs = ["grep", "-rc", "--exclude=*_nccltrace*", "train_step_timing", args.tree]
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
    print(f"grep -rc:  {g_wall:7.3f} s   peak RSS {g_rss:6.1f} MiB   (best of {args.repeat})")
    print(f"analyzer:  {a_wall:7.3f} s   peak RSS {a_rss:6.1f} MiB   (best of {args.repeat})")
    print(f"ratio:     {ratio:7.2f} x grep")
    print(f"(info: grep over the same logs without the NCCL trace {best['grep_logs'][0]:.3f} s; "
          f"analyzer {a_wall / best['grep_logs'][0]:.2f}x that)")
    ok_time, ok_rss = ratio <= MAX_RATIO, a_rss < MAX_RSS_MB
    print(f"{'PASS' if ok_time else 'FAIL'}: analyzer wall time within {MAX_RATIO:g}x grep "
          f"({ratio:.2f}x)")
    print(f"{'PASS' if ok_rss else 'FAIL'}: analyzer peak RSS under {MAX_RSS_MB:g} MB "
          f"({a_rss:.1f} MiB)")
    return 0 if ok_time and ok_rss else 1


if __name__ == "__main__":
    sys.exit(main())
