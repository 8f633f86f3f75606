"""Scan training logs into step records, and the window statistics the benchmarks publish.

A log is streamed in binary chunks and never held in memory: only the lines that hold
`train_step_timing` are cut out (a C-speed substring search finds them before any regular
expression runs), decoded with errors replaced, stripped of ANSI colour codes and parsed
(llmb.analysis.stepline). Lines end at `\\n` or `\\r` (progress bars redraw with carriage
returns, and CRLF files end in both), and a line is read whole however long it is. A log
written as UTF-16 or UTF-32 (a Windows redirect: a byte-order mark, or a NUL beside every
ASCII character) is decoded to UTF-8 first and read the same way.

Of the two step-line forms NeMo prints (llmb.analysis.stepline), iteration numbers are
0-based. In the pipe form NeMo prints `iteration {i}/{max_steps - 1}`, so the denominator is
the index of the final iteration: `iteration 49/49` is the last step of a 50-step run. In the
progress-bar form `{done}/{total}` counts finished steps, so the step just
finished has index `done - 1` and the final index is `total - 1` (`100/100` with
`global_step=99.00`). A run is complete when its highest iteration reaches that final index.
A final index that changes within the log, and an iteration beyond its own line's final index,
are kept (the run is Invalid: no NeMo run prints either).

Several ranks, or a requeued job's second attempt, print the same iteration again: the last
occurrence in the file wins. An iteration that drops by more than RESTART_DROP is a restart
(a requeued job, a resume from a checkpoint): it is remembered, and from then on the run is as
far as its last attempt got.

A step time outside MIN_STEP_SECONDS..MAX_STEP_SECONDS (zero, negative, nan, inf, 1e308,
1e-300), or one that is not a number at all (`9,31`), never counts: the step is not recorded,
its iteration still counts as reached, and the scan keeps the first such value (the run is
Invalid). The same holds for a `nan`/`inf` loss or grad norm, and for any other value of a step
line that is not a whole number. The scan also keeps what the log says about the run itself:
the global batch size of every step line (and the first line that disagrees), the largest
TFLOPS_per_GPU logged, and the world size the start-up lines before the first step state
(Lightning's `Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/16` and `All distributed
processes registered. Starting with 16 processes`, torchrun's `global_world_sizes=[16, ...]`).

Why a run stopped is written after its last step line (a message followed by more steps did not
stop it): after the last step line of each chunk, and before a restart, the scan looks for
llmb.analysis.failures.GATES and hands those lines to llmb.analysis.failures.classify. The
checkpoint save and load lines NeMo prints (`Global Checkpoint Save : ... Save duration:
4.389s`) are read in the same stretches, before an attempt's first step and after the run's last
step, where a benchmark saves and loads; a save between two steps is not a figure of the run.
Those stretches are a small part of a healthy log, so reasons and checkpoints cost next to
nothing; evidence that a later step line supersedes is dropped.
"""

from __future__ import annotations

import codecs
import errno
import io
import math
import os
import re
import stat
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, NamedTuple

from llmb.analysis import stepline
from llmb.analysis.failures import GATES, Findings, classify

# The published window: iterations 11..44 inclusive, 0-based (seeds 000, 003, 004).
WINDOW = (11, 44)

STEP_NEEDLE = b"train_step_timing"
CHECKPOINT_NEEDLE = b"Global Checkpoint"
WORLD_NEEDLES = (b"MEMBER:", b"Starting with", b"global_world_sizes=")
# Evidence that a file without step lines is still a training log (NeMo/Megatron/Slurm output).
LOG_MARKERS = (b"[NeMo ", b"nemo_logging", b"Training epoch", b"megatron", b"NeMo", b"srun:",
               b"torch.distributed", b"Traceback (most recent call last)")

CHUNK_BYTES = 1 << 22
# A line is looked for this far around a match first, then as far as it goes.
LINE_REACH = 4096
# An unterminated run of bytes longer than this is not a log line; keep only its tail.
MAX_CARRY = 1 << 20
HEAD_BYTES = 4096  # what the encoding is told from

