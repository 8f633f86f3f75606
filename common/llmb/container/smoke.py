"""The smoke workload (SMOKE_TEST=true): a tiny, real PyTorch training run in place of NeMo.

Every task of the job trains a decoder-only transformer shaped after the recipe's family at a
tiny size (synthetic tokens, real forward/backward/AdamW steps, data parallel over gloo on the
CPU) and prints the step lines the analyzer reads, as the recipe's framework prints them
(llmb.container.steplog: NeMo's from rank 0; Megatron-Bridge's Step Time from rank 0 and its
iteration records from the last rank), with measured step times and TFLOPS per GPU from
`llmb.recipes.perf` for the tiny shape; plus NeMo's checkpoint save/load lines around a real
checkpoint when those options are on.

Ranks and rendezvous (first match wins):
- torchrun (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT): ``env://``.
- Slurm srun (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_JOB_ID): a ``file://`` rendezvous
  in the run directory, which is on storage every node shares (the job's logs go there), keyed
  by job, step and SLURM_RESTART_COUNT so a requeued job never meets a stale file. It needs no
  resolvable host name and no free port.
- anything else: one process, no process group.
LLMB_SMOKE_INIT_METHOD (e.g. ``tcp://host:port``) overrides the rendezvous of the Slurm case;
LLMB_SMOKE_INIT_TIMEOUT_S (default 120) bounds the wait for the other tasks.

torch is imported inside the functions that need it, so this module imports without it.
Run by hand: ``python -m llmb.container.smoke MANIFEST`` (also under ``torchrun``).
"""

from __future__ import annotations

import contextlib
import datetime
import inspect
import json
import math
import os
import sys
import time
import traceback
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from llmb import manifest as run_manifest
from llmb.container import nemolog
from llmb.container.smokemodel import (
    TINY_SEQ_LENGTH,
    TINY_SHAPES,
    AdamW,
    average_gradients,
    build_model,
    model_flops,
    same_weights,
    synthetic_batch,
    training_loss,
)
from llmb.container.steplog import FRAMEWORKS, Step, startup_lines, step_lines
from llmb.manifest import Manifest, ManifestError, Options
from llmb.recipes import perf
from llmb.shared.errors import LlmbError

if TYPE_CHECKING:
    from torch.nn import Module

MICRO_BATCH_SIZE = 1  # gradient accumulation 1: global batch = micro batch x world size
PEAK_LR = 1e-3
WARMUP_STEPS = 10
SEED = 1234
CHECKPOINT_FORMAT = "llmb-smoke-1"
CHECKPOINT_FILE = "__0_0.distcp"  # rank 0 writes the whole (data-parallel) state
INIT_TIMEOUT_S = 120.0


class SmokeError(LlmbError):
    """A failure the user can act on; its message is the one line printed."""


@dataclass(frozen=True)
class Ranks:
    rank: int
    world_size: int
    local_rank: int
    launcher: str  # torchrun | slurm | single
    init_method: str | None  # None: one process, no process group


def _int_env(env: Mapping[str, str], name: str) -> int:
    value = env[name]
    try:
        return int(value)
    except ValueError:
        raise SmokeError(f"{name}={value} is not an integer") from None


def rendezvous_file(job_dir: Path, env: Mapping[str, str]) -> Path:
    """The file rendezvous of a Slurm job step: one per job, step and restart."""
    key = "-".join(
        (
            env.get("SLURM_JOB_ID", "nojob"),
            env.get("SLURM_STEP_ID", "0"),
            "r" + env.get("SLURM_RESTART_COUNT", "0"),
        )
    )
    return job_dir / ".smoke_rendezvous" / key


