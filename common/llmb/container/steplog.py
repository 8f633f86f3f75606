"""The step lines a training job prints, per framework and rank, as the real job prints them:
the smoke workload's one door to them (llmb.container.nemolog, llmb.container.megatronlog).

- NeMo 2 (the 25.04 recipes): rank 0 prints Lightning's step line.
- Megatron-Bridge: rank 0 prints the `Step Time` line, the last rank the iteration record
  (iterations counted from 1); one process prints both, the Step Time line first.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmb.container import megatronlog, nemolog

FRAMEWORKS = ("nemo", "megatron-bridge")


@dataclass(frozen=True)
class Step:
    """One finished training step: its index from 0 (in this run and overall) and figures."""

    index: int
    last_index: int  # the run's final index (max_steps - 1)
    global_step: int
    lr: float
    gbs: int
    loss: float
    seconds: float
    tflops: float
    consumed: int  # samples consumed once this step is done
    losses: tuple[tuple[str, float], ...] = ()  # after lm loss (MoE, MTP): Megatron-Bridge's


def step_lines(framework: str, rank: int, world_size: int, step: Step) -> list[str]:
    """What `rank` of `world_size` prints for `step` (often nothing)."""
    if framework == "megatron-bridge":
        lines = []
        if rank == 0:
            lines.append(megatronlog.step_time_line(step.seconds, step.tflops))
        if rank == world_size - 1:  # Megatron counts iterations over the whole training
            total = step.global_step - step.index + step.last_index + 1
            lines.append(megatronlog.iteration_line(
                iteration=step.global_step + 1, total=total, consumed=step.consumed,
                seconds=step.seconds, lr=step.lr, gbs=step.gbs, loss=step.loss, grad_norm=1.0,
                losses=step.losses))
        return lines
    if rank != 0:
        return []
    return [nemolog.step_line(
        iteration=step.index, last_iteration=step.last_index, lr=step.lr,
        global_batch_size=step.gbs, global_step=step.global_step, reduced_train_loss=step.loss,
        train_step_timing=step.seconds, tflops_per_gpu=step.tflops,
        consumed_samples=step.consumed)]


def startup_lines(framework: str, world_size: int, seq_length: int, gbs: int,
                  train_iters: int) -> list[str]:
    """What rank 0 prints before the first step that a reader needs (Megatron-Bridge: the world
    size and iteration count; NeMo's own start-up lines are printed by the smoke workload)."""
    if framework != "megatron-bridge":
        return []
    return megatronlog.startup_lines(world_size, world_size, seq_length, gbs, train_iters)
