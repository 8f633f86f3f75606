"""Generate (once; reused after) the analyzer bench's trees beyond make_tree.py's two.

    python tests/bench/make_shapes.py [BASE]     (default $LLMB_BENCH_DIR, else /tmp/llmb-bench)

- `megatron`: 100 Megatron-Bridge runs of about MEGATRON_MB MiB each, laid out as an install
  lays them out, in both naming styles of the current recipes (`..._vpNone_ep1_mbs1_gbs128`,
  models the catalog knows and models it does not), each step an iteration line with its
  `Step Time` companion (glued into one line from step 10 on in half of them), noise between
  steps (warnings, NCCL INFO, memory reports), some with srun's `N: ` label, some failing; the
  mixture-of-experts model's iteration lines with its losses after `lm loss`, a third of the
  others with the throughput, energy, power and params norm fields a run's settings add.
- `noise`: NOISE_LOGS complete NeMo 2 runs whose logs carry NOISE_MB MiB of warning lines each.
- `many`: MANY_LOGS complete 50-step Megatron-Bridge logs in ONE directory (an install that has
  run for months; a cost per log, or per log and directory, shows here).
- `empty`: EMPTY_LOGS empty logs in one directory (jobs that printed nothing).
- `hostile`: HOSTILE_LOGS complete NeMo 2 runs whose logs also hold corrupted lines of
  HOSTILE_CHARS characters each, one of each shape that once cost the analyzer time quadratic in
  its length (minutes a line): a step line whose time is digits then `_`, one with that many
  fields between and no TFLOPS, a Megatron iteration line of that shape, a checkpoint line whose
  duration is digits then `_`, an error line of capitals.

Each tree's step lines are written from the format (tests/helpers/logformats.py). The trees
are regenerated when missing or made by a different version of this file.
"""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "common"), str(REPO / "tests" / "helpers")]

from logformats import MegatronStep, megatron_startup, nemo_step  # noqa: E402

MOE_FIELDS = frozenset({"moe"})  # a mixture of experts' losses
SETTINGS_FIELDS = frozenset({"throughput", "energy", "params norm"})  # what settings add

STAMP = ".llmb-bench-shape"
MEGATRON_RUNS, MEGATRON_MB = 100, 2
NOISE_LOGS, NOISE_MB = 120, 2
MANY_LOGS = 20_000
EMPTY_LOGS = 100_000
HOSTILE_LOGS, HOSTILE_CHARS = 10, 100_000
STEPS = 50
# (experiment, GPUs, GBS, step ms, MODEL_TFLOP/s/GPU): the current recipes' names, with `ep`
MEGATRON_ROWS = [
    ("pretrain_llama3.1_8b_bf16_gpus8_tp1_pp1_cp1_vpNone_ep1_mbs2_gbs128", 8, 128, 4189.6, 1610.2),
    ("pretrain_qwen3_30b_a3b_bf16_gpus8_tp1_pp1_cp1_vpNone_ep8_mbs8_gbs512", 8, 512, 7021.4,
     1187.5),
    ("pretrain_llama3_70b_fp8_gpus64_tp2_pp4_cp1_vp5_ep1_mbs1_gbs128", 64, 128, 9812.3, 2104.9),
    ("pretrain_nemotron4_15b_fp8_gpus16_tp2_pp1_cp1_vpNone_ep1_mbs2_gbs128", 16, 128, 1102.7,
     1544.0),
]
WARNINGS = (
    "[NeMo W 2026-03-27 23:17:{s:02d} nemo_logging:405] /usr/local/lib/python3.12/dist-packages/"
    "torch/distributed/c10d_logger.py:83: UserWarning: The given buffer is not writable, and "
    "PyTorch does not support non-writable tensors (rank {r}).",
    "{r}: /usr/local/lib/python3.12/dist-packages/transformer_engine/pytorch/module/base.py:"
    "{n}: UserWarning: fp8_group is deprecated and will be removed in a future release.",
    "node{n:03d}:{p}:{p} [{g}] NCCL INFO Channel {c:02d}/0 : {r}[{g}] -> {r2}[{g}] via "
    "P2P/CUMEM/read",
    "[Rank {r}] (after {n} iterations) memory (GB) | mem-allocated-gigabytes: 51.072 | "
    "mem-max-allocated-gigabytes: 194.41 | mem-reserved-gigabytes: 216.89",
)


def version() -> str:
    here = Path(__file__).read_bytes() + (REPO / "tests/helpers/logformats.py").read_bytes()
    return hashlib.sha256(here).hexdigest()[:16]


def noise(rng: random.Random, count: int) -> list[str]:
    return [rng.choice(WARNINGS).format(s=rng.randrange(60), r=rng.randrange(64),
                                        r2=rng.randrange(64), n=rng.randrange(200),
                                        p=rng.randrange(1000, 9999), g=rng.randrange(8),
                                        c=rng.randrange(32)) for _ in range(count)]


