"""Scan training logs into step records, and the window statistics the benchmarks publish.

A log is streamed in binary chunks and never held in memory. Which program wrote it is told
from what it contains, never from its name: the first step line found picks the family's reader
(llmb.analysis.families), and from then on only the lines that hold that family's needle are
cut out (a C-speed substring search finds them before any regular expression runs), decoded
with errors replaced, stripped of ANSI colour codes and parsed:

- NeMo 2 / Lightning (`train_step_timing`, llmb.analysis.stepline): the pipe form `Training
  epoch 0, iteration 11/49 | ... | global_step: 11 | ... | train_step_timing in s: 12.39 |
  TFLOPS_per_GPU: 610.2 | ...` and the progress-bar form `Epoch 0: : 100%|###| 100/100 [...,
  global_step=99.00, ..., train_step_timing in s=3.590]`;
- Megatron-LM / Megatron-Bridge (`elapsed time per iteration`, llmb.analysis.megatron_steps):
  ` [2026-03-27 23:17:24] iteration 12/ 50 | ... | elapsed time per iteration (ms): 4189.6 |
  ...`, with its `Step Time : 4.19s GPU utilization: 1610.2MODEL_TFLOP/s/GPU` companion before it,
  glued into one line or not;
- Megatron-Bridge's rank 0 alone (`Step Time : `, llmb.analysis.family_steptime): a log with
  Step Time lines and no iteration line, one line an iteration.

Lines end at `\\n` or `\\r` (progress bars redraw with carriage returns, and CRLF files end in
both), and a line is read whole up to MAX_LINE (1 MiB; a step line is a few hundred bytes); a
longer one is no log line and is not read, wherever it falls in the chunks. A log written as
UTF-16 or UTF-32 (a Windows redirect: a byte-order mark, or a NUL beside every ASCII character)
is decoded to UTF-8 first and read the same way.

Every reader gives 0-based step indices and the index of the final step. NeMo's pipe form prints
`iteration {i}/{max_steps - 1}` (`49/49` is the last step of a 50-step run) and `global_step`,
which is the index (an epoch rollover starts `iteration` again; `global_step` goes on); the
progress bar's `{done}/{total}` counts finished steps (index done - 1, final total - 1);
Megatron's `iteration {k}/{N}` counts from 1 (index k - 1, final N - 1), so the window 11-44
is iterations 12-45 of a Megatron log. A run is complete when its highest index reaches the
final one. A final index that changes within the log, and an index beyond its own line's final
index, are kept (the run is Invalid: no run prints either).

Several ranks, or a requeued job's second attempt, print the same iteration again: the last
occurrence in the file wins. An index that drops by more than RESTART_DROP is a restart
(a requeued job, a resume from a checkpoint): it is remembered, and from then on the run is as
far as its last attempt got.

A step time outside MIN_STEP_SECONDS..MAX_STEP_SECONDS (zero, negative, nan, inf, 1e308,
1e-300), or one that is not a number at all (`9,31`), never counts: the step is not recorded,
its iteration still counts as reached, and the scan keeps the first such value (the run is
Invalid). The same holds for a `nan`/`inf` loss or grad norm, a Megatron `number of nan
iterations` above 0, and any other value of a step line that is not a whole number. The scan
also keeps what the log says about the run itself (llmb.analysis.logscan): the global batch
size of every step line, the largest TFLOPS logged, and what the start-up lines before the first
step state: the world size (Lightning's `Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/16`
and `All distributed processes registered. Starting with 16 processes`, torchrun's
`global_world_sizes=[16, ...]`, Megatron-LM's `using world size: 16, ...`), the configuration's
`seq_length` and `data_parallel_size`, whether it is a training start-up at all, and, for a file
without a step line, whether it is another tool's output (FOREIGN).

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
import stat
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from llmb.analysis import bulk, bulkform, families
from llmb.analysis.failures import GATES
from llmb.analysis.family import Buffer, Family
from llmb.analysis.logscan import (  # noqa: F401 (Step and the limits: this module's API too)
    FACT_NEEDLES,
    MAX_STEP_SECONDS,
    MIN_STEP_SECONDS,
    NOT_STEP,
    RESTART,
    WORLD_NEEDLES,
    LogScan,
    Step,
)

# The published window: iterations 11..44 inclusive, 0-based (seeds 000, 003, 004).
WINDOW = (11, 44)

CHECKPOINT_NEEDLE = b"Global Checkpoint"
# Evidence that a file without step lines is still a training log (NeMo/Megatron/Slurm output).
LOG_MARKERS = (b"[NeMo ", b"nemo_logging", b"Training epoch", b"megatron", b"NeMo", b"srun:",
               b"torch.distributed", b"Traceback (most recent call last)")
# A training job's start-up (NeMo, Lightning, torchrun, Megatron), before any step line.
TRAINING_MARKERS = (b"[NeMo ", b"nemo_logging", b"Training epoch", b"Initializing distributed",
                    b"processes registered", b"global_world_sizes=", b"torch distributed",
                    b"using world size", b"Traceback (most recent call last)")
# Other tools' output that may sit where logs are, named like one: what each always prints.
FOREIGN = {
    "nccl-tests output": (b"# nThread ", b"# Avg bus bandwidth", b"# Out of bounds values"),
    "an Nsight Systems report's text": (b".nsys-rep", b"Generating SQLite file",
                                        b"Kernel Summary ("),
    "a print_env.sh dump": (b"***OS Information***", b"***GPU Information***",
                            b"Click here to see environment details"),
}

CHUNK_BYTES = 1 << 22
# A line is looked for this far around a match first, then as far as it goes.
LINE_REACH = 4096
# A line longer than this is not a log line: not read, wherever it falls in the chunks (in one,
# or across two: an unfinished line carried to the next chunk is at most this long).
MAX_LINE = bulkform.MAX_LINE
HEAD_BYTES = 4096  # what the encoding is told from
# Lines classified per stretch after a step line: enough for any real ending (1024 ranks each
# printing a traceback), and a bound on the work for a log that is nothing but error lines.
EVIDENCE_LINES_MAX = 20000

def _family(scan: LogScan, buf: Buffer, end: int) -> Family | None:
    """The log's family: the one chosen, else the one whose needle comes first here."""
    if scan.log_family is None:
        scan.log_family = families.recognised(buf, end)
    return scan.log_family


