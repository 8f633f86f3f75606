"""llmb.analysis.timing: step lines of both forms, last occurrence wins, the window, streaming."""

from __future__ import annotations

import statistics
import tracemalloc
from pathlib import Path

import pytest
from llmb.analysis import timing
from llmb.container import nemolog

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "logs" / "experiments"
VERDICT_FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "logs" / "verdicts"

PIPE = ("Training epoch 0, iteration {i}/{last} | lr: 1.5e-05 | global_batch_size: 128 | "
        "global_step: {i} | reduced_train_loss: 11.96 | train_step_timing in s: {t} | "
        "TFLOPS_per_GPU: {f} | consumed_samples: 1536")


def pipe(i: int, t: str, f: str = "610.2", last: int = 49) -> str:
    return PIPE.format(i=i, t=t, f=f, last=last)


def test_pipe_form_reads_iteration_time_tflops_and_final_index() -> None:
    scan = timing.scan_lines([pipe(11, "12.39"), pipe(12, "12.41", "1.134e+03")])
    assert scan.steps == {11: timing.Step(12.39, 610.2), 12: timing.Step(12.41, 1134.0)}
    assert scan.final_index == 49
    assert scan.max_iteration == 12
    assert not scan.complete()


def test_any_denominator_and_completion() -> None:
    # NeMo prints iteration {i}/{max_steps - 1}: 99/99 is the last step of a 100-step run.
    assert timing.scan_lines([pipe(i, "1.0", last=99) for i in range(100)]).complete()
    assert not timing.scan_lines([pipe(i, "1.0", last=99) for i in range(99)]).complete()
    assert timing.scan_lines([pipe(4, "1.0", last=4)]).complete()


def test_ansi_colours_and_crlf_are_ignored() -> None:
    line = ("\x1b[32m[NeMo I 2025-04-11 14:48:45 nemo_logging:393]\x1b[0m \x1b[1m"
            + pipe(20, "15.86", "1.2e+03") + "\x1b[0m\r\n")
    scan = timing.scan_lines([line.encode()])
    assert scan.steps == {20: timing.Step(15.86, 1200.0)}


def test_progress_bar_form_with_carriage_returns() -> None:
    # {done}/{total} counts finished steps: 100/100 is index 99, the final one.
    draws = []
    for done in (99, 100):
        draws.append(f"Epoch 0: : {done}%|#########9| {done}/100 [07:57<00:00, "
                     f"reduced_train_loss=7.310, global_step={done - 1}.00, "
                     f"consumed_samples=25600.0, train_step_timing in s=3.{done}0]")
    stale = draws[1].replace("3.1000", "9.999")
    scan = timing.scan_lines([("\r".join([draws[0], stale, draws[1]]) + "\n").encode()])
    assert scan.steps == {98: timing.Step(3.99), 99: timing.Step(3.1)}
    assert scan.final_index == 99
    assert scan.complete()


def test_same_iteration_again_last_occurrence_wins() -> None:
    # A requeued job prints iterations 0..20 twice; two ranks print iteration 30 twice.
    lines = [pipe(i, "30.0") for i in range(21)]
    lines += ["slurmstepd: error: *** STEP 389757.0 CANCELLED DUE TO NODE FAILURE, REQUEUE ***"]
    lines += [pipe(i, "21.5") for i in range(31)]
    lines += ["8: " + pipe(30, "21.7")]
    scan = timing.scan_lines(lines)
    assert scan.steps[20].time == 21.5
    assert scan.steps[30].time == 21.7
    assert list(scan.steps)[-1] == 30


def test_missing_tflops_and_global_step_only_lines() -> None:
    line = pipe(15, "2.7").replace(" | TFLOPS_per_GPU: 610.2", "")
    scan = timing.scan_lines([line, "global_step: 16 | train_step_timing in s: 2.8"])
    assert scan.steps == {15: timing.Step(2.7, None), 16: timing.Step(2.8, None)}
    # The log's own denominator (49) says the run is not complete at 16.
    assert not scan.complete(final_index=16)
    only_global = timing.scan_lines(["global_step: 4 | train_step_timing in s: 2.8"])
    assert only_global.final_index is None
    assert only_global.complete(final_index=4)  # e.g. the manifest's max_steps - 1


