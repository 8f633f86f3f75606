"""The analyzer's memory over a tree of very many small logs: bounded, not growing per log.

    python tests/bench/many_logs.py [--logs N] [TREE]   (make bench-many; default 200,000 logs
                                                          under $LLMB_BENCH_DIR/many, LLMB_BENCH_DIR
                                                          defaulting to /tmp/llmb-bench)

Generates (once; reused after) N runs as an install lays them out
(`<experiment>/<experiment>_<n>/log-<experiment>_<job>_0.out`, a few KB of NeMo output each, one
in ten with a run manifest and one in twenty failed), then runs the analyzer over it with
--format=json (and --format=csv) and checks its peak RSS (GNU time) against MAX_RSS_MB. The
time it takes is printed, not judged: it is not the speed benchmark (make bench is).
Not part of `make bench`: writing 200,000 files takes longer than the whole speed benchmark.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "common"))

from llmb.container import nemolog  # noqa: E402

MAX_RSS_MB = 150.0
STAMP = ".llmb-many-tree"
STEPS = 12
CONFIGS = [  # (experiment, GPUs, GBS, step time s, TFLOPS a step logs)
    ("pretrain_llama3.1_8b_fp8_gpus8_tp1_pp1_cp2_vpNone_mbs1_gbs128", 8, 128, 9.33, 813.0),
    ("pretrain_llama3.1_8b_bf16_gpus16_tp1_pp1_cp2_vpNone_mbs1_gbs256", 16, 256, 12.3, 616.0),
    ("pretrain_nemotron4_15b_fp8_gpus32_tp2_pp1_cp1_vpNone_mbs2_gbs128", 32, 128, 1.98, 777.0),
]


def log_text(rng: random.Random, gpus: int, gbs: int, seconds: float, tflops: float,
             failed: bool) -> str:
    lines = [nemolog.member_line(0, gpus), nemolog.registered_line(gpus),
             nemolog.log_line("Experiments will be logged at /nemo_run/code/nemo_experiments",
                              "nemo_logging:393", now=1744382925.0)]
    steps = rng.randrange(3, STEPS - 1) if failed else STEPS
    for i in range(steps):
        t = seconds * rng.gauss(1.0, 0.003)
        lines.append(nemolog.step_line(
            iteration=i, last_iteration=STEPS - 1, lr=1.5e-05, global_batch_size=gbs,
            global_step=i, reduced_train_loss=12 - i * 0.05, train_step_timing=t,
            tflops_per_gpu=tflops * seconds / t, consumed_samples=gbs * (i + 1)))
    if failed:
        lines.append("srun: error: nid001234: task 3: Exited with exit code 1")
    return "\n".join(lines) + "\n"


def generate(tree: Path, logs: int) -> None:
    rng = random.Random(200000)
    for n in range(logs):
        exp, gpus, gbs, seconds, tflops = CONFIGS[n % len(CONFIGS)]
        run = tree / exp / f"{exp}_{1744400000 + n}"
        run.mkdir(parents=True)
        job = 4000000 + n
        (run / f"log-{exp}_{job}_0.out").write_text(
            log_text(rng, gpus, gbs, seconds, tflops, n % 20 == 7))
        if n % 10 == 3:
            (run / "llmb_manifest.json").write_text(json.dumps({
                "schema": 1, "workload": exp.split("_")[0] + "_" + exp.split("_")[1],
                "experiment": exp, "model_size": exp.split("_")[2], "dtype": exp.split("_")[3],
                "gpu_type": "h100", "num_gpus": gpus, "scaling": "weak",
                "parallelism": {"gbs": gbs}, "options": {"max_steps": STEPS}}))


def measure(tree: Path, fmt: str) -> tuple[float, float, int]:
    """(wall s, peak RSS MiB, exit status) of the analyzer over tree."""
    python = os.environ.get("LLMB_PYTHON") or sys.executable
    with tempfile.TemporaryFile() as out, tempfile.NamedTemporaryFile("r") as rss:
        start = time.perf_counter()
        status = subprocess.call(
            ["/usr/bin/time", "-q", "-f", "%M", "-o", rss.name, "bash",
             str(REPO / "common" / "parse_train_timing.sh"), f"--format={fmt}", str(tree)],
            stdout=out, stderr=subprocess.DEVNULL, env={**os.environ, "LLMB_PYTHON": python})
        wall = time.perf_counter() - start
        return wall, float(rss.read().split()[-1]) / 1024, status


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tree", nargs="?")
    parser.add_argument("--logs", type=int, default=200_000)
    args = parser.parse_args()
    base = Path(os.environ.get("LLMB_BENCH_DIR", "/tmp/llmb-bench"))
    tree = Path(args.tree) if args.tree else base / "many"
    if not shutil.which("time", path="/usr/bin"):
        print("many logs: /usr/bin/time (GNU time) is needed to measure the peak RSS")
        return 1
    version = f"{args.logs}-{STEPS}"
    stamp = tree / STAMP
    if not (stamp.is_file() and stamp.read_text().strip() == version):
        print(f"many logs: generating {args.logs} logs under {tree} ...", flush=True)
        shutil.rmtree(tree, ignore_errors=True)
        tree.mkdir(parents=True)
        generate(tree, args.logs)
        stamp.write_text(version + "\n")
    ok = True
    for fmt in ("json", "csv"):
        wall, rss, status = measure(tree, fmt)
        good = status == 0 and rss < MAX_RSS_MB
        ok = ok and good
        print(f"{'PASS' if good else 'FAIL'}: {args.logs} logs, --format={fmt}: peak RSS "
              f"{rss:.1f} MiB (limit {MAX_RSS_MB:g}), {wall:.1f} s, exit {status}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