def _line_at(buf: Buffer, pos: int, end: int) -> tuple[int, int]:
    """Bounds of the line (split at \\n and \\r) around buf[pos], within buf[:end]; looked
    for LINE_REACH around pos first, then as far as the buffer goes."""
    return bulkform.line(buf, pos, end)


def _lines_with(buf: Buffer, needle: bytes, begin: int, end: int
                ) -> Iterator[tuple[int, int, int]]:
    """(start, stop, needle position) of each line in buf[begin:end] that holds needle, each
    once, in order (none longer than MAX_LINE)."""
    pos = buf.find(needle, begin, end)
    while pos >= 0:
        start, stop = _line_at(buf, pos, end)
        if stop - start <= MAX_LINE:
            yield max(start, begin), stop, pos
        pos = buf.find(needle, max(stop, pos + len(needle)), end)


def _feed(scan: LogScan, buf: Buffer, end: int) -> None:
    """Parse the complete lines in buf[:end]."""
    gap = 0  # where the stretch after the last step line (so far) begins
    after = 0  # just past the last step line's needle
    startup_from = 0  # start-up lines before the first step line: searched up to here
    reader = _family(scan, buf, end)
    rows = bulk.read(buf, end, reader, scan._carry) if reader is not None else None
    if reader is not None and rows is not None and scan.add_rows(rows, ready=lambda: _first(
            scan, buf, rows.first)):
        gap, after = rows.last, rows.after
        scan._carry = None
        scan.drop_checkpoints()
        scan.superseded(False)
        if reader.tail is not None:
            reader.tail(scan, buf, after, end)
    elif reader is not None:
        for start, stop, pos in _lines_with(buf, reader.needle, 0, end):
            if scan._previous is None:
                _startup(scan, buf, startup_from, start)
                startup_from = start
            first = scan._previous is None
            kind = scan.step(reader.read(scan, buf, start, stop, pos, after))
            after = pos + len(reader.needle)
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
        if reader.tail is not None:
            reader.tail(scan, buf, after, end)
    else:  # no family yet: what a reader carries to its first step line may come first
        for each in families.FAMILIES:
            if each.tail is not None:
                each.tail(scan, buf, 0, end)
    if scan._previous is None:
        _startup(scan, buf, startup_from, end)
    if scan.step_lines == 0:
        _what_file(scan, buf, end)
    _checkpoints(scan, buf, gap, end)
    _evidence(scan, buf, gap, end)
    if not scan.looks_like_log:
        scan.looks_like_log = scan.step_lines > 0 or any(
            buf.find(marker, 0, end) >= 0 for marker in LOG_MARKERS)


