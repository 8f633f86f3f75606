"""One training step line, parsed: its iteration, final index and the figures it logs; NeMo 2's
two forms, and the value rules every reader applies (llmb.analysis.megatron_steps reads
Megatron's lines into the same StepLine).

The two forms NeMo prints (llmb.analysis.timing has the rules for iterations and the final
index):

    Training epoch 0, iteration 11/49 | lr: 1.5e-05 | global_batch_size: 128 | global_step: 11 |
        reduced_train_loss: 11.96 | train_step_timing in s: 12.39 | TFLOPS_per_GPU: 610.2 |
        consumed_samples: 1536
    Epoch 0: : 100%|###| 100/100 [07:57<00:00, reduced_train_loss=7.310, global_step=99.00,
        consumed_samples=25600.0, train_step_timing in s=3.590]

The step index is the line's `global_step` where it has one, else its iteration: from the
second data epoch on NeMo's `iteration` starts again at 0 while `global_step` goes on (`Training
epoch 1, iteration 5/99 | ... | global_step: 45 | ...`: step 45, not a restart). The progress
bar keeps its own count (`{done}/{total}`: step done - 1): its `global_step=` is printed one
apart between NeMo versions (99.00 at 100/100 in NeMo 2, 50.0 at 50/50 in NeMo 1).

Where one line gives the step time twice (a progress bar redrawn and a DLLogger record printed
after it without a line end: `..., train_step_timing in s=3.590]DLL 2026-03-27 23:17:24.123456 -
99 train_step_timing in s : 3.5901234 ...`), the value with the most significant digits is read:
the bar's three decimals are 0.3% off the record's full value.

A value is read whole or refused: it runs from after `key: ` / `key=` to the next blank, `|`
or `]` (a `,` ending it is the progress bar's separator), and must then be a plain decimal
number (`610.2`, `1.5e-05`, `nan`, `inf`). `1_000`, `9,31`, `0x10` or `١٢` are refused, never
read as 1, 9, 0 or 12: the step's time does not count and the run says which value it refused.
Standard library only: it runs inside the log scan.
"""

from __future__ import annotations

import math
import re
from typing import NamedTuple

from llmb.shared.values import ascii_digits

# The keys a step line holds, each followed by its raw value; read from the line in lower case
# (first occurrence wins).
_FIELD = re.compile(r"(train_step_timing in s|tflops_per_gpu|global_batch_size|global_step|"
                    r"reduced_train_loss|grad[_ ]norm)\s*[:=]\s*([^\s|\]]*)")
_ITERATION = re.compile(r"iteration\s+(\d{1,18})\s*/\s*(\d{1,18})(?![\d.,_])", re.A)
_PROGRESS = re.compile(r"(\d{1,18})\s*/\s*(\d{1,18})\s*\[", re.A)
TIME, TFLOPS, GBS, GLOBAL_STEP = ("train_step_timing in s", "tflops_per_gpu", "global_batch_size",
                                  "global_step")
HEALTH = ("reduced_train_loss", "grad_norm")
SHOWN_MAX = 24  # characters of a refused or absurd value kept for the reason


class StepLine(NamedTuple):
    """What one step line says. `time` is None when the logged time is not a number (its text
    is `time_text`); `refused` names the first other value that is not one (field, text)."""

    iteration: int
    final: int | None
    time_text: str
    time: float | None
    tflops: float | None = None
    tflops_text: str = ""
    gbs: int | None = None
    nonfinite: tuple[str, str] | None = None  # (field, text): a nan/inf loss or grad norm
    refused: tuple[str, str] | None = None  # (field, text)
    nan_iterations: int = 0  # Megatron's `number of nan iterations`
    skipped_iterations: int = 0  # Megatron's `number of skipped iterations`


def short(text: str) -> str:
    """A logged value as a reason shows it: `1000...0 (309 characters)` for absurd ones."""
    return text if len(text) <= SHOWN_MAX else f"{text[:SHOWN_MAX - 3]}... ({len(text)} characters)"


def number(text: str) -> float | None:
    """The value of a whole decimal number (nan and inf included), else None.

    float() reads exactly these from ASCII text without blanks around, except `1_000`; what it
    reads besides (a `_`, a digit other than ASCII's, blanks around) is no whole number."""
    text = text.removesuffix(",")
    if not text.isascii() or "_" in text or text.strip() != text:
        return None
    try:
        return float(text)
    except ValueError:
        return None


def health(fields: dict[str, str], names: tuple[str, ...]
           ) -> tuple[tuple[str, str] | None, tuple[str, str] | None]:
    """A step's health fields (its loss, its gradient norm): the first that is not finite
    (nan, inf) and the first that is not a number, each as (name, text as printed)."""
    nonfinite = refused = None
    for name in names:
        text = fields.get(name)
        if text is None:
            continue
        value = number(text)
        if value is None:
            refused = refused or (name, text)
        elif not math.isfinite(value) and nonfinite is None:
            nonfinite = (name, text)
    return nonfinite, refused


def digits(text: str) -> int:
    """How many significant digits a number as printed holds (`3.590`: 4, `3.5901234`: 8,
    `0.0042`: 2); 0 for what is no number."""
    if number(text) is None:
        return 0
    mantissa = text.lower().partition("e")[0].lstrip("+-").replace(".", "")
    return len(mantissa.lstrip("0")) if ascii_digits(mantissa) else 0


def _fields(line: str) -> dict[str, str]:
    """The line's fields, the first occurrence of each; the step time's most precise one (a
    progress bar's `=3.590` and a DLL record's ` : 3.5901234` on one line: the record's)."""
    found: dict[str, str] = {}
    for key, value in _FIELD.findall(line.lower()):
        value = value.removesuffix(",")
        if key == TIME and key in found and digits(value) > digits(found[key]):
            found[key] = value
        found.setdefault(key.replace(" ", "_") if key.startswith("grad") else key, value)
    return found


def _where(line: str, fields: dict[str, str]) -> tuple[int, int | None] | None:
    """(index, final index or None) of the step, or None when the line names no iteration."""
    step = number(fields.get(GLOBAL_STEP, ""))
    if step is None or not (math.isfinite(step) and 0 <= step < 1e18):
        step = None
    if m := _ITERATION.search(line):  # global_step goes on where an epoch starts iteration over
        index = int(step) if step is not None and step.is_integer() else int(m.group(1))
        return index, int(m.group(2))
    if m := _PROGRESS.search(line):  # {done}/{total}: the step just done has index done - 1
        return int(m.group(1)) - 1, int(m.group(2)) - 1
    return None if step is None else (int(step), None)


def parse(line: str) -> StepLine | None:
    """The step line's content, or None when it holds no step time or no iteration."""
    fields = _fields(line)
    time_text = fields.get(TIME)
    if time_text is None:
        return None
    where = _where(line, fields)
    if where is None or where[0] < 0:
        return None
    refused = None
    tflops_text = fields.get(TFLOPS, "")
    tflops = number(tflops_text) if tflops_text else None
    if tflops_text and (tflops is None or not math.isfinite(tflops)):
        refused, tflops = ("TFLOPS_per_GPU", tflops_text), None
    gbs = None
    if (gbs_text := fields.get(GBS)) is not None:
        value = number(gbs_text)  # a count, perhaps printed as a float (128.0)
        if value is not None and value.is_integer() and 0 < value < 1e18:
            gbs = int(value)
        else:
            refused = refused or (GBS, gbs_text)
    nonfinite, bad = health(fields, HEALTH)
    refused = refused or bad
    return StepLine(where[0], where[1], time_text, number(time_text), tflops, tflops_text, gbs,
                    nonfinite, refused)
