"""llmb.analysis.stepline: a step line's values are read whole or refused, never in part; and
end to end, a log whose numbers cannot be read that way is Invalid, not a fast Success."""

from __future__ import annotations

import json
from typing import Any

import pytest
from analyzercli import run_analyzer
from llmb.analysis import stepline
from llmb.container import nemolog
from logformats import dll_record, progress_bar
from paths import LOGS

TRUST = LOGS / "trust"
LINE = nemolog.step_line(iteration=11, last_iteration=49, lr=1.5e-05, global_batch_size=128,
                         global_step=11, reduced_train_loss=11.96, train_step_timing=12.39,
                         tflops_per_gpu=1134.4, consumed_samples=1536)
BAR = ("Epoch 0: : 100%|###| 100/100 [07:57<00:00, reduced_train_loss=7.310, "
       "global_step=99.00, consumed_samples=25600.0, train_step_timing in s=3.590]")


def test_a_nemo_step_line_and_a_progress_bar() -> None:
    line = stepline.parse(LINE)
    assert line is not None
    assert (line.iteration, line.final, line.time, line.tflops, line.gbs) == (
        11, 49, 12.39, 1134.0, 128)
    assert line.refused is None and line.nonfinite is None
    bar = stepline.parse(BAR)
    assert bar is not None and (bar.iteration, bar.final, bar.time, bar.gbs) == (99, 99, 3.59, None)


@pytest.mark.parametrize("record_first", [False, True])
def test_the_most_precise_step_time_on_a_line_is_read(record_first: bool) -> None:
    """A progress bar and a DLLogger record on one line: the record's full value, not the
    bar's three decimals (0.3% apart here), whichever comes first."""
    bar, record = progress_bar(100, 100, 3.5901234), dll_record(99, 3.5901234)
    line = stepline.parse(record + bar if record_first else bar + record)
    assert line is not None and (line.iteration, line.final) == (99, 99)
    assert (line.time, line.time_text) == (3.5901234, "3.5901234")
    assert stepline.parse(bar + dll_record(99, 3.6)).time == 3.59  # (3 digits against 2)


@pytest.mark.parametrize(("text", "count"), [("3.590", 4), ("3.5901234", 8), ("0.0042", 2),
                                             ("1.5e-05", 2), ("-12", 2), ("nan", 0), ("9,31", 0)])
def test_significant_digits(text: str, count: int) -> None:
    assert stepline.digits(text) == count


@pytest.mark.parametrize(("text", "value"), [
    ("610.2", 610.2), ("1.5e-05", 1.5e-05), ("1.134e+03", 1134.0), ("-3", -3.0), (".5", 0.5),
    ("12.39,", 12.39),  # the progress bar's separator
])
def test_whole_numbers(text: str, value: float) -> None:
    assert stepline.number(text) == value


@pytest.mark.parametrize("text", ["1_000", "9,31", "0x10", "١٢", "1e", ".", "--5", "12.39s",
                                  "", "1.2.3", "NaNa"])
def test_anything_else_is_no_number(text: str) -> None:
    assert stepline.number(text) is None


def test_a_value_that_is_not_a_number_is_refused_not_cut() -> None:
    # float("1_000") is 1000 and a regex for a number reads 9,31 as 9: neither may happen.
    comma = stepline.parse(LINE.replace("12.39", "9,31"))
    assert comma is not None and comma.time is None and comma.time_text == "9,31"
    underscore = stepline.parse(LINE.replace("1.134e+03", "1_000"))
    assert underscore is not None and underscore.tflops is None
    assert underscore.refused == ("TFLOPS_per_GPU", "1_000")
    gbs = stepline.parse(LINE.replace("global_batch_size: 128", "global_batch_size: 12_8"))
    assert gbs is not None and gbs.gbs is None and gbs.refused == ("global_batch_size", "12_8")
    half = stepline.parse(LINE.replace("global_batch_size: 128", "global_batch_size: 127.5"))
    assert half is not None and half.gbs is None and half.refused == ("global_batch_size", "127.5")
    whole = stepline.parse(LINE.replace("global_batch_size: 128", "global_batch_size: 128.0"))
    assert whole is not None and whole.gbs == 128 and whole.refused is None


def test_nan_loss_is_kept_as_such() -> None:
    line = stepline.parse(LINE.replace("reduced_train_loss: 11.96", "reduced_train_loss: nan"))
    assert line is not None and line.nonfinite == ("reduced_train_loss", "nan")


def test_absurd_values_are_shown_short() -> None:
    digits = f"{1e308:.0f}"
    assert len(digits) == 309
    assert stepline.short(digits) == digits[:21] + "... (309 characters)"
    assert stepline.short("610.2") == "610.2"


@pytest.fixture(scope="module")
def trust() -> dict[str, dict[str, Any]]:
    proc = run_analyzer(["--format=json", str(TRUST)])
    return {r["filename"].split("/")[0]: r for r in json.loads(proc.stdout)["results"]}


def test_decimal_commas_are_not_read_as_whole_seconds(trust: dict[str, dict[str, Any]]) -> None:
    """9,31 s read as 9 s made a run 3% faster than it was: a pass it did not earn."""
    r = trust["comma-decimals"]
    assert r["status"] == "Invalid" and r["time_mean"] is None
    assert "34 step time(s) are not a plausible number of seconds (first: 9,31 at iteration " \
           "11" in r["reason"]


def test_an_underscored_tflops_is_refused(trust: dict[str, dict[str, Any]]) -> None:
    r = trust["underscore-tflops"]
    assert r["status"] == "Invalid"
    assert "50 step line value(s) are not numbers (first: TFLOPS_per_GPU '1_000' at iteration 0)" \
        in r["reason"]
    assert r["tflops_source"] == "computed"  # from the model FLOPs, never 1