_NUM = r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)(?![\d.,_])"
# srun --label's `12: ` and a NeMo logger prefix, left out of a line a reason quotes
_PREFIX = re.compile(r"^\s*(?:\d+:\s)?(?:\[NeMo [A-Z] [^\]]*\]\s*)?")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
_WORLD = (re.compile(r"MEMBER:\s*\d{1,9}\s*/\s*(\d{1,9})(?!\d)", re.A),
          re.compile(r"distributed processes registered\. Starting with (\d{1,9}) processes",
                     re.A),
          re.compile(r"global_world_sizes=\[(\d{1,9})[,\]]", re.A))
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
    step_lines: int = 0  # lines holding train_step_timing, parsed or not
    checkpoint_save_s: float | None = None
    checkpoint_load_s: float | None = None
    looks_like_log: bool = False
    encoding: str | None = None  # None: UTF-8 (or ASCII); else the codec it was decoded with
    reached: int | None = None  # highest iteration of the last attempt, its time valid or not
    bad_times: int = 0  # step lines whose time is not a plausible number of seconds
    first_bad_time: tuple[int, str] | None = None  # (iteration, the time as logged)
    nonfinite: tuple[int, str, str] | None = None  # (iteration, field, text): a nan/inf loss
    refused: tuple[int, str, str] | None = None  # (iteration, field, text): not a number
    refused_count: int = 0
    final_change: tuple[int, int, int] | None = None  # (iteration, final before, final after)
    beyond_final: tuple[int, int] | None = None  # (iteration, its line's final index)
    gbs: int | None = None  # the first step line's global_batch_size
    gbs_change: tuple[int, int] | None = None  # (iteration, global_batch_size) that differs
    tflops_max: tuple[float, int, str] | None = None  # (value, iteration, text): largest logged
    world_sizes: dict[int, str] = field(default_factory=dict)  # world size -> the line saying it
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

    @property
    def max_iteration(self) -> int | None:
        return self.reached

    @property
    def world_size(self) -> int | None:
        """The world size the start-up lines state (the first one, when they disagree)."""
        return next(iter(self.world_sizes), None)

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
        line = stepline.parse(_clean(raw))
        if line is None:
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

    def checkpoint_line(self, raw: bytes | bytearray) -> None:
        line = _clean(raw)
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
        line = _clean(raw)
        m = _WORLD[kind].search(line)
        if m is None or int(m.group(1)) < 1:
            return False
        size = int(m.group(1))
        if size not in self.world_sizes and len(self.world_sizes) < WORLD_SIZES_MAX:
            self.world_sizes[size] = " ".join(_PREFIX.sub("", line).split())[:120]
        self._world_kinds.add(kind)
        return True

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

    def finish(self) -> None:
        """The end of the log: what follows the last step line counts."""
        self.commit_checkpoints()
        self.drop_checkpoints()


def _clean(raw: bytes | bytearray) -> str:
    text = raw.decode("utf-8", errors="replace")
    return _ANSI.sub("", text) if "\x1b" in text else text


def _line_at(buf: bytes | bytearray, pos: int, end: int) -> tuple[int, int]:
    """Bounds of the line (split at \\n and \\r) around buf[pos], within buf[:end]; looked
    for LINE_REACH around pos first, then as far as the buffer goes."""
    floor = max(0, pos - LINE_REACH)
    start = max(buf.rfind(b"\n", floor, pos), buf.rfind(b"\r", floor, pos))
    if start < 0 and floor > 0:
        start = max(buf.rfind(b"\n", 0, floor), buf.rfind(b"\r", 0, floor))
    ceiling = min(end, pos + LINE_REACH)
    stops = [i for i in (buf.find(b"\n", pos, ceiling), buf.find(b"\r", pos, ceiling)) if i >= 0]
    if not stops and ceiling < end:
        stops = [i for i in (buf.find(b"\n", ceiling, end), buf.find(b"\r", ceiling, end))
                 if i >= 0]
    return start + 1, min(stops) if stops else end


def _lines_with(buf: bytes | bytearray, needle: bytes, begin: int, end: int
                ) -> Iterator[tuple[int, int]]:
    """Bounds of each line in buf[begin:end] that holds needle, each once, in order."""
    pos = buf.find(needle, begin, end)
    while pos >= 0:
        start, stop = _line_at(buf, pos, end)
        yield max(start, begin), stop
        pos = buf.find(needle, max(stop, pos + len(needle)), end)