def test_lines_without_usable_numbers_are_counted_not_recorded() -> None:
    scan = timing.scan_lines(["train_step_timing in s: nan | iteration 3/49",
                              "something about train_step_timing"])
    assert scan.steps == {} and scan.step_lines == 2 and scan.looks_like_log


def test_checkpoint_lines() -> None:
    scan = timing.scan_lines([
        nemolog.checkpoint_save_line(0, 50, 1744408121.151, 4.389),
        nemolog.checkpoint_load_line(0, 1744407969.270, 9.712),
    ])
    assert (scan.checkpoint_save_s, scan.checkpoint_load_s) == (4.389, 9.712)


def test_reads_what_the_smoke_workload_prints() -> None:
    line = nemolog.step_line(iteration=11, last_iteration=49, lr=1.5e-05, global_batch_size=128,
                             global_step=11, reduced_train_loss=11.96, train_step_timing=12.39,
                             tflops_per_gpu=1134.4, consumed_samples=1536)
    assert "1.134e+03" in line
    assert timing.scan_lines([line]).steps == {11: timing.Step(12.39, 1134.0)}


def test_window_is_11_to_44_inclusive_and_std_is_population() -> None:
    steps = {i: timing.Step(float(i)) for i in range(50)}
    idx = timing.window_values(steps)
    assert idx == list(range(11, 45))
    result = timing.stats(steps[i].time for i in idx)
    assert result.count == 34
    assert result.mean == pytest.approx(27.5)  # (11 + 44) / 2
    assert result.std_dev == pytest.approx(statistics.pstdev(range(11, 45)))
    assert result.std_dev != pytest.approx(statistics.stdev(range(11, 45)))


def test_window_with_no_steps_gives_nulls() -> None:
    assert timing.stats([]) == timing.WindowStats(0, None, None)
    assert timing.window_values({i: timing.Step(1.0) for i in range(11)}) == []


@pytest.mark.parametrize("log", sorted([*FIXTURES.rglob("log-*.out"),
                                        *VERDICT_FIXTURES.rglob("log-*.out")]),
                         ids=lambda p: p.parent.parent.name)
def test_chunk_boundaries_do_not_change_the_result(log: Path) -> None:
    # Steps, reasons (evidence after the last step line, restarts) and all.
    whole = timing.scan_log(log)
    for size in (7, 64, 4096):
        assert timing.scan_log(log, chunk_bytes=size) == whole


def test_huge_unterminated_run_and_binary_garbage(tmp_path: Path) -> None:
    path = tmp_path / "log-garbage.out"
    with open(path, "wb") as f:
        f.write(bytes(range(256)) * 4 * 4096)  # 4 MiB with some \n and \r
        f.write(b"x" * (3 << 20))  # 3 MiB without a line end
        f.write(b"\n" + pipe(44, "5.5").encode() + b"\n\xff\xfe")
    scan = timing.scan_log(path)
    assert scan.steps == {44: timing.Step(5.5, 610.2)}


def test_memory_stays_bounded_however_large_the_log(tmp_path: Path) -> None:
    path = tmp_path / "log-big.out"
    noise = (b"[NeMo I 2025-04-11 14:48:45 nemo_logging:393] mem-allocated-gigabytes: 31.2\n" * 200)
    with open(path, "wb") as f:
        for i in range(600):  # ~9 MB
            f.write(noise)
            f.write(pipe(i, "1.5", last=599).encode() + b"\n")
    tracemalloc.start()
    scan = timing.scan_log(path)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert scan.complete() and len(scan.steps) == 600
    assert peak < 4 * timing.CHUNK_BYTES + (1 << 20)


# --- what a log states besides its step times ----------------------------------------------

TRUST = Path(__file__).resolve().parents[1] / "fixtures" / "logs" / "trust"


def trust_log(case: str) -> Path:
    [log] = (TRUST / case).rglob("log-*.out")
    return log


