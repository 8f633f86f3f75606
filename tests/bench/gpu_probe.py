"""The screen's per-GPU measurement on a real GPU, many repeats: what one healthy GPU gives.

    python tests/bench/gpu_probe.py --repeats 40 --out probe.json     (on a machine with a GPU)

Runs the figures `llmb-run screen` measures on each GPU (llmb.container.probe: dense matrix
multiply in bf16 and fp8, the copy bandwidth), with the screen's own sizes and window
(llmb.llmbrun.screen.job's GPU parameters), twice: first cold (straight after the process
starts, as a screen task does today), then after an idle pause and a warm-up of
`--warmup-s` seconds of matrix multiplies. Each repeat is kept with the SM clock, temperature
and power nvidia-smi reported right after it. The summary gives, per figure and pass, the
median, the spread between repeats (standard deviation and the median absolute deviation, as
a fraction of the median) and how many repeats fell more than 2% and 5% below the median
(disturbed repeats). It needs torch with CUDA; it is a measurement, not a test, and no test
tier runs it.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "common"))

from llmb.container import probe

MATMUL_N = 8192  # the screen's GPU plan (llmb.llmbrun.screen.job)
MEMORY_BYTES = 1 << 30
WINDOW_S = 1.0
SMI_FIELDS = "clocks.sm,temperature.gpu,power.draw,clocks_throttle_reasons.active"


def smi() -> list[str]:
    done = subprocess.run(["nvidia-smi", f"--query-gpu={SMI_FIELDS}",
                           "--format=csv,noheader,nounits", "-i", "0"],
                          capture_output=True, text=True, check=False, timeout=30)
    return [c.strip() for c in done.stdout.split(",")] if done.returncode == 0 else []


def one_pass(device: probe.Device, repeats: int) -> dict[str, list[dict[str, object]]]:
    """Every figure `repeats` times, the figures taken in turn (as a screen task does)."""
    measures = {
        "matmul_bf16_tflops": lambda: probe.matmul_tflops(device, "bf16", MATMUL_N, WINDOW_S),
        "matmul_fp8_tflops": lambda: probe.matmul_tflops(device, "fp8", MATMUL_N, WINDOW_S),
        "memory_gbps": lambda: probe.memory_gbps(device, MEMORY_BYTES, WINDOW_S),
    }
    out: dict[str, list[dict[str, object]]] = {name: [] for name in measures}
    start = time.monotonic()
    for _ in range(repeats):
        for name, measure in measures.items():
            value = measure()
            out[name].append({"t_s": round(time.monotonic() - start, 2), "value": value,
                              "smi": smi()})
    return out


def summary(values: list[float]) -> dict[str, float | int]:
    med = statistics.median(values)
    mad = statistics.median(abs(v - med) for v in values)
    return {"n": len(values), "median": med, "mean": statistics.fmean(values),
            "sd_frac": statistics.pstdev(values) / med, "mad_frac": 1.4826 * mad / med,
            "min_frac": min(values) / med, "max_frac": max(values) / med,
            "below_2pct": sum(v < 0.98 * med for v in values),
            "below_5pct": sum(v < 0.95 * med for v in values),
            "trimmed_mean": probe.value_of(values)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=40)
    parser.add_argument("--idle-s", type=float, default=20.0)
    parser.add_argument("--warmup-s", type=float, default=10.0)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    import torch

    device = probe.Device("cuda", 0)
    facts = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
             "smi_fields": SMI_FIELDS, "smi_at_start": smi()}
    cold = one_pass(device, args.repeats)
    time.sleep(args.idle_s)
    probe.matmul_tflops(device, "bf16", MATMUL_N, args.warmup_s)  # the warm-up
    warm = one_pass(device, args.repeats)
    result = {"facts": facts, "passes": {"cold": cold, "warm": warm},
              "summary": {p: {name: summary([float(r["value"]) for r in rows])  # type: ignore[arg-type]
                              for name, rows in runs.items()}
                          for p, runs in (("cold", cold), ("warm", warm))}}
    args.out.write_text(json.dumps(result, indent=1))
    for p, figures in result["summary"].items():
        for name, s in figures.items():
            print(f"{p:5} {name:20} median {s['median']:9.1f}  sd {100 * s['sd_frac']:.2f}%  "
                  f"mad {100 * s['mad_frac']:.2f}%  min {100 * s['min_frac']:.1f}%  "
                  f"<2% {s['below_2pct']}  <5% {s['below_5pct']}  "
                  f"first {rows_first(result, p, name)}")
    return 0 if all(math.isfinite(s["median"]) for f in result["summary"].values()
                    for s in f.values()) else 1


def rows_first(result: dict, p: str, name: str) -> str:
    rows = result["passes"][p][name]
    return " ".join(f"{float(r['value']):.0f}" for r in rows[:4])


if __name__ == "__main__":
    raise SystemExit(main())
