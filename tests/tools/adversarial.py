"""`make adversarial`: hostile inputs against every front, each as a user's shell runs it.

Each input runs the real front (launch.sh with DRY_RUN, llmb-run, the analyzer, the installer,
setup.sh) in a fresh process, in a throw-away install, under a 60 s deadline and a 2 GB address
space, with a canary token in the environment and in the install's token file and a payload that
marks the disk if any value is ever run as code. An input is a defect when its front:
- runs past the deadline or is killed (memory),
- prints a Python traceback, or a non-zero exit without a line on stderr that starts with the
  front's name (`llmb:`, `llmb-run:`, `llmb-install:`, `parse_train_timing.sh:`, ...), with
  more than two lines there (the error and one hint), or with a status outside 1, 2, 3,
- shows the canary token anywhere, or the payload marked the disk.
Prints the counts per surface (inputs, accepted, refused, defects) and each defect; exits 1 on any.
Cases come from the surfaces' generators in tests/tools/adversarial_cases.py.
    python3 tests/tools/adversarial.py [--surface NAME ...] [--jobs N] [--list]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "helpers"), str(HERE.parents[1] / "common")]

import adversarial_cases  # noqa: E402
from adversarial_cases import CANARY, Case, Site  # noqa: E402

DEADLINE_S = 60
MEMORY_BYTES = 2 << 30
OK_STATUSES = (0, 1, 2, 3)
# how each front starts its one line
PREFIXES = ("llmb:", "llmb-run:", "llmb-install:", "parse_train_timing.sh:", "setup.sh:",
            "llmb: warning:")


@dataclass(frozen=True)
class Outcome:
    case: Case
    status: int | None  # None: past the deadline
    seconds: float
    defect: str | None


def _limits() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))


def _defect(case: Case, status: int | None, out: str, err: str, marker: Path) -> str | None:
    """What is wrong with how the front ended, or None."""
    if status is None:
        return f"still running after {DEADLINE_S} s"
    if marker.exists():
        return "the payload ran (the marker file exists)"
    if CANARY in out or CANARY in err:
        return "the canary token was shown"
    if "Traceback (most recent call last)" in err or "Traceback" in out:
        return "a traceback: " + err.strip().splitlines()[-1][:200]
    if status not in OK_STATUSES:
        return f"exit status {status}: {err.strip()[:200]!r}"
    if status != 0:
        lines = [line for line in err.splitlines() if line.strip()]
        if not any(line.startswith(PREFIXES) for line in lines):
            return f"exit {status} without the front's one line: {err.strip()[:200]!r}"
        if len(lines) > case.max_error_lines:
            return f"exit {status} with {len(lines)} lines on stderr: {lines[:3]!r}"
    return None


def run_case(case: Case, site: Site) -> Outcome:
    with tempfile.TemporaryDirectory(prefix="adv-") as scratch:
        work = Path(scratch)
        marker = work / "PWNED"
        argv, env, cwd = case.build(site, work, marker)
        began = time.perf_counter()
        try:
            done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True,
                                  stdin=subprocess.DEVNULL, timeout=DEADLINE_S,
                                  preexec_fn=_limits, check=False)
            status: int | None = done.returncode
            out = done.stdout.decode(errors="replace")
            err = done.stderr.decode(errors="replace")
        except subprocess.TimeoutExpired:
            status, out, err = None, "", ""
        seconds = time.perf_counter() - began
        return Outcome(case, status, seconds, _defect(case, status, out, err, marker))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--surface", action="append", default=[])
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--list", action="store_true", help="list the cases and stop")
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="adv-site-"))
    try:
        site = adversarial_cases.make_site(root)
        cases = [c for c in adversarial_cases.all_cases()
                 if not args.surface or c.surface in args.surface]
        if args.list:
            for case in cases:
                print(f"{case.surface}\t{case.name}")
            return 0
        with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
            outcomes = list(pool.map(lambda c: run_case(c, site), cases))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return report(outcomes)


def report(outcomes: list[Outcome]) -> int:
    counts: dict[str, Counter[str]] = {}
    for o in outcomes:
        kind = "defect" if o.defect else ("accepted" if o.status == 0 else "refused")
        counts.setdefault(o.case.surface, Counter())[kind] += 1
    print(f"{'surface':<16} {'inputs':>6} {'accepted':>8} {'refused':>7} {'defects':>7}")
    for surface, c in counts.items():
        print(f"{surface:<16} {sum(c.values()):>6} {c['accepted']:>8} {c['refused']:>7} "
              f"{c['defect']:>7}")
    total = Counter[str]()
    for c in counts.values():
        total.update(c)
    print(f"{'all':<16} {sum(total.values()):>6} {total['accepted']:>8} {total['refused']:>7} "
          f"{total['defect']:>7}")
    slowest = max(outcomes, key=lambda o: o.seconds, default=None)
    if slowest is not None:
        print(f"slowest: {slowest.case.surface} {slowest.case.name} {slowest.seconds:.1f} s")
    for o in outcomes:
        if o.defect:
            print(f"DEFECT {o.case.surface} {o.case.name}: {o.defect}")
    return 1 if total["defect"] else 0


if __name__ == "__main__":
    sys.exit(main())
