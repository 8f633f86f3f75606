"""Megatron-LM and Megatron-Bridge step lines: the iteration line and its `Step Time` companion.

Megatron's training_log prints, from the last rank, one line per logged iteration (shortened):

    [2026-03-27 23:17:24] iteration        2/      50 | consumed samples:          256 |
        elapsed time per iteration (ms): 4189.6 | learning rate: 6.000000E-05 |
        global batch size:   128 | lm loss: 1.258195E+01 | loss scale: 1.0 | grad norm: 9.961 |
        number of skipped iterations:   0 | number of nan iterations:   0 |

and Megatron-Bridge, from rank 0, just before it:

    Step Time : 4.19s GPU utilization: 1610.2MODEL_TFLOP/s/GPU

Two processes write them, so from some step on the two may come out on one line (`...1610.2
MODEL_TFLOP/s/GPU [2026-03-27 23:17:58] iteration 10/ 50 | ...`). Iterations count from 1:
iteration k is step k - 1 and `k/N` has the final index N - 1, so the published window 11-44
covers iterations 12-45 (llmb.analysis.timing has the rules every family shares). The step time
is `elapsed time per iteration (ms)` (a tenth of a millisecond, the more precise of the two);
TFLOPS per GPU are the companion's: the last `MODEL_TFLOP/s/GPU` between the previous iteration
line's time and this one's (glued or not, with anything between), else the iteration line's own
`throughput per GPU (TFLOP/s/GPU)` (Megatron-LM). Its health counts: `number of nan iterations`
above 0, a `grad norm` or `lm loss` that is nan or inf; `number of skipped iterations` is kept.
Values are read whole or refused, as every reader does (llmb.analysis.stepline.number).
Standard library only: it runs inside the log scan.
"""

from __future__ import annotations

import math
import re

from llmb.analysis.stepline import StepLine, health, number

NEEDLE = b"elapsed time per iteration"  # every iteration line holds it
COMPANION = b"MODEL_TFLOP/s/GPU"
TIME_KEY = "elapsed time per iteration (ms)"
TFLOPS_KEY = "MODEL_TFLOP/s/GPU"
_ITERATION = re.compile(r"iteration\s+(\d{1,18})\s*/\s*(\d{1,18})(?![\d.,_])", re.A)
_FIELD = re.compile(r"(elapsed time per iteration \(ms\)|global batch size|lm loss|grad norm|"
                    r"number of skipped iterations|number of nan iterations|"
                    r"throughput per GPU \(TFLOP/s/GPU\))\s*:\s*([^\s|]*)")
_UTILIZATION = re.compile(r"utilization:\s*(\S*)$")
HEALTH = ("lm loss", "grad norm")
COUNTS = ("number of nan iterations", "number of skipped iterations")


def companion(text: str) -> tuple[float | None, str] | None:
    """The TFLOPS of a `Step Time` line whose text ends just before MODEL_TFLOP/s/GPU:
    (value or None when it is no number, the text as logged); None when it is not one."""
    m = _UTILIZATION.search(text[-200:])
    if m is None:
        return None
    value = number(m.group(1))
    return (value if value is not None and math.isfinite(value) else None), m.group(1)


def parse(line: str, tflops: tuple[float | None, str] | None = None) -> StepLine | None:
    """An iteration line's content as step index k - 1 (tflops: its companion's, from
    `companion`), or None when it names no iteration from 1 on or no time."""
    where = _ITERATION.search(line)
    if where is None or int(where.group(1)) < 1:
        return None
    fields: dict[str, str] = {}
    for key, value in _FIELD.findall(line):
        fields.setdefault(key, value)
    time_text = fields.get(TIME_KEY)
    if time_text is None:
        return None
    ms = number(time_text)
    refused = None
    if tflops is None and (inline := fields.get("throughput per GPU (TFLOP/s/GPU)")):
        value = number(inline)
        tflops = (value if value is not None and math.isfinite(value) else None), inline
    if tflops is not None and tflops[0] is None:
        refused = (TFLOPS_KEY, tflops[1])
    gbs = None
    if (gbs_text := fields.get("global batch size")) is not None:
        value = number(gbs_text)
        if value is not None and value.is_integer() and 0 < value < 1e18:
            gbs = int(value)
        else:
            refused = refused or ("global batch size", gbs_text)
    nonfinite, bad = health(fields, HEALTH)
    refused = refused or bad
    counts = []
    for name in COUNTS:
        value = number(fields.get(name, "0"))
        if value is None or not value.is_integer() or value < 0:
            refused = refused or (name, fields[name])
            value = 0.0
        counts.append(int(min(value, 1e18)))
    return StepLine(int(where.group(1)) - 1, int(where.group(2)) - 1, f"{time_text} ms",
                    ms / 1000 if ms is not None else None,
                    tflops[0] if tflops else None, tflops[1] if tflops else "", gbs, nonfinite,
                    refused, counts[0], counts[1])
