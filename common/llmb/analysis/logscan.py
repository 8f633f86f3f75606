"""What one log says, whatever family printed it: its steps by index, and the facts around them.

The readers of the log's family (llmb.analysis.families: llmb.analysis.stepline for NeMo 2,
llmb.analysis.megatron_steps for Megatron-LM and Megatron-Bridge) turn a step line into a
StepLine whose iteration is the 0-based step index and whose final is the index of the run's
last step; LogScan keeps them, by the rules llmb.analysis.timing describes (last occurrence
wins, a drop of more than RESTART_DROP is a restart, a time that is not a plausible number of
seconds never counts), and what the log states besides: the world size and the start-up's
data-parallel size and sequence length, the global batch size, the largest TFLOPS, checkpoint
durations, a value that is not a number, Megatron's nan and skipped iterations, what ended the
run (llmb.analysis.failures), and, for a file without a step line, whether it is another tool's
output. Standard library only.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import islice, pairwise, repeat
from typing import TYPE_CHECKING, NamedTuple, cast

from llmb.analysis import stepline
from llmb.analysis.failures import Findings, classify
from llmb.analysis.family import Family, clean
from llmb.analysis.family_nemo import NEMO

if TYPE_CHECKING:
    from llmb.analysis.bulkform import Rows

# A checkpoint's duration in s: at most 18 digits before the point, 30 after it and 3 in the
# exponent (no checkpoint takes 1e18 s), so that a line of digits costs no more than its length.
_NUM = r"([-+]?(?:\d{1,18}(?:\.\d{0,30})?|\.\d{1,30})(?:[eE][-+]?\d{1,3})?)(?![\d.,_])"
# srun --label's `12: ` and a NeMo logger prefix, left out of a line a reason quotes
_PREFIX = re.compile(r"^\s*(?:\d{1,9}:\s)?(?:\[NeMo [A-Z] [^\]]*\]\s*)?")
# The start-up lines that state the world size: Lightning's two, torchrun's, Megatron-LM's.
WORLD_NEEDLES = (b"MEMBER:", b"Starting with", b"global_world_sizes=", b"using world size:")
_WORLD = (re.compile(r"MEMBER:\s*\d{1,9}\s*/\s*(\d{1,9})(?!\d)", re.A),
          re.compile(r"distributed processes registered\. Starting with (\d{1,9}) processes",
                     re.A),
          re.compile(r"global_world_sizes=\[(\d{1,9})[,\]]", re.A),
          re.compile(r"using world size:\s*(\d{1,9})(?!\d)", re.A))
# The start-up's configuration, as YAML (`seq_length: 8192`; Megatron-Bridge's summary prints
# its dataset's `sequence_length: 8192`), an argument dump (`seq_length ........ 8192`) or a
# repr (`seq_length=8192`): the sequence length and data-parallel size.
FACT_NEEDLES = (b"seq_length", b"sequence_length", b"data_parallel_size", b"data-parallel size")
_FACT = re.compile(r"(?<![\w-])(seq_length|sequence_length|data_parallel_size|"
                   r"data-parallel size)"
                   r"(?:\s*[:=]\s*|\s+\.+\s+)(\d{1,9})(?![\d.])", re.A)
# An iteration this much below the previous one starts the run over (requeue, resume); smaller
# drops are ranks printing the same steps out of order.
RESTART_DROP = 2
# A step time outside this range is not a measurement: no step trains in under a microsecond,
# no job runs a week per step.
MIN_STEP_SECONDS, MAX_STEP_SECONDS = 1e-6, 7 * 86400.0
NOT_STEP, STEP, RESTART = 0, 1, 2
WORLD_SIZES_MAX = 4  # distinct world sizes kept (one is the rule; two say the log is mixed)
_SAVE = re.compile(r"Save duration\s*:\s*" + _NUM + r"\s*s", re.A)
_LOAD = re.compile(r"load_checkpoint\s*:\s*" + _NUM + r"\s*s", re.A)


class Step(NamedTuple):
    """One training step as the log reports it (a tuple: made for every step line)."""

    time: float
    tflops: float | None = None


@dataclass
class LogScan:
    """What one log says: its steps by iteration index and the facts around them."""

    steps: dict[int, Step] = field(default_factory=dict)
    final_index: int | None = None  # index of the run's last iteration, from the step lines
    step_lines: int = 0  # lines holding a step needle, parsed or not
    log_family: Family | None = None  # whose reader read the step lines (llmb.analysis.families)
    checkpoint_save_s: float | None = None
    checkpoint_load_s: float | None = None
    looks_like_log: bool = False
    # of a file without a step line: a training start-up line (NeMo, Lightning, torchrun,
    # Megatron), another tool's output (nccl-tests, Nsight Systems, print_env.sh)
    training: bool = False
    foreign: str | None = None
    encoding: str | None = None  # None: UTF-8 (or ASCII); else the codec it was decoded with
    reached: int | None = None  # highest iteration of the last attempt, its time valid or not
    bad_times: int = 0  # step lines whose time is not a plausible number of seconds
    first_bad_time: tuple[int, str] | None = None  # (iteration, the time as logged)
    nonfinite: tuple[int, str, str] | None = None  # (iteration, field, text): a nan/inf loss
    refused: tuple[int, str, str] | None = None  # (iteration, field, text): not a number
    refused_count: int = 0
    nan_iterations: tuple[int, int] | None = None  # (iteration, count): Megatron's, first > 0
    skipped_iterations: tuple[int, int] | None = None  # (first iteration, total): Megatron's
    final_change: tuple[int, int, int] | None = None  # (iteration, final before, final after)
    beyond_final: tuple[int, int] | None = None  # (iteration, its line's final index)
    gbs: int | None = None  # the first step line's global_batch_size
    gbs_change: tuple[int, int] | None = None  # (iteration, global_batch_size) that differs
    tflops_max: tuple[float, int, str] | None = None  # (value, iteration, text): largest logged
    world_sizes: dict[int, str] = field(default_factory=dict)  # world size -> the line saying it
    seq_length: int | None = None  # the start-up's configuration says
    data_parallel: int | None = None  # the start-up's configuration says
    restarts: list[tuple[int, int]] = field(default_factory=list)  # (from, to), the first few
    restart_count: int = 0
    findings: Findings = field(default_factory=Findings)  # after the last step line
    before_restart: Findings = field(default_factory=Findings)  # what ended earlier attempts
    evidence_lines: int = 0  # gate lines classified since the last step line
    _previous: int | None = field(default=None, repr=False)  # the last step line's
    # checkpoint durations since the last step line: kept before an attempt's first step
    # and after the last one
    _pending: dict[str, float] = field(default_factory=dict, repr=False)
    _world_kinds: set[int] = field(default_factory=set, repr=False)  # the kinds read: one each
    # a reader's state between chunks (Megatron: a Step Time seen after the last step line)
    _carry: object = field(default=None, repr=False)

    @property
    def max_iteration(self) -> int | None:
        return self.reached

    @property
    def world_size(self) -> int | None:
        """The world size the start-up lines state (the first one, when they disagree)."""
        return next(iter(self.world_sizes), None)

    @property
    def family(self) -> str | None:
        """The name of the log's family (nemo, megatron), None before a step line."""
        return self.log_family.name if self.log_family is not None else None

    def label(self, index: int) -> int:
        """A step index as the log numbers it (Megatron counts from 1): a reason names
        iterations as the log prints them."""
        return index + (self.log_family.first_iteration if self.log_family is not None else 0)

    def name(self, key: str) -> str:
        """What the log calls a field: tflops, gbs (NeMo's names before a step line)."""
        return (self.log_family or NEMO).field_names[key]

    def complete(self, final_index: int | None = None) -> bool:
        """True when the run reached its final iteration (the log's own count first)."""
        final = self.final_index if self.final_index is not None else final_index
        last = self.max_iteration
        return final is not None and last is not None and last >= final

    # --- feeding ---------------------------------------------------------------------------
    def step(self, line: stepline.StepLine | None) -> int:
        """Record one step line (None: it had no usable iteration); NOT_STEP, STEP, or RESTART
        when its iteration starts the run over."""
        self.step_lines += 1
        if line is None or line.iteration < 0:
            return NOT_STEP
        index = line.iteration
        self._final(index, line.final)
        kind = STEP
        previous = self._previous
        if previous is not None and index < previous - RESTART_DROP:
            kind = RESTART
            self.restart_count += 1
            if len(self.restarts) < 8:
                self.restarts.append((previous, index))
            self.reached = None  # the last attempt decides how far the run got
        self._previous = index
        self.reached = index if self.reached is None else max(self.reached, index)
        self._values(line)
        self.steps.pop(index, None)  # re-insert: dict order follows the last occurrence
        time = line.time
        if time is not None and MIN_STEP_SECONDS <= time < MAX_STEP_SECONDS:
            self.steps[index] = Step(time, line.tflops)
        else:
            self.bad_times += 1
            if self.first_bad_time is None:
                self.first_bad_time = (index, stepline.short(line.time_text))
        return kind

    def add_rows(self, rows: Rows, ready: Callable[[], None] = lambda: None) -> bool:
        """Record a chunk's step lines read in bulk (llmb.analysis.bulk), as `step` would one by
        one; False, with nothing recorded, when one of them calls for more than recording (a
        restart, another final index or GBS, an iteration beyond its final, a time beyond its
        limits): the caller then reads them line by line."""
        index, final = rows.index, rows.final
        previous = self._previous
        rising = all(map(operator.lt, index, islice(index, 1, None)))  # (C loops: ~50 a log)
        if (self.final_index not in (None, final) or max(index) > final
                or self.gbs not in (None, rows.gbs)
                or not MIN_STEP_SECONDS <= min(rows.time) <= max(rows.time) < MAX_STEP_SECONDS
                or (previous is not None and index[0] < previous - RESTART_DROP)
                or (not rising and any(b < a - RESTART_DROP for a, b in pairwise(index)))):
            return False
        ready()  # (what comes before a log's first step line is read first)
        self.step_lines += len(index)
        self.final_index, self.gbs, self._previous = final, rows.gbs, index[-1]
        top = index[-1] if rising else max(index)
        self.reached = top if self.reached is None else max(self.reached, top)
        tflops = rows.tflops
        values = ([t for t in tflops if t is not None] if None in tflops
                  else cast(list[float], tflops))
        if values:
            best = max(values)
            if self.tflops_max is None or best > self.tflops_max[0]:
                at = tflops.index(best)
                self.tflops_max = (best, index[at], stepline.short(rows.tflops_text[at]))
        steps = self.steps
        made = cast(Iterator[Step], map(tuple.__new__, repeat(Step),
                                        zip(rows.time, tflops, strict=True)))
        if (previous is None or (index[0] > previous and not steps.keys() & set(index))) \
                and rising:  # new steps in order: added as such (Steps made in C)
            steps.update(zip(index, made, strict=True))
            return True
        for i, step in zip(index, made, strict=True):
            steps.pop(i, None)  # re-insert: dict order follows the last occurrence
            steps[i] = step
        return True

    def _final(self, index: int, final: int | None) -> None:
        if final is None:
            return
        if self.final_index is not None and final != self.final_index \
                and self.final_change is None:
            self.final_change = (index, self.final_index, final)
        self.final_index = final
        if index > final and self.beyond_final is None:
            self.beyond_final = (index, final)

    def _values(self, line: stepline.StepLine) -> None:
        index = line.iteration
        if line.nonfinite is not None and self.nonfinite is None:
            self.nonfinite = (index, *line.nonfinite)
        if line.refused is not None:
            self.refused_count += 1
            if self.refused is None:
                self.refused = (index, line.refused[0], stepline.short(line.refused[1]))
        if line.gbs is not None:
            if self.gbs is None:
                self.gbs = line.gbs
            elif line.gbs != self.gbs and self.gbs_change is None:
                self.gbs_change = (index, line.gbs)
        if line.tflops is not None and (self.tflops_max is None
                                        or line.tflops > self.tflops_max[0]):
            self.tflops_max = (line.tflops, index, stepline.short(line.tflops_text))
        if line.nan_iterations and self.nan_iterations is None:
            self.nan_iterations = (index, line.nan_iterations)
        if line.skipped_iterations:
            first, total = self.skipped_iterations or (index, 0)
            self.skipped_iterations = (first, total + line.skipped_iterations)

    def checkpoint_line(self, raw: bytes | bytearray) -> None:
        line = clean(raw)
        for key, pattern in (("save", _SAVE), ("load", _LOAD)):
            if (m := pattern.search(line)) and math.isfinite(value := float(m.group(1))):
                self._pending[key] = value

    def commit_checkpoints(self) -> None:
        """The checkpoint lines since the last step line count: they came before an attempt's
        first step (a load) or after the run's last step (the final save)."""
        if "save" in self._pending:
            self.checkpoint_save_s = self._pending["save"]
        if "load" in self._pending:
            self.checkpoint_load_s = self._pending["load"]

    def drop_checkpoints(self) -> None:
        """A step line follows: the checkpoint lines before it were not the run's figures
        (once committed, when it starts an attempt)."""
        self._pending.clear()

    def world_line(self, kind: int, raw: bytes | bytearray) -> bool:
        """Read a start-up line of WORLD_NEEDLES[kind]; True when it stated a world size."""
        line = clean(raw)
        m = _WORLD[kind].search(line)
        if m is None or int(m.group(1)) < 1:
            return False
        size = int(m.group(1))
        if size not in self.world_sizes and len(self.world_sizes) < WORLD_SIZES_MAX:
            self.world_sizes[size] = " ".join(_PREFIX.sub("", line).split())[:120]
        self._world_kinds.add(kind)
        return True

    def fact_line(self, raw: bytes | bytearray) -> None:
        """A start-up line that may state the sequence length or data-parallel size (the first
        of each counts)."""
        for key, value in _FACT.findall(clean(raw)):
            if int(value) < 1:
                continue
            if key in ("seq_length", "sequence_length"):
                self.seq_length = self.seq_length or int(value)
            else:
                self.data_parallel = self.data_parallel or int(value)

    def evidence_line(self, raw: bytes | bytearray) -> None:
        self.evidence_lines += 1
        if (ev := classify(clean(raw))) is not None:
            self.findings.add(ev)

    def superseded(self, restart: bool) -> None:
        """A step line follows the evidence gathered so far: drop it, or keep it as what ended
        the earlier attempt when the step starts the run over."""
        if restart:
            self.before_restart.merge(self.findings)
        if self.findings:
            self.findings = Findings()
        self.evidence_lines = 0

    def finish(self) -> None:
        """The end of the log: what follows the last step line counts."""
        self.commit_checkpoints()
        self.drop_checkpoints()
        self._carry = None
        if self.step_lines:  # said of a file without a step line only (whatever its chunks)
            self.training, self.foreign = False, None
