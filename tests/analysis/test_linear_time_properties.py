"""Every reader of log text runs in time linear in its line (hypothesis): each line the analyzer
reads, as its program prints it (NeMo's step line, progress bar and DLLogger record, Megatron's
iteration line and Step Time line, with it or alone, a checkpoint, world-size, configuration and
failure line), with a run of 100,000 characters of one class its expressions use (digits, `_`,
blanks, `|`, `:`, `=`, letters, fields between, ...) put anywhere in it, with or without a
character after the run that no expression expects, read by every reader and by the whole scan,
in bulk and line by line.

Not a speed test: the bound (SECONDS) is one that a linear reader meets many times over on any
machine (a few hundredths of a second here), and that an expression which backtracks over the
run (time quadratic in its length: minutes) cannot."""

from __future__ import annotations

import os
import tempfile

from deadline import deadline
from hostilelines import hostile_lines
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from llmb.analysis import bulk, failures, megatron_steps, stepline, timing
from logformats import OPTIONAL, MegatronStep, dll_record, nemo_step, progress_bar

SECONDS = 10  # for ~100,000 characters through every reader
SLOW = "time more than linear in the line's length (an expression backtracking over it)"
LENGTH = 100_000
STEP = MegatronStep(12, 50, 4189.6, 1610.2, extra=frozenset(OPTIONAL))
LINES = [
    nemo_step(11, 49, 12.39),
    nemo_step(11, 49, 12.39, tflops=None),
    progress_bar(50, 100, 3.59),
    STEP.iteration_text(),
    STEP.step_time_text() + STEP.iteration_text(),
    STEP.step_time_text(),  # rank 0's, alone (llmb.analysis.family_steptime)
    progress_bar(50, 100, 3.59) + dll_record(49, 3.5901234),
    "  train_iters: 50",
    "Global Checkpoint Save : Rank: 0 : Iteration: 50 : Save duration: 4.389s",
    "Global Checkpoint Load : Rank: 0 : load_checkpoint: 12.5s",
    "Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/16",
    "All distributed processes registered. Starting with 16 processes",
    "global_world_sizes=[16, 16]", "using world size: 16, data-parallel size: 2",
    "seq_length: 8192", "seq_length ........ 8192", "data_parallel_size=2",
    "0: [rank0]: [E411 15:31:12.1234 f.cpp:616] torch.OutOfMemoryError: CUDA out of memory",
    "slurmstepd: error: *** JOB 2201360 ON nid001301 CANCELLED AT 2025-04-11T16:18:45 DUE TO "
    "TIME LIMIT ***",
    "srun: error: nid001240: tasks 32-39: Exited with exit code 1",
    "srun: error: Node failure on nid001503",
    "error: Unexpected result nan on node: nid001 found NaN in local grad norm",
    "error UBBAR:SM 3 [2]:expecting 5 got 4",
    "[rank3]: Watchdog caught collective operation timeout",
]
# What each run is made of: every character class the expressions use, and the pieces of the
# lines they read (a field between, a key, a blank before a bracket, an ANSI colour).
UNITS = ["1", "_", " ", "|", ":", "=", ".", ",", "a", "A", "*", "-", "[", "]", "/", "\t",
         " | a: 1", " a: 1 |", " | lr: 1", "1 ", "1.", "1e", "_1", "a.", "A ", ": ", " : ",
         "iteration ", "\x1b[1", "\x1b[", ", ", "*** ", "BAR", "nan"]
TAILS = ["", "x", "_", "\x00", "|", " ***", "]"]


def hostile_line() -> st.SearchStrategy[str]:
    """A real line with a run of one class of characters put anywhere in it."""
    return hostile_lines(LINES, UNITS, TAILS, LENGTH)


