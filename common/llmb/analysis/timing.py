"""Scan training logs into step records, and the window statistics the benchmarks publish.

A log is streamed in binary chunks and never held in memory: only the lines that hold
`train_step_timing` or `Global Checkpoint` are cut out (a C-speed substring search finds them
before any regular expression runs), decoded with errors replaced, stripped of ANSI colour
codes and parsed. Lines end at `\\n` or `\\r` (progress bars redraw with carriage returns, and
CRLF files end in both).

The two step-line forms of SPEC.md section 4:

    Training epoch 0, iteration 11/49 | ... | train_step_timing in s: 12.39 | TFLOPS_per_GPU: 610.2
    Epoch 0: : 100%|###| 100/100 [07:57<00:00, global_step=99.00, train_step_timing in s=3.590]

Iteration numbers are 0-based. In the pipe form NeMo prints `iteration {i}/{max_steps - 1}`, so
the denominator is the index of the final iteration: `iteration 49/49` is the last step of a
50-step run. In the progress-bar form `{done}/{total}` counts finished steps, so the step just
finished has index `done - 1` and the final index is `total - 1` (`100/100` with
`global_step=99.00`). A run is complete when its highest iteration reaches that final index.

Several ranks, or a requeued job's second attempt, print the same iteration again: the last
occurrence in the file wins. An iteration that drops by more than RESTART_DROP is a restart
(a requeued job, a resume from a checkpoint): it is remembered, and from then on the run is as
far as its last attempt got.

A step time outside MIN_STEP_SECONDS..MAX_STEP_SECONDS (zero, negative, nan, inf, 1e308,
1e-300) never counts: the step is not recorded, its iteration still counts as reached, and the
scan keeps the first such value (the run is Invalid). A `nan`/`inf` loss or grad norm in a step
line is kept the same way.

Why a run stopped is written after its last step line (a message followed by more steps did not
stop it): after the last step line of each chunk, and before a restart, the scan looks for
llmb.analysis.failures.GATES and hands those lines to llmb.analysis.failures.classify. That stretch
is a small part of a healthy log, so the reasons cost next to nothing; evidence that a later step
line supersedes is dropped.
"""

from __future__ import annotations

import errno
import math
import os
import re
import stat
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from llmb.analysis.failures import GATES, Findings, classify

# The published window: iterations 11..44 inclusive, 0-based (seeds 000, 003, 004).
WINDOW = (11, 44)

STEP_NEEDLE = b"train_step_timing"
CHECKPOINT_NEEDLE = b"Global Checkpoint"
# Evidence that a file without step lines is still a training log (NeMo/Megatron/Slurm output).
LOG_MARKERS = (b"[NeMo ", b"nemo_logging", b"Training epoch", b"megatron", b"NeMo", b"srun:",
               b"torch.distributed", b"Traceback (most recent call last)")

CHUNK_BYTES = 1 << 20
# A step line is a few hundred bytes: never look further than this around a match.
LINE_REACH = 4096
# An unterminated run of bytes longer than this is not a log line; keep only its tail.
MAX_CARRY = 1 << 20

_NUM = r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf(?:inity)?)\b)"
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
_ITERATION = re.compile(r"iteration\s+(\d{1,18})\s*/\s*(\d{1,18})")
_PROGRESS = re.compile(r"(\d{1,18})\s*/\s*(\d{1,18})\s*\[")
_GLOBAL_STEP = re.compile(r"global_step\s*[:=]\s*" + _NUM)
_STEP_TIME = re.compile(r"train_step_timing in s\s*[:=]\s*" + _NUM, re.I)
_TFLOPS = re.compile(r"TFLOPS_per_GPU\s*[:=]\s*" + _NUM)
_HEALTH = (("reduced_train_loss", re.compile(r"reduced_train_loss\s*[:=]\s*" + _NUM, re.I)),
           ("grad_norm", re.compile(r"grad[_ ]norm\s*[:=]\s*" + _NUM, re.I)))
# An iteration this much below the previous one starts the run over (requeue, resume); smaller
# drops are ranks printing the same steps out of order.
RESTART_DROP = 2
# A step time outside this range is not a measurement: no step trains in under a microsecond,
# no job runs a week per step.
MIN_STEP_SECONDS, MAX_STEP_SECONDS = 1e-6, 7 * 86400.0
NOT_STEP, STEP, RESTART = 0, 1, 2
# Lines classified per stretch after a step line: enough for any real ending (1024 ranks each
# printing a traceback), and a bound on the work for a log that is nothing but error lines.
EVIDENCE_LINES_MAX = 20000
_SAVE = re.compile(r"Save duration\s*:\s*" + _NUM + r"\s*s")
_LOAD = re.compile(r"load_checkpoint\s*:\s*" + _NUM + r"\s*s")


@dataclass(frozen=True)
class Step:
    """One training step as the log reports it."""

    time: float
    tflops: float | None = None