def _feed(scan: LogScan, buf: bytes | bytearray, end: int) -> None:
    """Parse the complete lines in buf[:end]."""
    gap = 0  # where the stretch after the last step line (so far) begins
    world_from = 0  # start-up lines before the first step line: searched up to here
    for start, stop in _lines_with(buf, STEP_NEEDLE, 0, end):
        if scan._previous is None:
            _world(scan, buf, world_from, start)
            world_from = start
        first = scan._previous is None
        kind = scan.step_line(buf[start:stop])
        if kind == NOT_STEP:
            continue
        if first or kind == RESTART:  # the stretch before an attempt's first step counts
            _checkpoints(scan, buf, gap, start)
            scan.commit_checkpoints()
        scan.drop_checkpoints()
        if kind == RESTART:  # what ended the earlier attempt lies just before
            _evidence(scan, buf, gap, start)
        scan.superseded(kind == RESTART)
        gap = stop
    if scan._previous is None:
        _world(scan, buf, world_from, end)
    _checkpoints(scan, buf, gap, end)
    _evidence(scan, buf, gap, end)
    if not scan.looks_like_log:
        scan.looks_like_log = scan.step_lines > 0 or any(
            buf.find(marker, 0, end) >= 0 for marker in LOG_MARKERS)


def _world(scan: LogScan, buf: bytes | bytearray, begin: int, end: int) -> None:
    """The first line of each kind that states the world size (every rank prints one)."""
    for kind, needle in enumerate(WORLD_NEEDLES):
        if kind in scan._world_kinds:
            continue
        for start, stop in _lines_with(buf, needle, begin, end):
            if scan.world_line(kind, buf[start:stop]):
                break


def _checkpoints(scan: LogScan, buf: bytes | bytearray, begin: int, end: int) -> None:
    for start, stop in _lines_with(buf, CHECKPOINT_NEEDLE, begin, end):
        scan.checkpoint_line(buf[start:stop])


def _evidence(scan: LogScan, buf: bytes | bytearray, begin: int, end: int) -> None:
    """Classify the lines in buf[begin:end] that hold a failure gate, in order, each once: the
    first EVIDENCE_LINES_MAX since the last step line."""
    room = EVIDENCE_LINES_MAX - scan.evidence_lines
    lines: dict[int, int] = {}
    for gate in GATES:  # each gate's first `room` lines hold the first `room` lines of all
        found = 0
        for start, stop in _lines_with(buf, gate, begin, end):
            if found >= room:
                break
            if lines.setdefault(start, stop) == stop:
                found += 1
    for start in sorted(lines)[:room]:
        scan.evidence_line(buf[start:lines[start]])


# --- reading ----------------------------------------------------------------------------------