def megatron_log(rng: random.Random, row: tuple[str, int, int, float, float], lines_per_step: int,
                 failed: bool, glued: bool, label: bool, settings: bool = False) -> str:
    exp, gpus, gbs, ms, tflops = row
    extra = MOE_FIELDS if "_a3b_" in exp else SETTINGS_FIELDS if settings else frozenset()
    lines = megatron_startup(gpus, max(1, gpus // 8), gbs=gbs) + noise(rng, lines_per_step)
    steps = rng.randrange(12, 40) if failed else STEPS
    for k in range(1, steps + 1):
        jitter = 1 if k > 3 else 1.5
        step = MegatronStep(k, STEPS, round(ms * jitter * rng.gauss(1, 0.003), 1),
                            round(tflops / jitter, 1), gbs, second=k, extra=extra)
        lines += noise(rng, lines_per_step) + step.lines(glued and k >= 10)
    if failed:
        lines += ["[rank5]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
                  "3.50 GiB.", "srun: error: node003: task 5: Exited with exit code 1"]
    if label:
        lines = [f"{rng.randrange(gpus)}: {line}" for line in lines]
    return "\n".join(lines) + "\n"


def write_megatron(tree: Path) -> None:
    rng = random.Random(27)
    for n in range(MEGATRON_RUNS):
        row = MEGATRON_ROWS[n % len(MEGATRON_ROWS)]
        exp = row[0]
        run = tree / exp / f"{exp}_{1774650000 + n}" / exp
        run.mkdir(parents=True)
        per_step = MEGATRON_MB * (1 << 20) // STEPS // 170
        text = megatron_log(rng, row, per_step, failed=n % 9 == 4, glued=n % 2 == 0,
                            label=n % 5 == 1, settings=n % 3 == 2)
        job = 5000000 + n
        (run / f"log-{exp}_{job}_0.out").write_text(text)
        (run / f"sbatch_{exp}_{job}.out").write_text(f"Submitted batch job {job}\n")


def write_noise(tree: Path) -> None:
    rng = random.Random(120)
    exp = "pretrain_llama3.1_8b_fp8_gpus8_tp1_pp1_cp2_vpNone_mbs1_gbs128"
    warning = noise(rng, 1)[0]
    per_step = NOISE_MB * (1 << 20) // STEPS // (len(warning) + 1)
    for n in range(NOISE_LOGS):
        run = tree / exp / f"{exp}_{1744400000 + n}" / exp
        run.mkdir(parents=True)
        lines: list[str] = []
        for i in range(STEPS):
            lines += [warning] * per_step
            lines.append(nemo_step(i, STEPS - 1, round(9.33 * rng.gauss(1, 0.003), 3), 813.0))
        (run / f"log-{exp}_{3100000 + n}_0.out").write_text("\n".join(lines) + "\n")


def write_many(tree: Path) -> None:
    rng = random.Random(20000)
    texts = [megatron_log(rng, MEGATRON_ROWS[i], 0, failed=False, glued=i % 2 == 0, label=False)
             for i in range(len(MEGATRON_ROWS))]
    tree.mkdir(parents=True)
    for n in range(MANY_LOGS):
        row = n % len(MEGATRON_ROWS)
        (tree / f"log-{MEGATRON_ROWS[row][0]}_{6000000 + n}_0.out").write_text(texts[row])


def write_empty(tree: Path) -> None:
    exp = MEGATRON_ROWS[0][0]
    tree.mkdir(parents=True)
    for n in range(EMPTY_LOGS):
        (tree / f"log-{exp}_{7000000 + n}_0.out").touch()


def hostile_lines() -> list[str]:
    """One corrupted line of each shape (HOSTILE_CHARS characters each)."""
    run, fields = "1" * HOSTILE_CHARS + "_", " | a: 1" * (HOSTILE_CHARS // 7)
    step = MegatronStep(12, STEPS, 4189.6).iteration_text()
    return [nemo_step(11, STEPS - 1, 9.33).replace("9.33", run),
            nemo_step(12, STEPS - 1, 9.33, None).replace(" | consumed", fields + " | consumed"),
            step.replace("4189.6", run),
            "Global Checkpoint Save : Rank: 0 : Iteration: 50 : Save duration: " + run + "s",
            "[rank0]: error: " + "A" * HOSTILE_CHARS]


def write_hostile(tree: Path) -> None:
    rng = random.Random(7)
    exp = "pretrain_llama3.1_8b_fp8_gpus8_tp1_pp1_cp2_vpNone_mbs1_gbs128"
    for n in range(HOSTILE_LOGS):
        run = tree / exp / f"{exp}_{1744500000 + n}" / exp
        run.mkdir(parents=True)
        lines = [nemo_step(i, STEPS - 1, round(9.33 * rng.gauss(1, 0.003), 3), 813.0)
                 for i in range(STEPS)]
        lines[20:20] = hostile_lines()
        (run / f"log-{exp}_{3200000 + n}_0.out").write_text("\n".join(lines) + "\n")


SHAPES: dict[str, Callable[[Path], None]] = {
    "megatron": write_megatron, "noise": write_noise, "many": write_many, "empty": write_empty,
    "hostile": write_hostile,
}


def ensure(base: Path, name: str) -> Path:
    """The shape's tree under base, generated unless this version made it already."""
    tree = base / f"shape-{name}"
    stamp = base / f".{name}{STAMP}"
    if stamp.is_file() and stamp.read_text().strip() == version():
        print(f"bench tree: reusing {tree}")
        return tree
    print(f"bench tree: generating {tree} ...", flush=True)
    shutil.rmtree(tree, ignore_errors=True)
    SHAPES[name](tree)
    stamp.write_text(version() + "\n")  # last: an interrupted generation is redone
    return tree


def main(argv: list[str]) -> int:
    base = Path(argv[0]) if argv else Path(os.environ.get("LLMB_BENCH_DIR", "/tmp/llmb-bench"))
    base.mkdir(parents=True, exist_ok=True)
    for name in SHAPES:
        ensure(base, name)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