def detect_ranks(env: Mapping[str, str], job_dir: Path) -> Ranks:
    if "RANK" in env and "WORLD_SIZE" in env:
        missing = [name for name in ("MASTER_ADDR", "MASTER_PORT") if not env.get(name)]
        if missing:
            raise SmokeError(
                f"RANK and WORLD_SIZE are set but {' and '.join(missing)} not; "
                "launch with torchrun, which sets all of them"
            )
        return Ranks(
            _int_env(env, "RANK"),
            _int_env(env, "WORLD_SIZE"),
            _int_env(env, "LOCAL_RANK") if "LOCAL_RANK" in env else 0,
            "torchrun",
            "env://",
        )
    if "SLURM_PROCID" in env and "SLURM_NTASKS" in env:
        init = env.get("LLMB_SMOKE_INIT_METHOD") or (
            "file://" + str(rendezvous_file(job_dir, env))
        )
        return Ranks(
            _int_env(env, "SLURM_PROCID"),
            _int_env(env, "SLURM_NTASKS"),
            _int_env(env, "SLURM_LOCALID") if "SLURM_LOCALID" in env else 0,
            "slurm",
            init,
        )
    return Ranks(0, 1, 0, "single", None)


def learning_rate(step: int, total_steps: int) -> float:
    """Linear warm-up, then cosine decay to a tenth of the peak (NeMo's recipes' shape)."""
    warmup = max(1, min(WARMUP_STEPS, total_steps // 5))
    if step < warmup:
        return PEAK_LR * (step + 1) / warmup
    progress = (step - warmup) / max(1, total_steps - warmup)
    return PEAK_LR * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


class _Log:
    """Rank 0 prints, flushed line by line (the analyzer reads logs while they grow)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    def raw(self, line: str) -> None:
        if self.enabled:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()

    def info(self, message: str, level: str = "I") -> None:
        frame = inspect.currentframe()
        line = frame.f_back.f_lineno if frame and frame.f_back else 0
        self.raw(nemolog.log_line(message, f"smoke:{line}", level))


def checkpoint_dir(job_dir: Path, consumed_samples: int) -> Path:
    return job_dir / nemolog.CHECKPOINTS_DIR / nemolog.checkpoint_name(consumed_samples)


def _identity(family: str, shape: Mapping[str, int], seq_length: int) -> dict[str, object]:
    return {"family": family, "shape": dict(shape), "seq_length": seq_length}


def save_checkpoint(path: Path, model: Module, optimizer: AdamW, identity: dict[str, object],
                    step: int, consumed: int) -> None:
    """Write <path>/weights/__0_0.distcp (model + optimizer) and weights/metadata.json."""
    import torch

    weights = path / "weights"
    weights.mkdir(parents=True, exist_ok=True)
    state = {
        "format": CHECKPOINT_FORMAT,
        **identity,
        "global_step": step,
        "consumed_samples": consumed,
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
    }
    partial = weights / (CHECKPOINT_FILE + ".partial")
    torch.save(state, partial)
    os.replace(partial, weights / CHECKPOINT_FILE)
    metadata = {
        "format": CHECKPOINT_FORMAT,
        **identity,
        "global_step": step,
        "consumed_samples": consumed,
        "files": [CHECKPOINT_FILE],
        "torch": torch.__version__,
    }
    (weights / "metadata.json").write_text(json.dumps(metadata, indent=2) + "\n")


def load_checkpoint(
    path: Path, model: Module, optimizer: AdamW, identity: dict[str, object]
) -> tuple[int, int]:
    """Restore model and optimizer from a smoke checkpoint; (global_step, consumed_samples)."""
    import torch

    file = path / "weights" / CHECKPOINT_FILE
    where = f"LOAD_CHECKPOINT_PATH={path}"
    if not file.is_file():
        raise SmokeError(
            f"{where} has no weights/{CHECKPOINT_FILE}; with SMOKE_TEST=true load a checkpoint "
            "saved by a smoke run (SMOKE_TEST=true ENABLE_CHECKPOINT=true)"
        )
    try:
        state = torch.load(file, map_location="cpu", weights_only=True)
    except Exception as err:
        raise SmokeError(f"{where}: cannot read weights/{CHECKPOINT_FILE} ({err})") from None
    if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
        raise SmokeError(f"{where} is not a smoke-workload checkpoint ({CHECKPOINT_FORMAT})")
    if state.get("family") != identity["family"]:
        raise SmokeError(
            f"{where} holds a tiny {state.get('family')} model and this run trains a tiny "
            f"{identity['family']} one; load a checkpoint saved by this recipe's smoke run"
        )
    if any(state.get(key) != value for key, value in identity.items()):
        raise SmokeError(
            f"{where} was saved with another tiny {identity['family']} shape or sequence length "
            f"(an older llmb?); save a new one with SMOKE_TEST=true ENABLE_CHECKPOINT=true"
        )
    try:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
    except (KeyError, RuntimeError, ValueError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise SmokeError(f"{where}: the saved state does not fit the model ({first})") from None
    return int(state["global_step"]), int(state["consumed_samples"])


def _init_timeout(env: Mapping[str, str]) -> float:
    value = env.get("LLMB_SMOKE_INIT_TIMEOUT_S", "")
    if not value:
        return INIT_TIMEOUT_S
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if seconds <= 0:
        raise SmokeError(f"LLMB_SMOKE_INIT_TIMEOUT_S={value} is not a positive number of seconds")
    return seconds


def _init_process_group(ranks: Ranks, timeout: float, job_dir: Path) -> None:
    import torch.distributed as dist

    if ranks.init_method and ranks.init_method.startswith("file://"):
        Path(ranks.init_method[len("file://") :]).parent.mkdir(parents=True, exist_ok=True)
    try:
        dist.init_process_group(
            "gloo",
            init_method=ranks.init_method,
            rank=ranks.rank,
            world_size=ranks.world_size,
            timeout=datetime.timedelta(seconds=timeout),
        )
    except Exception as err:
        detail = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        hint = (
            f"; every task must start and {job_dir} must be on storage all nodes share"
            if ranks.launcher == "slurm"
            else ""
        )
        raise SmokeError(
            f"smoke workload rank {ranks.rank} of {ranks.world_size} could not join the others "
            f"at {ranks.init_method} within {timeout:g} s ({detail}){hint}"
        ) from None


def _manifest_fields(manifest: Manifest) -> tuple[str, Path, Options]:
    """The family, job directory and options, when this workload can run them."""
    family = manifest["family"]
    if family not in TINY_SHAPES:
        raise SmokeError(
            f"manifest family={family} has no smoke model; known: {', '.join(TINY_SHAPES)}"
        )
    job_dir = Path(manifest["job_dir"])
    if not job_dir.is_absolute():
        raise SmokeError(f"manifest job_dir={manifest['job_dir']} is not an absolute path")
    experiment = manifest["experiment"]
    if not experiment or "/" in experiment:
        raise SmokeError(f"manifest experiment={experiment} is not an experiment name")
    options = manifest["options"]
    if (steps := options["max_steps"]) < 1:
        raise SmokeError(f"manifest options.max_steps={steps} is not a positive integer")
    return family, job_dir, options


def _train(manifest: Manifest, ranks: Ranks, timeout: float) -> int:
    family, job_dir, options = _manifest_fields(manifest)
    framework = manifest.get("framework", "nemo")
    if framework not in FRAMEWORKS:
        raise SmokeError(f"manifest framework={framework} is not one llmb runs; known: "
                         f"{', '.join(FRAMEWORKS)}")
    max_steps = options["max_steps"]
    shape, seq = TINY_SHAPES[family], TINY_SEQ_LENGTH
    torch = _torch()
    log = _Log(ranks.rank == 0)
    _announce(log, manifest, family, ranks)
    if ranks.world_size > 1:
        began = time.perf_counter()
        # What Lightning prints as a NeMo job starts: the analyzer checks the world size it
        # states against the GPU count of the run's manifest.
        log.raw(nemolog.member_line(ranks.rank, ranks.world_size))
        _init_process_group(ranks, timeout, job_dir)
        log.raw(nemolog.registered_line(ranks.world_size))
        log.info(f"Smoke workload: all {ranks.world_size} ranks joined in "
                 f"{time.perf_counter() - began:.1f} s")
    log.info(f"Experiments will be logged at {job_dir / nemolog.NEMO_EXPERIMENTS_DIR}")

    torch.manual_seed(SEED)  # the same initial weights on every rank
    model = build_model(family, shape, seq)
    optimizer = AdamW(model.parameters(), lr=PEAK_LR, betas=(0.9, 0.95), weight_decay=0.1)
    params = sum(p.numel() for p in model.parameters())
    log.info(
        f"Smoke workload: {family} tiny model {', '.join(f'{k}={v}' for k, v in shape.items())};"
        f" seq_length={seq}, micro_batch_size={MICRO_BATCH_SIZE}, global_batch_size="
        f"{MICRO_BATCH_SIZE * ranks.world_size}, max_steps={max_steps}; {params} parameters;"
        f" {model_flops(family, shape, seq):.4g} model FLOPs per sample"
    )
    _announce_options(log, options)

    identity = _identity(family, shape, seq)
    step0, consumed = 0, 0
    load_path = options["checkpoint_load_path"]
    if load_path:
        start = time.time()
        step0, consumed = load_checkpoint(Path(load_path), model, optimizer, identity)
        log.info(nemolog.checkpoint_load_line(ranks.rank, start, time.time() - start))
    for line in startup_lines(framework, ranks.world_size, seq,
                              MICRO_BATCH_SIZE * ranks.world_size, step0 + max_steps):
        log.raw(line)
    consumed = _loop(framework, model, optimizer, family, ranks, step0, max_steps, consumed)
    if options["checkpoint_save"]:
        _save(log, job_dir, model, optimizer, identity, ranks, step0 + max_steps, consumed)
    _finish(ranks)
    log.info(f"Smoke workload done: {max_steps} steps on {ranks.world_size} ranks")
    return 0


def _torch() -> ModuleType:
    """torch, set up for a task that shares its node's few cores with the node's other tasks."""
    warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
    # One thread per task (as torchrun sets it): OpenMP threads created at import time would
    # spin against each other.
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)
    with contextlib.suppress(RuntimeError):  # set already: a second run in one interpreter
        torch.set_num_interop_threads(1)
    return torch


def _announce(log: _Log, manifest: Manifest, family: str, ranks: Ranks) -> None:
    log.info(
        f"Smoke workload (SMOKE_TEST=true): NOT the {manifest['workload']} "
        f"{manifest['model_size']}"
        f" benchmark; a tiny {family}-shaped model trains on the CPU so that the launch, the"
        " logs and the analysis can be checked without GPUs. Its step times and TFLOPS are not"
        " comparable with any published reference."
    )
    log.info(
        f"Smoke workload: world size {ranks.world_size} (data parallel over gloo, ranks from"
        f" {ranks.launcher}, rendezvous {ranks.init_method})"
        if ranks.world_size > 1
        else "Smoke workload: world size 1 (one process, no process group)"
    )


def _announce_options(log: _Log, options: Options) -> None:
    if options["profile"]:
        log.info(
            f"Profiling steps {options['profile_start_step']}-"
            f"{options['profile_stop_step']}: nsys wraps this process from outside; the"
            " smoke workload has no CUDA work to capture"
        )
    if options["nccl_trace"]:
        log.info(
            "NCCL trace: the launcher set NCCL_DEBUG; the smoke workload talks gloo on the CPU,"
            " so there is no NCCL traffic to trace"
        )


def _loop(framework: str, model: Module, optimizer: AdamW, family: str, ranks: Ranks,
          step0: int, max_steps: int, consumed: int) -> int:
    """Train max_steps steps from step0, printing the framework's step lines for each
    (llmb.container.steplog); the samples consumed at the end."""
    import torch
    import torch.distributed as dist

    shape, seq = TINY_SHAPES[family], TINY_SEQ_LENGTH
    distributed = ranks.world_size > 1
    gbs = MICRO_BATCH_SIZE * ranks.world_size
    flops = model_flops(family, shape, seq)
    if distributed:
        same_weights(model)
    generator = torch.Generator().manual_seed(SEED + 1 + ranks.rank + 7919 * step0)
    total_steps = step0 + max_steps
    for i in range(max_steps):
        step = step0 + i
        lr = learning_rate(step, total_steps)
        began = time.perf_counter()
        for group in optimizer.param_groups:
            group["lr"] = lr
        inputs, labels = synthetic_batch(generator, shape["vocab_size"], seq, MICRO_BATCH_SIZE)
        optimizer.zero_grad(set_to_none=True)
        loss, figures = training_loss(family, model, model(inputs), labels)
        loss.backward()
        if distributed:
            average_gradients(model, ranks.world_size)
        optimizer.step()
        reduced = torch.stack([f.detach() for f in figures.values()])  # lm loss first
        if distributed:
            dist.all_reduce(reduced)
            reduced /= ranks.world_size
        elapsed = time.perf_counter() - began
        consumed += gbs
        done = Step(index=i, last_index=max_steps - 1, global_step=step, lr=lr, gbs=gbs,
                    loss=float(reduced[0]), seconds=elapsed, consumed=consumed,
                    tflops=perf.tflops_per_gpu(gbs, flops, elapsed, ranks.world_size),
                    losses=tuple(zip(list(figures)[1:], reduced[1:].tolist(), strict=True)))
        for line in step_lines(framework, ranks.rank, ranks.world_size, done):
            print(line, flush=True)
    return consumed


def _save(log: _Log, job_dir: Path, model: Module, optimizer: AdamW, identity: dict[str, object],
          ranks: Ranks, total_steps: int, consumed: int) -> None:
    """Rank 0 saves the checkpoint while the others wait; every rank prints NeMo's line."""
    import torch.distributed as dist

    path = checkpoint_dir(job_dir, consumed)
    distributed = ranks.world_size > 1
    if distributed:
        dist.barrier()
    start = time.time()
    if ranks.rank == 0:
        save_checkpoint(path, model, optimizer, identity, total_steps, consumed)
    if distributed:
        dist.barrier()
    log.info(nemolog.checkpoint_save_line(ranks.rank, total_steps, start, time.time() - start))
    log.info(f"Smoke checkpoint saved: {path}")


def _finish(ranks: Ranks) -> None:
    """Leave the process group together. A file rendezvous is removed by torch's FileStore
    itself, by the last rank to leave; removing it from rank 0 raced with the others' leaving
    (a rank leaving after the removal wrote the file anew, and it stayed)."""
    if ranks.world_size <= 1:
        return
    import torch.distributed as dist

    dist.barrier()
    dist.destroy_process_group()


def run(manifest: Manifest) -> int:
    """Train the smoke workload for manifest["options"]["max_steps"]; the exit code."""
    rank = "?"
    try:
        job_dir = Path(manifest["job_dir"] or "/nonexistent")
        ranks = detect_ranks(os.environ, job_dir)
        rank = str(ranks.rank)
        return _train(manifest, ranks, _init_timeout(os.environ))
    except SmokeError as err:
        print(f"llmb: {err}", file=sys.stderr, flush=True)
        return 2
    except Exception as err:
        if os.environ.get("LLMB_DEBUG"):
            traceback.print_exc()
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        print(f"llmb: smoke workload failed on rank {rank}: {type(err).__name__}: {first}",
              file=sys.stderr, flush=True)
        return 1


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1 or args[0].startswith("-"):
        print("usage: python -m llmb.container.smoke MANIFEST (llmb_manifest.json)",
              file=sys.stderr)
        return 2
    try:
        manifest = run_manifest.read(args[0])
    except ManifestError as err:
        print(f"llmb: {err}", file=sys.stderr)
        return 2
    return run(manifest)


if __name__ == "__main__":
    sys.exit(main())
