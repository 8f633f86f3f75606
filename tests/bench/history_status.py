"""Peak RSS and wall time of `llmb-run status` (the last 20 jobs) and `status JOB` over a
100 MB history of finished jobs (a submit and a state record each).

    python tests/bench/history_status.py [--mb 100]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "tests" / "helpers"), str(REPO / "common"), str(Path(__file__).parent)]

import runinstall  # noqa: E402
from measure import run  # noqa: E402
from slurmshims import Slurm  # noqa: E402

MAX_RSS_MB = 100.0


def write_history(path: Path, size_mb: int) -> str:
    """Finished jobs until the file holds size_mb MB; the last job's id."""
    base = {"type": "submit", "experiment": "pretrain_llama3.1_8b_fp8_gpus8",
            "experiment_dir": None, "workload": "pretrain_llama3.1", "size": "8b",
            "dtype": "fp8", "scale": 8, "gpu_type": "h100", "repeat": 1, "profile": False,
            "smoke": False, "env": {"MAX_STEPS": "50"}, "placement": {},
            "time": "2025-04-11T14:48:45Z"}
    job = 1_000_000
    with path.open("w") as fh:
        while fh.tell() < size_mb << 20:
            job += 1
            fh.write(json.dumps({**base, "job_id": str(job)}) + "\n")
            fh.write(json.dumps({"type": "state", "job_id": str(job), "state": "COMPLETED",
                                 "nodes": "node1", "detail": None}) + "\n")
    return str(job)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=100)
    args = parser.parse_args()
    failed = False
    with tempfile.TemporaryDirectory(prefix="llmb-bench-history-") as tmp:
        root = runinstall.make_install(Path(tmp) / "install")
        last = write_history(root / "llmb_run_history.jsonl", args.mb)
        shims = Slurm(Path(tmp) / "slurm")
        env = runinstall.llmb_run_env(PATH=f"{shims.dir}:/usr/bin:/bin")
        for label, extra in (("status", []), ("status JOB", [last])):
            wall, rss, code, _ = run(["bash", str(runinstall.LLMB_RUN), "--config",
                                      str(root / "cluster_config.yaml"), "status", *extra], env)
            ok = code == 0 and rss < MAX_RSS_MB
            failed |= not ok
            print(f"bench_history: {label} over {args.mb} MB: {wall:.1f} s, peak RSS "
                  f"{rss:.0f} MB (target < {MAX_RSS_MB:.0f} MB), exit {code}: "
                  f"{'PASS' if ok else 'FAIL'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