def wide_encoding(head: bytes) -> str | None:
    """The codec of a log written in UTF-16 or UTF-32 (a byte-order mark, or a NUL beside every
    ASCII character of its start), else None (UTF-8, ASCII, or not text)."""
    for bom, codec in ((codecs.BOM_UTF32_LE, "utf-32-le"), (codecs.BOM_UTF32_BE, "utf-32-be"),
                       (codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be")):
        if head.startswith(bom):
            return codec
    pairs = len(head) // 2
    if pairs < 8:
        return None
    odd, even = head[1:2 * pairs:2].count(0), head[0:2 * pairs:2].count(0)
    if odd >= 0.9 * pairs and even <= 0.1 * pairs:
        return "utf-16-le"
    if even >= 0.9 * pairs and odd <= 0.1 * pairs:
        return "utf-16-be"
    return None


def scan_log(path: str | Path, chunk_bytes: int = CHUNK_BYTES) -> LogScan:
    """Stream one log file; memory stays at a couple of chunks however large the file is.

    Raises OSError when the file cannot be opened or read, or is not a regular file (a FIFO
    or a device named like a log is never waited on or read: opened non-blocking, checked on
    the open descriptor).
    """
    scan = LogScan()
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file", str(path))
    with os.fdopen(fd, "rb", buffering=0) as f:
        head = f.read(HEAD_BYTES)
        encoding = wide_encoding(head)
        if encoding is not None:
            scan.encoding = encoding
            _scan_chunks(scan, _transcoded(f, head, encoding, chunk_bytes))
        elif len(head) < HEAD_BYTES:  # the whole file
            _feed(scan, head, len(head))
        else:
            _scan_file(scan, f, head, chunk_bytes)
    scan.finish()
    return scan


_buffers: dict[int, bytearray] = {}  # one buffer per chunk size, reused from log to log


def _scan_file(scan: LogScan, f: io.RawIOBase, head: bytes, chunk_bytes: int) -> None:
    """The UTF-8 path: one buffer, read straight into (no per-chunk allocation); the unfinished
    last line of a chunk moves to the front, the next chunk follows it."""
    buf = _buffers.get(chunk_bytes)
    if buf is None:
        buf = _buffers[chunk_bytes] = bytearray(max(chunk_bytes, HEAD_BYTES) + MAX_CARRY
                                                + LINE_REACH)
    view = memoryview(buf)
    try:
        view[:len(head)] = head
        got, held = len(head), 0  # held: bytes of an unfinished line at the front of buf
        while got:
            end = held + got
            held = _take(scan, buf, view, end, held)
            got = f.readinto(view[held:held + chunk_bytes])
        if held:
            _feed(scan, buf, held)
    finally:
        view.release()


def _take(scan: LogScan, buf: bytearray, view: memoryview, end: int, held: int) -> int:
    """Feed the complete lines of buf[:end]; move what is left to the front; its length."""
    cut = buf.rfind(b"\n", held, end)
    cut = max(cut, buf.rfind(b"\r", max(cut, held), end))  # only past the last \n
    if cut < 0:  # no line end at all yet: keep a bounded tail
        if end > MAX_CARRY:
            view[:LINE_REACH] = view[end - LINE_REACH:end]
            return LINE_REACH
        return end
    _feed(scan, buf, cut + 1)
    left = end - cut - 1
    if left > MAX_CARRY:  # an unfinished line already too long to be one: keep its tail
        view[:LINE_REACH] = view[end - LINE_REACH:end]
        return LINE_REACH
    view[:left] = view[cut + 1:end]
    return left


def _transcoded(f: BinaryIO, head: bytes, encoding: str, chunk_bytes: int) -> Iterator[bytes]:
    decoder = codecs.getincrementaldecoder(encoding)(errors="replace")
    data = head
    while data:
        yield decoder.decode(data).lstrip("\ufeff").encode("utf-8", "replace")
        data = f.read(chunk_bytes)
    yield decoder.decode(b"", final=True).encode("utf-8", "replace")


def _scan_chunks(scan: LogScan, chunks: Iterable[bytes]) -> None:
    """Any chunks of UTF-8 text (a decoded log): the same lines as _scan_file."""
    buf = bytearray()
    for chunk in chunks:
        buf += chunk
        cut = max(buf.rfind(b"\n"), buf.rfind(b"\r"))
        if cut < 0:
            if len(buf) > MAX_CARRY:
                del buf[:len(buf) - LINE_REACH]
            continue
        _feed(scan, buf, cut + 1)
        del buf[:cut + 1]
    if buf:
        _feed(scan, buf, len(buf))


def scan_lines(lines: Iterable[bytes | str]) -> LogScan:
    """Scan log text given as lines (tests, pipes); same rules as scan_log."""
    scan = LogScan()
    for line in lines:
        data = line.encode() if isinstance(line, str) else line
        if not data.endswith((b"\n", b"\r")):
            data += b"\n"
        _feed(scan, data, len(data))
    scan.finish()
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
    """Population mean/std, as statistics.pstdev gives them (the seeds' analysis uses it), in
    floats: statistics' exact fractions cost ~100 us a call, which 200,000 logs feel. Values far
    from 1 are scaled first, so that nothing overflows however large they are.

    No values gives nulls: a run that never reached iteration 11 has no steady-state figure,
    and inventing one from warm-up steps would be misleading. Values that are not finite are
    left out.
    """
    data = [v for v in values if math.isfinite(v)]
    if not data:
        return WindowStats(0, None, None)
    n = len(data)
    # values far from 1 are scaled down (or up) first, so that their squares stay floats
    scale = max(abs(v) for v in data)
    scale = scale if scale and not 1e-100 < scale < 1e100 else 1.0
    scaled = [v / scale for v in data] if scale != 1.0 else data
    mean = math.fsum(scaled) / n
    spread = math.sqrt(math.fsum((v - mean) ** 2 for v in scaled) / n)
    return WindowStats(n, mean * scale, spread * scale)


def median(values: Sequence[float]) -> float:
    """statistics.median, without importing statistics (fractions and decimal: start-up time)."""
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2
