"""The NeMo log lines llmb prints and reads, formatted in one place.

NeMo's step line prints a whole-number metric as an integer and any other float with Python's
``{:.4}`` (4 significant digits; scientific from 1000 up: ``11.96``, ``1.5e-05``, ``1.134e+03``);
checkpoint times are seconds with 3 decimals.
The smoke workload prints these lines; the analyzer reads the same text.
"""

from __future__ import annotations

import time

# Under the job dir (<run dir>/<exp>, the manifest's job_dir): the container's working directory
# is <job dir>/code, and NeMo writes nemo_experiments/ there.
NEMO_EXPERIMENTS_DIR = "code/nemo_experiments"
CHECKPOINTS_DIR = f"{NEMO_EXPERIMENTS_DIR}/default/checkpoints"


def g4(value: float) -> str:
    """A metric as NeMo logs it: ``610.2``, ``1.134e+03``, ``4.491e-06``; ``6.0`` as ``6``."""
    if float(value).is_integer():
        return str(int(value))
    return f"{value:.4}"


def step_line(
    *,
    iteration: int,
    last_iteration: int,
    lr: float,
    global_batch_size: int,
    global_step: int,
    reduced_train_loss: float,
    train_step_timing: float,
    tflops_per_gpu: float,
    consumed_samples: int,
    epoch: int = 0,
) -> str:
    """``Training epoch 0, iteration 11/49 | lr: ... | consumed_samples: 1536``."""
    return (
        f"Training epoch {epoch}, iteration {iteration}/{last_iteration}"
        f" | lr: {g4(lr)}"
        f" | global_batch_size: {global_batch_size}"
        f" | global_step: {global_step}"
        f" | reduced_train_loss: {g4(reduced_train_loss)}"
        f" | train_step_timing in s: {g4(train_step_timing)}"
        f" | TFLOPS_per_GPU: {g4(tflops_per_gpu)}"
        f" | consumed_samples: {consumed_samples}"
    )


def checkpoint_save_line(rank: int, iteration: int, start_time: float, duration: float) -> str:
    return (
        f"Global Checkpoint Save : Rank: {rank} : Iteration: {iteration}"
        f" : Start time: {start_time:.3f}s : Save duration: {duration:.3f}s"
    )


def checkpoint_load_line(rank: int, start_time: float, duration: float) -> str:
    return (
        f"Global Checkpoint Load : Rank : {rank} : Start time : {start_time:.3f}s"
        f" : Time spent in load_checkpoint: {duration:.3f}s"
    )


def member_line(rank: int, world_size: int) -> str:
    """Lightning's line as each rank joins the process group (the analyzer reads the world size
    from it): ``Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/16``."""
    return f"Initializing distributed: GLOBAL_RANK: {rank}, MEMBER: {rank + 1}/{world_size}"


def registered_line(world_size: int) -> str:
    """Lightning's line once every rank joined (rank 0 prints it)."""
    return f"All distributed processes registered. Starting with {world_size} processes"


def checkpoint_name(consumed_samples: int) -> str:
    """NeMo's checkpoint folder: ``default--None=0.0000-epoch=0-consumed_samples=12800.0``."""
    return f"default--None=0.0000-epoch=0-consumed_samples={float(consumed_samples)}"


def log_prefix(where: str, level: str = "I", now: float | None = None) -> str:
    """``[NeMo I 2025-04-11 14:48:45 nemo_logging:393]`` (local time, like NeMo's logger)."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(time.time() if now is None else now))
    return f"[NeMo {level} {stamp} {where}]"


def log_line(message: str, where: str, level: str = "I", now: float | None = None) -> str:
    return f"{log_prefix(where, level, now)} {message}"