@dataclass
class LogScan:
    """What one log says: its steps by iteration index and the facts around them."""

    steps: dict[int, Step] = field(default_factory=dict)
    final_index: int | None = None  # index of the run's last iteration, from the step lines
    step_lines: int = 0  # lines holding train_step_timing, parsed or not
    checkpoint_save_s: float | None = None
    checkpoint_load_s: float | None = None
    looks_like_log: bool = False
    reached: int | None = None  # highest iteration of the last attempt, its time valid or not
    bad_times: int = 0  # step lines whose time is not a plausible number of seconds
    first_bad_time: tuple[int, str] | None = None  # (iteration, the time as logged)
    nonfinite: tuple[int, str, str] | None = None  # (iteration, field, text): a nan/inf loss
    restarts: list[tuple[int, int]] = field(default_factory=list)  # (from, to), the first few
    restart_count: int = 0
    findings: Findings = field(default_factory=Findings)  # after the last step line
    before_restart: Findings = field(default_factory=Findings)  # what ended earlier attempts
    evidence_lines: int = 0  # gate lines classified since the last step line
    _previous: int | None = field(default=None, repr=False)  # the last step line's

    @property
    def max_iteration(self) -> int | None:
        return self.reached

    def complete(self, final_index: int | None = None) -> bool:
        """True when the run reached its final iteration (the log's own count first)."""
        final = self.final_index if self.final_index is not None else final_index
        last = self.max_iteration
        return final is not None and last is not None and last >= final

    # --- feeding ---------------------------------------------------------------------------
    def step_line(self, raw: bytes | bytearray) -> int:
        """Record one step line; NOT_STEP when it has no usable iteration, else STEP, or
        RESTART when its iteration starts the run over."""
        self.step_lines += 1
        line = _clean(raw)
        logged = _STEP_TIME.search(line)
        if logged is None:
            return NOT_STEP
        time = float(logged.group(1))
        if m := _ITERATION.search(line):
            index, final = int(m.group(1)), int(m.group(2))
        elif m := _PROGRESS.search(line):
            index, final = int(m.group(1)) - 1, int(m.group(2)) - 1
        elif (g := _number(_GLOBAL_STEP, line)) is not None and g < 1e18:
            index, final = int(g), None
        else:
            return NOT_STEP
        if index < 0:
            return NOT_STEP
        if final is not None:
            self.final_index = final
        kind = STEP
        if self._previous is not None and index < self._previous - RESTART_DROP:
            kind = RESTART
            self.restart_count += 1
            if len(self.restarts) < 8:
                self.restarts.append((self._previous, index))
            self.reached = None  # the last attempt decides how far the run got
        self._previous = index
        self.reached = index if self.reached is None else max(self.reached, index)
        if self.nonfinite is None:
            for name, pattern in _HEALTH:
                if (m := pattern.search(line)) and not math.isfinite(float(m.group(1))):
                    self.nonfinite = (index, name, m.group(1))
                    break
        self.steps.pop(index, None)  # re-insert: dict order follows the last occurrence
        if MIN_STEP_SECONDS <= time < MAX_STEP_SECONDS:
            self.steps[index] = Step(time, _number(_TFLOPS, line))
        else:
            self.bad_times += 1
            if self.first_bad_time is None:
                self.first_bad_time = (index, logged.group(1))
        return kind

    def checkpoint_line(self, raw: bytes | bytearray) -> None:
        line = _clean(raw)
        if (save := _number(_SAVE, line)) is not None:
            self.checkpoint_save_s = save
        if (load := _number(_LOAD, line)) is not None:
            self.checkpoint_load_s = load

    def evidence_line(self, raw: bytes | bytearray) -> None:
        self.evidence_lines += 1
        if (ev := classify(_clean(raw))) is not None:
            self.findings.add(ev)

    def superseded(self, restart: bool) -> None:
        """A step line follows the evidence gathered so far: drop it, or keep it as what ended
        the earlier attempt when the step starts the run over."""
        if restart:
            self.before_restart.merge(self.findings)
        if self.findings:
            self.findings = Findings()
        self.evidence_lines = 0


def _clean(raw: bytes | bytearray) -> str:
    return _ANSI.sub("", raw.decode("utf-8", errors="replace"))


def _number(pattern: re.Pattern[str], line: str) -> float | None:
    m = pattern.search(line)
    if not m:
        return None
    value = float(m.group(1))
    return value if math.isfinite(value) else None


def _line_at(buf: bytes | bytearray, pos: int, end: int) -> tuple[int, int]:
    """Bounds of the line (split at \\n and \\r) around buf[pos], within buf[:end]."""
    floor = max(0, pos - LINE_REACH)
    start = max(buf.rfind(b"\n", floor, pos), buf.rfind(b"\r", floor, pos), floor - 1) + 1
    ceiling = min(end, pos + LINE_REACH)
    stops = [i for i in (buf.find(b"\n", pos, ceiling), buf.find(b"\r", pos, ceiling)) if i >= 0]
    return start, min(stops) if stops else ceiling