@pytest.mark.parametrize("case", ["utf16", "utf16-nobom"])
def test_a_utf16_log_reads_like_its_utf8_twin(case: str) -> None:
    """A Windows redirect writes UTF-16 (with or without a byte-order mark): the same run."""
    scan = timing.scan_log(trust_log(case))
    assert scan.encoding == "utf-16-le"
    twin = timing.scan_lines(trust_log(case).read_bytes().decode("utf-16").splitlines())
    assert scan.steps == twin.steps and len(scan.steps) == 50
    assert scan.complete() and scan.world_size == 8 and scan.gbs == 128
    for size in (7, 4096):  # a chunk may end inside a two-byte character
        assert timing.scan_log(trust_log(case), chunk_bytes=size).steps == scan.steps


def test_utf16_detection_needs_the_pattern_not_a_stray_nul() -> None:
    assert timing.wide_encoding(b"\xff\xfeT\x00r\x00") == "utf-16-le"
    assert timing.wide_encoding("Training epoch 0".encode("utf-16-be")) == "utf-16-be"
    assert timing.wide_encoding(b"Training epoch 0, iteration 1/49\x00 | lr: 1e-05") is None
    assert timing.wide_encoding(bytes(range(256)) * 4) is None


def test_step_lines_longer_than_4kb_are_read_whole() -> None:
    log = trust_log("long-lines")
    assert min(len(line) for line in log.read_bytes().splitlines()
               if b"train_step_timing" in line) > 4096
    scan = timing.scan_log(log)
    assert scan.complete() and scan.final_index == 49 and len(scan.steps) == 50
    assert scan.steps[11] == timing.Step(9.31, 814.6)  # odd iterations 9.31 s, even 9.33 s
    for size in (64, 5000):
        assert timing.scan_log(log, chunk_bytes=size) == scan


def test_world_size_from_the_start_up_lines_only() -> None:
    lines = ["Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/16",
             "All distributed processes registered. Starting with 16 processes",
             pipe(0, "1.0"), "Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/64"]
    scan = timing.scan_lines(lines)
    assert scan.world_sizes == {16: "Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/16"}
    torchrun = timing.scan_lines(["  global_world_sizes=[8, 8, 8, 8, 8, 8, 8, 8]", pipe(0, "1")])
    assert torchrun.world_size == 8
    mixed = timing.scan_lines(["12: Initializing distributed: GLOBAL_RANK: 11, MEMBER: 12/16",
                               "0: All distributed processes registered. Starting with 32 "
                               "processes", pipe(0, "1.0")])
    assert list(mixed.world_sizes) == [16, 32]


def test_gbs_and_largest_tflops_and_what_disagrees() -> None:
    lines = [pipe(i, "1.0", f="610.2") for i in range(5)]
    lines.append(pipe(5, "1.0", f="1.5e+03").replace("global_batch_size: 128",
                                                     "global_batch_size: 1"))
    scan = timing.scan_lines(lines)
    assert (scan.gbs, scan.gbs_change, scan.tflops_max) == (128, (5, 1), (1500.0, 5, "1.5e+03"))


def test_final_index_changes_and_iterations_beyond_it_are_kept() -> None:
    scan = timing.scan_lines([pipe(0, "1.0", last=99), pipe(1, "1.0", last=49),
                              pipe(60, "1.0", last=49)])
    assert scan.final_change == (1, 99, 49) and scan.beyond_final == (60, 49)
    clean = timing.scan_lines([pipe(i, "1.0", last=4) for i in range(5)])
    assert clean.final_change is None and clean.beyond_final is None


def test_checkpoint_lines_count_before_the_first_step_and_after_the_last() -> None:
    save = nemolog.checkpoint_save_line(0, 50, 1744408121.151, 4.389)
    load = nemolog.checkpoint_load_line(0, 1744407969.270, 9.712)
    scan = timing.scan_lines([load, pipe(0, "1.0"), save.replace("4.389", "1.0"), pipe(1, "1.0"),
                              save])
    assert (scan.checkpoint_save_s, scan.checkpoint_load_s) == (4.389, 9.712)
    mid = timing.scan_lines([pipe(0, "1.0"), save, pipe(1, "1.0")])  # a save between steps
    assert mid.checkpoint_save_s is None