def read_every_way(line: str) -> None:
    """The line through every reader, and the scan of logs holding it (bulk and line by line,
    before a step line and after one, from a file in chunks)."""
    stepline.parse(line)
    megatron_steps.parse(line)
    megatron_steps.companion(line)
    failures.classify(line)
    for word in line.split():
        stepline.number(word)
        stepline.digits(word)
    data = line.encode("utf-8", "replace")
    for family in ("nemo", "megatron", "bridge-step-time"):
        bulk.read(data + b"\n", len(data) + 1, family)
    for before in ([], [nemo_step(0, 49, 1.0)], [STEP.iteration_text()]):
        timing.scan_lines([*before, line])
    # a NeMo log, and rank 0's Step Time log (its family is picked on two of its lines)
    for after in (nemo_step(12, 49, 1.0), STEP.step_time_text()):
        with tempfile.NamedTemporaryFile("wb", suffix=".out", delete=False) as f:
            f.write(data + b"\n" + after.encode() + b"\n" + after.encode() + b"\n")
        try:
            timing.scan_log(f.name, chunk_bytes=1 << 16)
        finally:
            os.unlink(f.name)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hostile_line())
# what was found quadratic: a value of digits and `_`, NeMo's and Megatron's; fields between
# and no TFLOPS; a checkpoint's duration
@example(nemo_step(11, 49, 12.39).replace("12.39", "1" * LENGTH + "_"))
@example(STEP.iteration_text().replace("4189.6", "1" * LENGTH + "_"))
@example(nemo_step(11, 49, 12.39, tflops=None).replace(" | consumed", " | a: 1" * (LENGTH // 7)))
@example("Global Checkpoint Save : Rank: 0 : Save duration: " + "1" * LENGTH + "_s")
@example(STEP.step_time_text().replace("4.19", "1" * LENGTH + "_"))
@example("  train_iters: " + "1" * LENGTH)
@example(progress_bar(50, 100, 3.59) + dll_record(49, 3.5901234).replace(
    "3.5901234", "0" * LENGTH + "1"))
@example("srun: error: " + "A" * LENGTH)
@example("slurmstepd: error: *** JOB 1 CANCELLED AT " + "," * LENGTH)
def test_a_line_of_any_content_is_read_in_linear_time(line: str) -> None:
    with deadline(SECONDS, SLOW):
        read_every_way(line)


def test_a_step_line_is_read_wherever_the_chunks_end(tmp_path) -> None:
    """A step line near MAX_LINE, or past it, gives the same scan at any offset around the
    chunk size: read in full up to MAX_LINE, never read past it (not cut at a chunk's end)."""
    chunk = 1 << 16
    for size in (timing.MAX_LINE - 10, timing.MAX_LINE + 1, timing.MAX_LINE + chunk):
        for make in (lambda i, s=size: long_nemo(i, s), lambda i, s=size: long_megatron(i, s)):
            first = make(11)
            expect = None
            for offset in (0, 1, chunk - 100, chunk - 1, chunk, chunk + 1, 3 * chunk + 7):
                log = tmp_path / f"log-{size}-{offset}.out"
                log.write_bytes(b"x" * max(0, offset - 1) + b"\n"[:offset] + first + b"\n"
                                + make(12) + b"\n")
                scan = timing.scan_log(log, chunk_bytes=chunk)
                got = (scan.steps, scan.step_lines, scan.final_index)
                assert got == (expect if expect is not None else got), (size, offset)
                expect = got
            read = size <= timing.MAX_LINE
            assert len(expect[0]) == (2 if read else 0), size  # both, or neither: too long


def long_nemo(i: int, size: int) -> bytes:
    """A NeMo step line of `size` bytes (fields between make it long)."""
    line = nemo_step(i, 49, 1.5).encode()
    fill = b" | tokens_per_sec_per_gpu: 1"
    head, tail = line.split(b" | consumed_samples")
    body = head + fill * ((size - len(line)) // len(fill))
    return body + b" " * (size - len(body) - len(tail) - 19) + b" | consumed_samples" + tail


def long_megatron(i: int, size: int) -> bytes:
    """A Megatron iteration line of `size` bytes (a long prefix before its time stamp)."""
    line = MegatronStep(i, 50, 1500.0).iteration_text().encode()
    return b"-" * (size - len(line)) + line
