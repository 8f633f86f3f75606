"""The Megatron-Bridge log lines llmb prints, formatted in one place (the smoke workload of a
Megatron-Bridge recipe prints them; llmb.analysis.megatron_steps reads the same text).

Megatron-Bridge's training_log prints, per logged iteration, from the last rank:

     [2026-11-28 10:15:02] iteration        2/      50 | consumed samples:          256 |
        elapsed time per iteration (ms): 4189.6 | learning rate: 6.000000E-05 |
        global batch size:   128 | lm loss: 1.258195E+01 | loss scale: 1.0 | grad norm: 9.961 |
        number of skipped iterations:   0 | number of nan iterations:   0 |

(one line; iterations count from 1, `k/N` with N the run's iteration count; a mixture-of-experts
or multi-token-prediction model's losses follow `lm loss`, e.g. `load_balancing_loss:
1.002000E+00 | mtp_1 loss: 6.210000E+00 |`), and from rank 0,
just before it, `Step Time : 4.19s GPU utilization: 1610.2MODEL_TFLOP/s/GPU`. A log of rank 0
alone holds only the Step Time lines; one of the last rank alone only the iteration lines.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence


def iteration_line(*, iteration: int, total: int, consumed: int, seconds: float, lr: float,
                   gbs: int, loss: float, grad_norm: float, when: float | None = None,
                   losses: Sequence[tuple[str, float]] = ()) -> str:
    """The last rank's record of iteration `iteration` (from 1) of `total`; `losses`: the
    model's other losses by name, printed after `lm loss` as Megatron-Bridge prints them (a
    negative one left out)."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(when))
    others = "".join(f" {name}: {value:.6E} |" for name, value in losses if value >= 0.0)
    return (f" [{stamp}] iteration {iteration:8d}/{total:8d} | consumed samples: {consumed:12d} | "
            f"elapsed time per iteration (ms): {seconds * 1000:.1f} | learning rate: {lr:.6E} | "
            f"global batch size: {gbs:5d} | lm loss: {loss:.6E} |{others} loss scale: {1.0:.1f} | "
            f"grad norm: {grad_norm:.3f} | number of skipped iterations: {0:3d} | "
            f"number of nan iterations: {0:3d} |")


def step_time_line(seconds: float, tflops: float) -> str:
    """Rank 0's companion of an iteration: its seconds (2 decimals) and model TFLOPS per GPU."""
    return f"Step Time : {seconds:.2f}s GPU utilization: {tflops:.1f}MODEL_TFLOP/s/GPU"


def startup_lines(world_size: int, data_parallel: int, seq_length: int, gbs: int,
                  train_iters: int, mbs: int = 1,
                  layout: Mapping[str, int] | None = None) -> list[str]:
    """What rank 0 prints before the first step, shortened to what a reader takes from it: the
    launcher's world sizes, the configuration summary of the pinned Megatron-Bridge (its model
    section lists only values other than Megatron Core's defaults: `layout`, e.g.
    {"tensor_model_parallel_size": 2}; its train and dataset sections the batch sizes, the
    iteration count and the sequence length; llmb.analysis.bridgelayout reads it), the set-up
    lines."""
    rule, thin = "=" * 70, "-" * 70
    model = [f"  {name}: {value}  (Mcore default: 1)" for name, value in (layout or {}).items()]
    return [
        f"  global_world_sizes=[{', '.join([str(world_size)] * min(world_size, 8))}]",
        "> initializing torch distributed ...",
        "", rule, "Configuration Summary (Non-Default Values vs Megatron Core)", rule,
        "", "[model] Non-default values (vs Mcore TransformerConfig):", *model,
        "", thin, "Other Configuration Values:", thin,
        "", "[train]:", f"  global_batch_size: {gbs}", f"  micro_batch_size: {mbs}",
        f"  train_iters: {train_iters}",
        "", "[dataset]:", f"  sequence_length: {seq_length}",
        "", rule,
        f"data_parallel_size: {data_parallel}",
        "done with setup ...",
        "training ...",
    ]
