"""Generate (once; reused after) the two experiments trees the analyzer benchmark reads.

    python tests/bench/make_tree.py [TREE]      (default $LLMB_BENCH_DIR/experiments,
                                                 LLMB_BENCH_DIR defaulting to /tmp/llmb-bench)

TREE holds RUNS runs named after published rows of the catalog (both naming
styles, some with a run manifest, some repeated), each a NeMo job's log of about RUN_MB MiB:
per-rank start-up chatter and NCCL INFO set-up lines, then per step a hundred KB of noise
(memory usage, NCCL INFO, warnings, rank-prefixed timers) around the step line. Some runs fail
the way real ones do (time limit, out of memory, NCCL watchdog timeout, node failure: the lines
Slurm, PyTorch and NCCL print), some use the progress-bar form, CRLF, ANSI colours, or print
each step from two ranks; an sbatch_*.out per run. Plus one NCCL-trace run of TRACE_MB MiB of
`NCCL INFO` lines, identified by its run manifest (`options.nccl_trace: true`) and not by its
name: the analyzer must skip it unread on the manifest's word alone, which also holds for a
renamed directory (the `_nccltrace` name rule has its own unit tests).
TREE + "-notrace" holds the same runs without the trace: hard links to the same files (no
second copy on disk or in the page cache). The two shapes time differently for grep, which is
slow on the trace's content and fast on NeMo's: measure.py times both.
Step lines log the TFLOPS_per_GPU NeMo would for the row's model and step time.
The trees are regenerated when missing or made by a different version of this file.
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

from llmb.container import nemolog  # noqa: E402
from llmb.recipes import catalog  # noqa: E402

RUNS = 100
RUN_MB = 5
TRACE_MB = 1024
TRACE_NAME = "pretrain_llama3.1_8b_fp8_gpus8_tp1_pp1_cp2_vpNone_mbs1_gbs128_trace"
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
    "nid00{n:04d}:{pid}:{tid} [{g}] NCCL INFO Channel {ch:02d}/0 : {r}[{g}] -> {r2}[{g2}] via "
    "P2P/CUMEM/read",
    "nid00{n:04d}:{pid}:{tid} [{g}] NCCL INFO Connected all rings, use ring PXN 0 GDR 1",
    "nid00{n:04d}:{pid}:{tid} [{g}] NCCL INFO comm 0x55d0c0a0 rank {r} nRanks 128 nNodes 16 "
    "localRanks 8 localRank {g} MNNVL 0",
)
FAILURES = {
    "time_limit": [
        "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.",
        "slurmstepd: error: *** JOB {job} ON nid00{n:04d} CANCELLED AT 2025-04-11T16:18:45 DUE "
        "TO TIME LIMIT ***",
        "slurmstepd: error: *** STEP {job}.0 ON nid00{n:04d} CANCELLED AT 2025-04-11T16:18:45 "
        "DUE TO TIME LIMIT ***",
        "srun: error: nid00{n:04d}: tasks 0-7: Terminated",
    ],
    "oom": [
        "[rank13]: Traceback (most recent call last):",
        '[rank13]:   File "/opt/NeMo/nemo/collections/llm/api.py", line 123, in train',
        "[rank13]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.50 GiB. GPU 5 "
        "has a total capacity of 79.10 GiB of which 1.20 GiB is free.",
        "srun: error: nid00{n:04d}: task 13: Exited with exit code 1",
    ],
    "nccl": [
        "[rank37]:[E411 15:31:12.123456789 ProcessGroupNCCL.cpp:616] [Rank 37] Watchdog caught "
        "collective operation timeout: WorkNCCL(SeqNum=4242, OpType=ALLREDUCE, NumelIn=1, "
        "NumelOut=1, Timeout(ms)=600000) ran for 600004 milliseconds before timing out.",
        "[rank37]: torch.distributed.DistBackendError: NCCL communicator was aborted on rank 37.",
        "srun: error: nid00{n:04d}: tasks 32-39: Exited with exit code 1",
    ],
    "node": [
        "srun: error: Node failure on nid00{n:04d}",
        "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.",
        "slurmstepd: error: *** STEP {job}.0 ON nid00{n:04d} CANCELLED AT 2025-04-11T16:18:45 "
        "DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***",
    ],
}


def version() -> str:
    digest = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]
    return f"{digest}-{RUNS}-{RUN_MB}-{TRACE_MB}"


def stamp_of(ts: float) -> str:
    return nemolog.log_prefix("x", now=ts)[8:27]


def noise(rng: random.Random, step: int, count: int) -> list[str]:
    ts = stamp_of(T0 + step * 10)
    return [rng.choice(NOISE).format(
        ts=ts, a=rng.uniform(20, 70), b=rng.uniform(60, 75), c=rng.uniform(70, 79),
        r=rng.randrange(128), r2=rng.randrange(128), g=rng.randrange(8), g2=rng.randrange(8),
        n=rng.randrange(16), pid=rng.randrange(1000, 9999), tid=rng.randrange(1000, 9999),
        ch=rng.randrange(32), m=step % 60, s=rng.randrange(60),
        us=rng.randrange(10**6)) for _ in range(count)]


def startup(rng: random.Random, gpus: int) -> list[str]:
    lines = ["+ srun --mpi=pmix --container-image=/lustre/llmb/images/nvidia+nemo+25.04.01.sqsh",
             f"[NeMo W {stamp_of(T0)} nemo_logging:405] Could not import apex: ImportError: No "
             "module named 'apex' (fused kernels from Transformer Engine are used instead)"]
    for r in range(min(gpus, 128)):
        lines += [
            f"{r}: Initializing distributed: GLOBAL_RANK: {r}, MEMBER: {r + 1}/{gpus}",
            f"{r}: [NeMo I {stamp_of(T0)} megatron_init:513] Rank {r} has data parallel group"
            f" : [{r}, {r + 8}, {r + 16}]",
            f"nid00{r // 8:04d}:{2000 + r}:{3000 + r} [{r % 8}] NCCL INFO NCCL_IB_HCA set to "
            "mlx5_0,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_9,mlx5_10,mlx5_11",
            f"{r}: GPU available: True (cuda), used: True",
        ]
    return lines + noise(rng, 0, 400)


def notrace_of(tree: Path) -> Path:
    return tree.with_name(tree.name + "-notrace")


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


def write_run(root: Path, rng: random.Random, cfg: catalog.Config, ref: float, flops: float,
              n: int) -> None:
    old_style = rng.random() < 0.2
    exp = (f"{cfg.workload}_{cfg.model_size}_{cfg.dtype}_{cfg.num_gpus}" if old_style
           else cfg.experiment_name)
    run = root / exp / f"{exp}_{1744400000 + n}"  # repeats of a row: one folder per run
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
    failure = rng.choice(sorted(FAILURES)) if rng.random() < 0.12 else None
    steps = rng.randrange(12, 45) if failure else 50
    ranks = 2 if rng.random() < 0.2 else 1
    colour = rng.random() < 0.3
    lines = startup(rng, cfg.num_gpus)
    per_step = (RUN_MB * (1 << 20) - sum(map(len, lines))) // 50 // 135
    for i in range(steps):
        lines += noise(rng, i, per_step)
        t = ref * (4 if i == 0 else 1.3 if i < 5 else rng.gauss(1.0, 0.005))
        for r in range(ranks):
            tflops = cfg.gbs * flops / t / cfg.num_gpus / 1e12  # what NeMo's callback logs
            text = step_text(form, i, 49, t, tflops, cfg.gbs)
            lines.append(f"\x1b[1m{text}\x1b[0m" if colour else text if r == 0 else f"8: {text}")
    job = 3000000 + n
    if failure:
        lines += noise(rng, steps, 200)
        lines += [x.format(job=job, n=rng.randrange(16)) for x in FAILURES[failure]]
    newline = "\r\n" if rng.random() < 0.1 else "\n"
    (d / f"log-{exp}_{job}_0.out").write_bytes((newline.join(lines) + newline).encode())
    (d / f"sbatch_{exp}_{job}.out").write_text(f"Submitted batch job {job}\n")


def write_trace(root: Path, cfg: catalog.Config) -> None:
    run = root / TRACE_NAME / f"{TRACE_NAME}_1744499999"
    d = run / TRACE_NAME
    d.mkdir(parents=True, exist_ok=True)
    (run / "llmb_manifest.json").write_text(json.dumps({
        "schema": 1, "recipe": cfg.recipe, "workload": cfg.workload, "experiment": TRACE_NAME,
        "model_size": cfg.model_size, "dtype": cfg.dtype, "gpu_type": cfg.gpu_type,
        "num_gpus": cfg.num_gpus, "scaling": cfg.scaling,
        "parallelism": {"gbs": cfg.gbs, "num_layers": cfg.num_layers},
        "options": {"max_steps": 5, "nccl_trace": True}}))
    head = "\n".join(step_text("pipe", i, 4, 9.5, 990.0, cfg.gbs) for i in range(5)) + "\n"
    block = "".join(
        f"nid00{r // 8:04d}:{1000 + r}:{2000 + r} [{r % 8}] NCCL INFO AllReduce: opCount {op:x} "
        f"sendbuff 0x7f3a{op:08x} recvbuff 0x7f3a{op:08x} count 262144 datatype 7 op 0 root 0 "
        f"comm 0x55d0c0a0 [nranks={cfg.num_gpus}] stream 0x55d0c1b0\n"
        for op in range(600) for r in range(16)).encode()
    with open(d / f"log-{TRACE_NAME}_3999999_0.out", "wb") as f:
        f.write(head.encode())
        for _ in range(-(-TRACE_MB * (1 << 20) // len(block))):
            f.write(block)


def generate(tree: Path) -> None:
    rng = random.Random(20261121)
    rows = [(cfg, recipe.reference(cfg.model_size, cfg.dtype, cfg.gpu_type, cfg.num_gpus,
                                   cfg.scaling), recipe.model_flops(cfg.model_size, cfg.num_layers))
            for recipe in catalog.all_recipes() if not recipe.is_bridge  # NeMo runs, FLOPs
            for cfg in recipe.rows() if cfg.num_gpus <= 512]
    rows = [(cfg, ref.step_time, flops) for cfg, ref, flops in rows if ref is not None]
    for n in range(RUNS):
        cfg, ref, flops = rows[(n * 3) % len(rows)]  # every row about twice in 100 runs: repeats
        write_run(tree, rng, cfg, ref, flops, n)
    link_runs(tree, notrace_of(tree))
    write_trace(tree, rows[0][0])


def link_runs(tree: Path, notrace: Path) -> None:
    """notrace: the runs of tree (not its trace), hard links to the same files."""
    for path in sorted(tree.rglob("*")):
        target = notrace / path.relative_to(tree)
        if path.is_dir():
            target.mkdir(parents=True, exist_ok=True)
        else:
            os.link(path, target)


def main(argv: list[str]) -> int:
    base = Path(os.environ.get("LLMB_BENCH_DIR", "/tmp/llmb-bench"))
    tree = Path(argv[0]) if argv else base / "experiments"
    stamp = tree / STAMP
    if stamp.is_file() and stamp.read_text().strip() == version():
        print(f"bench tree: reusing {tree} and {notrace_of(tree)}")
        return 0
    print(f"bench tree: generating {tree} ({RUNS} runs of ~{RUN_MB} MiB, a {TRACE_MB} MiB "
          f"NCCL trace) and {notrace_of(tree)} (the runs alone) ...", flush=True)
    shutil.rmtree(tree, ignore_errors=True)
    shutil.rmtree(notrace_of(tree), ignore_errors=True)
    tree.mkdir(parents=True)
    generate(tree)
    stamp.write_text(version() + "\n")  # last: an interrupted generation is redone
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