def _first(scan: LogScan, buf: Buffer, start: int) -> None:
    """Before a log's first step line, read in bulk at `start`: the start-up, and the
    checkpoint lines before it."""
    if scan._previous is None:
        _startup(scan, buf, 0, start)
        _checkpoints(scan, buf, 0, start)
        scan.commit_checkpoints()


def _startup(scan: LogScan, buf: Buffer, begin: int, end: int) -> None:
    """What the lines before the first step line say: the world size (the first line of each
    kind: every rank prints one) and the configuration's facts."""
    for kind, needle in enumerate(WORLD_NEEDLES):
        if kind in scan._world_kinds or buf.find(needle, begin, end) < 0:  # (most: not there)
            continue
        for start, stop, _ in _lines_with(buf, needle, begin, end):
            if scan.world_line(kind, buf[start:stop]):
                break
    for needle in FACT_NEEDLES:
        if scan.seq_length is not None and scan.data_parallel is not None:
            break
        if buf.find(needle, begin, end) < 0:
            continue
        for start, stop, _ in _lines_with(buf, needle, begin, end):
            scan.fact_line(buf[start:stop])
            if (scan.seq_length if needle == b"seq_length" else scan.data_parallel) is not None:
                break


def _what_file(scan: LogScan, buf: Buffer, end: int) -> None:
    """What a file without a step line (so far) is: a training start-up, another tool's output
    (LogScan.finish forgets it once a step line is found: a training log's start-up says no
    more, and it is not looked for in the chunks after the first step line)."""
    if not scan.training:
        scan.training = any(buf.find(m, 0, end) >= 0 for m in TRAINING_MARKERS)
    if scan.foreign is None:
        scan.foreign = next((what for what, marks in FOREIGN.items()
                             if any(buf.find(m, 0, end) >= 0 for m in marks)), None)


def _checkpoints(scan: LogScan, buf: Buffer, begin: int, end: int) -> None:
    for start, stop, _ in _lines_with(buf, CHECKPOINT_NEEDLE, begin, end):
        scan.checkpoint_line(buf[start:stop])


def _evidence(scan: LogScan, buf: Buffer, begin: int, end: int) -> None:
    """Classify the lines in buf[begin:end] that hold a failure gate, in order, each once: the
    first EVIDENCE_LINES_MAX since the last step line."""
    room = EVIDENCE_LINES_MAX - scan.evidence_lines
    lines: dict[int, int] = {}
    for gate in GATES:  # each gate's first `room` lines hold the first `room` lines of all
        found = 0
        for start, stop, _ in _lines_with(buf, gate, begin, end):
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
    if pairs < 8 or 0 not in head:  # (no NUL at all: UTF-8 or ASCII, told without counting)
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
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        # a log that fits a chunk is read in one go (one byte more: it may have grown since),
        # with os.read: a file object costs more than reading a small log
        first = HEAD_BYTES if st.st_size >= chunk_bytes else max(HEAD_BYTES, st.st_size + 1)
        head = os.read(fd, first)
        encoding = wide_encoding(head[:HEAD_BYTES])
        if encoding is None and len(head) < first:  # the whole file
            if head:  # (an empty log: nothing to feed)
                _feed(scan, head, len(head))
        else:
            with os.fdopen(fd, "rb", buffering=0, closefd=False) as f:
                if encoding is not None:
                    scan.encoding = encoding
                    _scan_chunks(scan, _transcoded(f, head, encoding, chunk_bytes))
                else:
                    _scan_file(scan, f, head, chunk_bytes)
    finally:
        os.close(fd)
    scan.finish()
    return scan


_buffers: dict[int, bytearray] = {}  # one buffer per chunk size, reused from log to log


def _scan_file(scan: LogScan, f: io.RawIOBase, head: bytes, chunk_bytes: int) -> None:
    """The UTF-8 path: one buffer, read straight into (no per-chunk allocation); the unfinished
    last line of a chunk moves to the front, the next chunk follows it."""
    buf = _buffers.get(chunk_bytes)
    if buf is None:
        buf = _buffers[chunk_bytes] = bytearray(max(chunk_bytes, HEAD_BYTES) + MAX_LINE
                                                + LINE_REACH)
    view = memoryview(buf)
    try:
        view[:len(head)] = head
        got, held = len(head), 0  # held: bytes of an unfinished line at the front of buf
        skip = False  # the chunk starts inside a line longer than MAX_LINE
        while got:
            end = held + got
            if skip:
                end, skip = _skip_line(buf, view, end)
            held, skip = _take(scan, buf, view, end, held) if end else (0, skip)
            got = f.readinto(view[held:held + chunk_bytes])
        if held:
            _feed(scan, buf, held)
    finally:
        view.release()


