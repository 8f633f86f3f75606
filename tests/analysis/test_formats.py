"""llmb.analysis.formats: table layout and names, CSV columns, JSON validity."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

import pytest
from llmb.analysis import formats


def result(**fields: Any) -> dict[str, Any]:
    r: dict[str, Any] = dict.fromkeys(formats.RESULT_FIELDS)
    r.update(status="Success", filename="exp/run/log-exp_123_0.out", path="/x/log-exp_123_0.out")
    r.update(fields)
    return r


def analysis(*results: dict[str, Any]) -> dict[str, Any]:
    ok = sum(r["status"] == "Success" for r in results)
    return {
        "analysis": {"directory": "/x", "window": {"first_iteration": 11, "last_iteration": 44}},
        "results": list(results),
        "skipped": [{"path": "exp/sbatch_exp_1.out", "reason": "sbatch output"}],
        "summary": {"logs": len(results), "success": ok, "failed": len(results) - ok,
                    "unreadable": sum(bool(r["error"]) for r in results), "skipped": 1,
                    "skipped_by_reason": {"sbatch output": 1}},
    }


IDENTIFIED = {"recipe": "nemotronh", "model_size": "56b", "dtype": "fp8", "gpu_type": "h100",
              "num_gpus": 128, "scaling": "weak", "time_mean": 15.858, "time_std_dev": 1.2621,
              "tflops_per_gpu_mean": 532.394, "tflops_per_gpu_std_dev": 472.7449,
              "tflops_source": "log", "tokens_per_second": 396701.9, "mfu": 0.26915,
              "time_to_train_days": 29.1762, "reference_step_time": 15.496,
              "pct_of_reference": 97.717, "max_iteration": 49}


def test_table_keeps_the_seed_header_and_number_formats() -> None:
    text = formats.to_table(analysis(result(**IDENTIFIED)))
    lines = text.splitlines()
    assert lines[0] == "Train Step Timing and TFLOPS Analysis (iterations 11-44)"
    assert set(lines[1]) == {"="}
    assert lines[2].split() == ["Experiment", "Status", "Time", "Mean", "(s)", "Time", "Std",
                                "(s)", "TFLOPS_per_GPU", "Mean", "TFLOPS_per_GPU", "Std"]
    assert lines[4].split() == ["nemotronh", "56b", "fp8", "128gpu", "Success", "15.858",
                                "1.262", "532.39", "472.74"]
    assert "Tokens/s" in text and "MFU %" in text and "% of ref" in text
    derived = next(line for line in lines if line.startswith("nemotronh") and "weak" in line)
    assert derived.split()[-5:] == ["396702", "26.91", "29.18", "15.496", "97.7"]
    assert lines[-1] == "Summary: 1 log(s): 1 Success, 0 Failed; skipped 1 sbatch output"
    assert max(map(len, lines)) <= 100


def test_unknown_values_print_as_dashes_and_errors_are_listed() -> None:
    text = formats.to_table(analysis(result(status="Failed", filename="log-x.out",
                                           error="cannot read: dangling symbolic link")))
    row = text.splitlines()[4]
    assert row.split()[-5:] == ["Failed", "-", "-", "-", "-"]
    assert "unreadable: log-x.out: cannot read: dangling symbolic link" in text


def test_computed_tflops_are_marked() -> None:
    text = formats.to_table(analysis(result(**{**IDENTIFIED, "tflops_source": "computed"})))
    assert "532.39*" in text and "* computed from the model FLOPs" in text


def test_short_names_add_only_what_distinguishes() -> None:
    a = result(**IDENTIFIED, filename="e/r/log-e_111_0.out")
    b = result(**IDENTIFIED, filename="e/r/log-e_222_0.out")
    c = result(**{**IDENTIFIED, "scaling": "strong", "global_batch_size": 512})
    d = result(**{**IDENTIFIED, "gpu_type": "gb200", "num_gpus": 256})
    names = formats.display_names([a, b, c, d], full_names=False)
    assert names == ["nemotronh 56b fp8 128gpu #111", "nemotronh 56b fp8 128gpu #222",
                     "nemotronh 56b fp8 128gpu strong", "nemotronh 56b fp8 256gb200"]
    same = formats.display_names([result(experiment="x"), result(experiment="x")], False)
    assert same == ["x #123", "x #123 (2)"]


def test_labels_one_at_a_time_are_the_same_names() -> None:
    """The table names rows as it writes them: each stretch of runs sharing a short name (the
    analysis's order puts them together) is told apart on its own."""
    rows = [result(**IDENTIFIED, filename=f"e/r/log-e_{n}_0.out") for n in (111, 222)]
    rows.append(result(**{**IDENTIFIED, "scaling": "strong", "global_batch_size": 512}))
    rows += [result(**{**IDENTIFIED, "num_gpus": 256}) for _ in range(3)]
    rows += [result(experiment="x"), result(experiment="x"), result(experiment="y")]
    assert list(formats.labels(rows, False)) == formats.display_names(rows, False)
    assert list(formats.labels(iter(rows), True)) == formats.display_names(rows, True)


def test_unidentified_names_are_cut_in_the_middle_and_escaped() -> None:
    long = "pretrain_" + "abcdefghij" * 6 + "_tail"
    [name] = formats.display_names([result(experiment=long)], full_names=False)
    assert len(name) == formats.SHORT_NAME_MAX and name.startswith("abcdef")
    assert name.endswith("j_tail") and "..." in name
    [full] = formats.display_names([result(filename="a\nb\x1b/log.out")], full_names=True)
    assert full == "a\\nb\\x1b/log.out"


def test_csv_established_columns_first_and_empty_for_null() -> None:
    text = formats.to_csv([result(**IDENTIFIED, filename='we"ird,\nname.out')])
    rows = list(csv.reader(io.StringIO(text)))
    assert tuple(rows[0][:7]) == formats.ESTABLISHED_FIELDS
    assert rows[0] == list(formats.RESULT_FIELDS)
    record = dict(zip(rows[0], rows[1], strict=True))
    assert record["filename"] == 'we"ird,\nname.out'
    assert record["time_mean"] == "15.858" and record["error"] == ""


@pytest.mark.parametrize("name", ['sp ace', 'q"uote\'s', "new\nline", "日本語", "\udcff"])
def test_json_is_valid_for_any_name(name: str) -> None:
    text = formats.to_json(analysis(result(filename=name, experiment=name)))
    data = json.loads(text)
    assert data["results"][0]["filename"] == name
    assert text.isascii()
    assert set(data) == {"analysis", "results", "skipped", "summary"}


def test_csv_escapes_control_characters_a_terminal_would_act_on() -> None:
    name = "run\x1b[2J\x07\x9b\x7f\x00\r.out"
    text = formats.to_csv([result(**IDENTIFIED, filename=name, experiment="=\x1b]0;x\x07")])
    assert not any(c in text for c in "\x1b\x07\x9b\x7f\x00\r")
    record = dict(zip(*csv.reader(io.StringIO(text)), strict=True))
    assert record["filename"] == "run\\x1b[2J\\x07\\x9b\\x7f\\x00\\r.out"
    assert record["experiment"] == "'=\\x1b]0;x\\x07"