def _feed(scan: LogScan, buf: bytes | bytearray, end: int) -> None:
    """Parse the complete lines in buf[:end]."""
    gap = 0  # where the stretch after the last step line (so far) begins
    pos = buf.find(STEP_NEEDLE, 0, end)
    while pos >= 0:
        start, stop = _line_at(buf, pos, end)
        kind = scan.step_line(buf[start:stop])
        if kind != NOT_STEP:
            if kind == RESTART:  # what ended the earlier attempt lies just before
                _evidence(scan, buf, gap, start)
            scan.superseded(kind == RESTART)
            gap = stop
        pos = buf.find(STEP_NEEDLE, max(stop, pos + len(STEP_NEEDLE)), end)
    pos = buf.find(CHECKPOINT_NEEDLE, 0, end)
    while pos >= 0:
        start, stop = _line_at(buf, pos, end)
        scan.checkpoint_line(buf[start:stop])
        pos = buf.find(CHECKPOINT_NEEDLE, max(stop, pos + len(CHECKPOINT_NEEDLE)), end)
    _evidence(scan, buf, gap, end)
    if not scan.looks_like_log:
        scan.looks_like_log = scan.step_lines > 0 or any(
            buf.find(marker, 0, end) >= 0 for marker in LOG_MARKERS)


def _evidence(scan: LogScan, buf: bytes | bytearray, begin: int, end: int) -> None:
    """Classify the lines in buf[begin:end] that hold a failure gate, in order, each once: the
    first EVIDENCE_LINES_MAX since the last step line."""
    room = EVIDENCE_LINES_MAX - scan.evidence_lines
    lines: dict[int, int] = {}
    for gate in GATES:  # each gate's first `room` lines hold the first `room` lines of all
        found = 0
        pos = buf.find(gate, begin, end)
        while pos >= 0 and found < room:
            start, stop = _line_at(buf, pos, end)
            if lines.setdefault(max(start, begin), stop) == stop:
                found += 1
            pos = buf.find(gate, max(stop, pos + len(gate)), end)
    for start in sorted(lines)[:room]:
        scan.evidence_line(buf[start:lines[start]])


def scan_log(path: str | Path, chunk_bytes: int = CHUNK_BYTES) -> LogScan:
    """Stream one log file; memory stays at a couple of chunks however large the file is.

    One buffer is reused for the whole file (read straight into it, no per-chunk allocation):
    the unfinished last line of a chunk moves to the front and the next chunk follows it.
    Raises OSError when the file cannot be opened or read, or is not a regular file (a FIFO
    or a device named like a log is never waited on or read: opened non-blocking, checked on
    the open descriptor).
    """
    scan = LogScan()
    buf = bytearray(chunk_bytes + MAX_CARRY + LINE_REACH)
    view = memoryview(buf)
    held = 0  # bytes of an unfinished line at the front of buf
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file", str(path))
    with os.fdopen(fd, "rb", buffering=0) as f:
        while True:
            got = f.readinto(view[held:held + chunk_bytes])
            if not got:
                break
            end = held + got
            cut = max(buf.rfind(b"\n", held, end), buf.rfind(b"\r", held, end))
            if cut < 0:  # no line end at all yet: keep a bounded tail
                if end > MAX_CARRY:
                    view[:LINE_REACH] = view[end - LINE_REACH:end]
                    end = LINE_REACH
                held = end
                continue
            _feed(scan, buf, cut + 1)
            held = end - cut - 1
            view[:held] = view[cut + 1:end]
    if held:
        _feed(scan, buf, held)
    return scan


def scan_lines(lines: Iterable[bytes | str]) -> LogScan:
    """Scan log text given as lines (tests, pipes); same rules as scan_log."""
    scan = LogScan()
    for line in lines:
        data = line.encode() if isinstance(line, str) else line
        if not data.endswith((b"\n", b"\r")):
            data += b"\n"
        _feed(scan, data, len(data))
    return scan


@dataclass(frozen=True)
class WindowStats:
    """Mean and population standard deviation over the steps inside the window."""

    count: int
    mean: float | None
    std_dev: float | None


def window_values(steps: dict[int, Step], window: tuple[int, int] = WINDOW) -> list[int]:
    """The iteration indices inside the window (inclusive), in order."""
    first, last = window
    return sorted(i for i in steps if first <= i <= last)


def stats(values: Iterable[float]) -> WindowStats:
    """Population mean/std (statistics.pstdev, as the seeds' analysis computes it).

    No values gives nulls: a run that never reached iteration 11 has no steady-state figure,
    and inventing one from warm-up steps would be misleading. Values that are not finite are
    left out; the mean never overflows, however large the values.
    """
    data = [v for v in values if math.isfinite(v)]
    if not data:
        return WindowStats(0, None, None)
    try:
        mean = statistics.fmean(data)
    except OverflowError:  # the sum of huge values: average them scaled down
        scale = max(abs(v) for v in data)
        mean = scale * statistics.fmean(v / scale for v in data)
    return WindowStats(len(data), mean, statistics.pstdev(data))