def _take(scan: LogScan, buf: bytearray, view: memoryview, end: int, held: int
          ) -> tuple[int, bool]:
    """Feed the complete lines of buf[:end]; move what is left to the front: its length, and
    whether it was a line longer than MAX_LINE (then left out, and the rest of it skipped)."""
    cut = buf.rfind(b"\n", held, end)
    cut = max(cut, buf.rfind(b"\r", max(cut, held), end))  # only past the last \n
    if cut < 0:  # no line end at all yet
        return (0, True) if end > MAX_LINE else (end, False)
    _feed(scan, buf, cut + 1)
    left = end - cut - 1
    if left > MAX_LINE:  # an unfinished line already too long to be one
        return 0, True
    view[:left] = view[cut + 1:end]
    return left, False


def _line_end(buf: Buffer, end: int) -> int:
    """Where buf[:end]'s first line ends (its \\n or \\r), or -1."""
    n = buf.find(b"\n", 0, end)
    r = buf.find(b"\r", 0, n if n >= 0 else end)
    return r if r >= 0 else n


def _skip_line(buf: bytearray, view: memoryview, end: int) -> tuple[int, bool]:
    """buf[:end] starts inside a line longer than MAX_LINE: what follows that line's end, moved
    to the front (its length), and whether the line goes on past buf[:end]."""
    cut = _line_end(buf, end)
    if cut < 0:
        return 0, True
    view[:end - cut - 1] = view[cut + 1:end]
    return end - cut - 1, False


def _transcoded(f: BinaryIO, head: bytes, encoding: str, chunk_bytes: int) -> Iterator[bytes]:
    decoder = codecs.getincrementaldecoder(encoding)(errors="replace")
    data = head
    while data:
        yield decoder.decode(data).lstrip("\ufeff").encode("utf-8", "replace")
        data = f.read(chunk_bytes)
    yield decoder.decode(b"", final=True).encode("utf-8", "replace")


def _scan_chunks(scan: LogScan, chunks: Iterable[bytes]) -> None:
    """Chunks of UTF-8 text of whatever size (a decoded log): the same lines as _scan_file."""
    buf, skip = bytearray(), False  # skip: buf starts inside a line longer than MAX_LINE
    for chunk in chunks:
        buf += chunk
        if skip:
            cut = _line_end(buf, len(buf))
            skip = cut < 0
            del buf[:cut + 1 if cut >= 0 else len(buf)]
        cut = max(buf.rfind(b"\n"), buf.rfind(b"\r"))
        if cut >= 0:
            _feed(scan, buf, cut + 1)
            del buf[:cut + 1]
        if len(buf) > MAX_LINE:  # an unfinished line already too long to be one
            buf.clear()
            skip = True
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
    if last - first < len(steps):  # (the usual window, 34 steps: each looked up, in order)
        return list(filter(steps.__contains__, range(first, last + 1)))
    return sorted(i for i in steps if first <= i <= last)


def stats(values: Iterable[float]) -> WindowStats:
    """Population mean/std, as statistics.pstdev gives them (the seeds' analysis uses it), in
    floats: statistics' exact fractions cost ~100 us a call, which 200,000 logs feel. Values far
    from 1 are scaled first, so that nothing overflows however large they are.

    No values gives nulls: a run that never reached iteration 11 has no steady-state figure,
    and inventing one from warm-up steps would be misleading. Values that are not finite are
    left out.
    """
    data = values if isinstance(values, list) else list(values)
    if not all(map(math.isfinite, data)):
        data = [v for v in data if math.isfinite(v)]
    if not data:
        return WindowStats(0, None, None)
    n = len(data)
    # values far from 1 are scaled down (or up) first, so that their squares stay floats
    scale = max(max(data), -min(data))  # the largest magnitude
    scale = scale if scale and not 1e-100 < scale < 1e100 else 1.0
    scaled = [v / scale for v in data] if scale != 1.0 else data
    mean = math.fsum(scaled) / n
    spread = math.sqrt(math.fsum([(v - mean) ** 2 for v in scaled]) / n)
    return WindowStats(n, mean * scale, spread * scale)


def median(values: Sequence[float]) -> float:
    """statistics.median, without importing statistics (fractions and decimal: start-up time)."""
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2
