"""Generate the synthetic experiments tree the analyzer benchmark reads (once; reused after).

    python tests/bench/make_tree.py [TREE]      (default $LLMB_BENCH_DIR/experiments,
                                                 LLMB_BENCH_DIR defaulting to /tmp/llmb-bench)

RUNS runs named after published rows of the catalog (new and old naming styles, some with a
run manifest), each a NeMo-like log: per-rank start-up chatter, then per step dozens of noise
lines (memory usage, warnings, rank-prefixed messages) around the step line. Some runs fail,
some use the progress-bar form, CRLF, ANSI colours, or print each step from two ranks. Plus an
sbatch_*.out per run, one run whose log is BIG_LOG_MB MiB (read in full: memory must stay
flat) and one NCCL-trace run whose log is at least TRACE_MB MiB (skipped unread).
The tree is regenerated when it is missing or was made by a different version of this file.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "common"))

from llmb import catalog, nemolog  # noqa: E402

RUNS = 120
TRACE_MB = 512
BIG_LOG_MB = 256  # one ordinary run with a very chatty log: read in full, memory must not grow
STAMP = ".llmb-bench-tree"
T0 = 1744382925.0
NOISE = (
    "[NeMo I {ts} nemo_logging:393] mem-allocated-gigabytes: {a:.4}, "
    "mem-max-allocated-gigabytes: {b:.4}, mem-reserved-gigabytes: {c:.4}",
    "[NeMo W {ts} nemo_logging:405] /usr/local/lib/python3.12/dist-packages/torch/autograd/"
    "graph.py:824: UserWarning: c10d::broadcast_: an autograd kernel was not registered to the "
    "Autograd key(s) but we are trying to backprop through it.",
    "[rank{r}]:[W411 14:{m:02d}:{s:02d}.{us:06d} ProcessGroupNCCL.cpp:4561] [PG ID 0 PG GUID 0 "
    "Rank {r}]  using GPU {g} to perform barrier as devices used by this process are currently "
    "unknown.",
    "{r}: [NeMo I {ts} utils:554] Setting up ModelTransform for stage: TrainerFn.FITTING",
    "[NeMo I {ts} num_microbatches_calculator:228] setting number of microbatches to constant 1",
    "{r}: Timer elapsed forward-backward: {a:.4}, optimizer: {b:.4}, data: {c:.4} "
    "(reduce-scatter overlap enabled)",
)


def version() -> str:
    digest = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]
    return f"{digest}-{RUNS}-{TRACE_MB}-{BIG_LOG_MB}"


def stamp_of(ts: float) -> str:
    return nemolog.log_prefix("x", now=ts)[8:27]


def noise(rng: random.Random, step: int, count: int) -> list[str]:
    ts = stamp_of(T0 + step * 10)
    return [rng.choice(NOISE).format(
        ts=ts, a=rng.uniform(20, 70), b=rng.uniform(60, 75), c=rng.uniform(70, 79),
        r=rng.randrange(128), g=rng.randrange(8), m=step % 60, s=rng.randrange(60),
        us=rng.randrange(10**6)) for _ in range(count)]


def startup(rng: random.Random, gpus: int) -> list[str]:
    lines = ["+ srun --mpi=pmix --container-image=/lustre/llmb/images/nvidia+nemo+25.04.01.sqsh"]
    for r in range(min(gpus, 128)):
        lines += [
            f"{r}: Initializing distributed: GLOBAL_RANK: {r}, MEMBER: {r + 1}/{gpus}",
            f"{r}: [NeMo I {stamp_of(T0)} megatron_init:513] Rank {r} has data parallel group"
            f" : [{r}, {r + 8}, {r + 16}]",
            f"{r}: [NeMo I {stamp_of(T0)} megatron_init:519] All data parallel group ranks with"
            f" context parallel combined: [[{r}, {r + 8}]]",
            f"{r}: GPU available: True (cuda), used: True",
        ]
    return lines + noise(rng, 0, 200)


def step_text(form: str, i: int, last: int, t: float, tflops: float, gbs: int) -> str:
    if form == "bar":
        done = i + 1
        return (f"Epoch 0: : {done * 100 // (last + 1):3d}%|#####     | {done}/{last + 1} "
                f"[00:{done % 60:02d}<00:00, reduced_train_loss={12 - i * 0.05:.3f}, "
                f"global_step={i:.2f}, consumed_samples={float(gbs * done)}, "
                f"train_step_timing in s={t:.3f}]")
    return nemolog.step_line(iteration=i, last_iteration=last, lr=1.5e-05, global_batch_size=gbs,
                             global_step=i, reduced_train_loss=12 - i * 0.05, train_step_timing=t,
                             tflops_per_gpu=tflops, consumed_samples=gbs * (i + 1))


def write_run(root: Path, rng: random.Random, cfg: catalog.Config, ref: float, n: int) -> None:
    old_style = rng.random() < 0.2
    exp = (f"{cfg.workload}_{cfg.model_size}_{cfg.dtype}_{cfg.num_gpus}" if old_style
           else cfg.experiment_name)
    if n % 7 == 0:
        exp += f"_{n}"  # a repeat of the same configuration, told apart by a suffix
    run = root / exp / f"{exp}_{1744400000 + n}"
    d = run / exp
    d.mkdir(parents=True, exist_ok=True)
    if rng.random() < 0.15:
        (run / "llmb_manifest.json").write_text(json.dumps({
            "schema": 1, "recipe": cfg.recipe, "workload": cfg.workload, "experiment": exp,
            "model_size": cfg.model_size, "dtype": cfg.dtype, "gpu_type": cfg.gpu_type,
            "num_gpus": cfg.num_gpus, "scaling": cfg.scaling, "seq_length": cfg.seq_length,
            "parallelism": {"gbs": cfg.gbs, "num_layers": cfg.num_layers},
            "options": {"max_steps": 50, "nccl_trace": False}}))
    form = "bar" if rng.random() < 0.1 else "pipe"
    steps = 50 if rng.random() > 0.1 else rng.randrange(5, 45)
    ranks = 2 if rng.random() < 0.2 else 1
    colour = rng.random() < 0.3
    per_step = rng.randrange(50, 400)
    lines = startup(rng, cfg.num_gpus)
    for i in range(steps):
        lines += noise(rng, i, per_step)
        t = ref * (4 if i == 0 else 1.3 if i < 5 else rng.gauss(1.0, 0.005))
        for r in range(ranks):
            text = step_text(form, i, 49, t, 600 * rng.gauss(1, 0.01), cfg.gbs)
            lines.append(f"\x1b[1m{text}\x1b[0m" if colour else text if r == 0 else f"8: {text}")
    if steps < 50:
        lines += ["Traceback (most recent call last):",
                  "torch.distributed.DistBackendError: NCCL communicator was aborted on rank 3."]
    newline = "\r\n" if rng.random() < 0.1 else "\n"
    job = 3000000 + n
    (d / f"log-{exp}_{job}_0.out").write_bytes((newline.join(lines) + newline).encode())
    (d / f"sbatch_{exp}_{job}.out").write_text(f"Submitted batch job {job}\n")


def write_trace(root: Path, cfg: catalog.Config) -> None:
    exp = cfg.experiment_name + "_nccltrace"
    d = root / exp / f"{exp}_1744499999" / exp
    d.mkdir(parents=True, exist_ok=True)
    head = "\n".join(step_text("pipe", i, 4, 9.5, 990.0, cfg.gbs) for i in range(5)) + "\n"
    block = "".join(
        f"nid00{r // 8:04d}:{1000 + r}:{2000 + r} [{r % 8}] NCCL INFO AllReduce: opCount {op:x} "
        f"sendbuff 0x7f3a{op:08x} recvbuff 0x7f3a{op:08x} count 262144 datatype 7 op 0 root 0 "
        f"comm 0x55d0c0a0 [nranks={cfg.num_gpus}] stream 0x55d0c1b0\n"
        for op in range(600) for r in range(16)).encode()
    with open(d / f"log-{exp}_3999999_0.out", "wb") as f:
        f.write(head.encode())
        for _ in range(-(-TRACE_MB * (1 << 20) // len(block))):
            f.write(block)


def write_big_run(root: Path, rng: random.Random, cfg: catalog.Config, ref: float) -> None:
    exp = cfg.experiment_name + "_999"
    d = root / exp / f"{exp}_1744499000" / exp
    d.mkdir(parents=True, exist_ok=True)
    chatter = ("\n".join(noise(rng, 1, 4000)) + "\n").encode()
    per_step = max(1, BIG_LOG_MB * (1 << 20) // 50 // len(chatter))
    with open(d / f"log-{exp}_3999998_0.out", "wb") as f:
        f.write(("\n".join(startup(rng, cfg.num_gpus)) + "\n").encode())
        for i in range(50):
            f.write(chatter * per_step)
            t = ref * rng.gauss(1.0, 0.005)
            f.write((step_text("pipe", i, 49, t, 600.0, cfg.gbs) + "\n").encode())


def generate(tree: Path) -> None:
    rng = random.Random(20261121)
    rows = [(cfg, recipe.reference(cfg.model_size, cfg.dtype, cfg.gpu_type, cfg.num_gpus,
                                   cfg.scaling))
            for recipe in catalog.all_recipes() for cfg in recipe.rows() if cfg.num_gpus <= 512]
    rows = [(cfg, ref.step_time) for cfg, ref in rows if ref is not None]
    for n in range(RUNS):
        cfg, ref = rows[n % len(rows)]
        write_run(tree, rng, cfg, ref, n)
    write_big_run(tree, rng, *rows[1])
    write_trace(tree, rows[0][0])


def main(argv: list[str]) -> int:
    base = Path(os.environ.get("LLMB_BENCH_DIR", "/tmp/llmb-bench"))
    tree = Path(argv[0]) if argv else base / "experiments"
    stamp = tree / STAMP
    if stamp.is_file() and stamp.read_text().strip() == version():
        print(f"bench tree: reusing {tree}")
        return 0
    print(f"bench tree: generating {tree} ({RUNS} runs, one {BIG_LOG_MB} MiB log, a {TRACE_MB} "
          "MiB NCCL trace) ...", flush=True)
    shutil.rmtree(tree, ignore_errors=True)
    tree.mkdir(parents=True)
    generate(tree)
    stamp.write_text(version() + "\n")  # last: an interrupted generation is redone
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
