"""llmb.llmbrun.suite.baseline: a set's baseline file, checked once where it enters: a regular
file of bounded size, of its type, every GPU type, workload and dtype the set's, every figure a
step time above 0; each refusal one line naming the entry, the value and what would work; and
what `dump` writes, `load` reads back the same."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
from llmb.llmbrun.errors import RunError
from llmb.llmbrun.suite import baseline, sets
from llmb.shared import yamlfile

SET = sets.load("exemplar")


def good() -> dict:
    return {"schema": 1, "set": "exemplar", "release": "v26.08.00", "figure": "step_time_s",
            "scale": 512, "source": "NVIDIA account team, 2026-11-02",
            "baselines": {"h100": {"pretrain_llama3.1_70b": {"bf16": 10.21, "fp8": 7.43},
                                   "pretrain_qwen3_235b": {"bf16": 31}},
                          "gb200": {"pretrain_kimi-k2_1t": {"fp8": 22.5}}}}


def written(tmp_path: Path, data: object, name: str = "base.yaml") -> str:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return str(path)


def test_a_good_file_is_read_into_its_figures(tmp_path):
    base = baseline.load(written(tmp_path, good()), SET)
    assert base.scale == 512
    assert base.figure("h100", "pretrain_llama3.1_70b", "fp8") == 7.43
    assert base.figure("h100", "pretrain_qwen3_235b", "bf16") == 31  # a whole number is one
    assert base.figure("h100", "pretrain_gpt_oss_120b", "bf16") is None
    assert base.figure("b200", "pretrain_qwen3_235b", "bf16") is None
    assert base.describe().endswith("(NVIDIA account team, 2026-11-02)")


def test_json_is_taken_too(tmp_path):
    import json

    base = baseline.load(written(tmp_path, json.dumps(good()), "base.json"), SET)
    assert base.figure("gb200", "pretrain_kimi-k2_1t", "fp8") == 22.5


def test_dump_reads_back_the_same(tmp_path):
    base = baseline.load(written(tmp_path, good()), SET)
    again = baseline.load(written(tmp_path, baseline.dump(base.data), "again.yaml"), SET)
    assert again.data == base.data and again.sha256 == base.sha256


def entry(value: object) -> dict:
    data = good()
    data["baselines"]["h100"]["pretrain_llama3.1_70b"]["fp8"] = value
    return data


BAD = [
    (entry(float("nan")), "baselines.h100.pretrain_llama3.1_70b.fp8 is nan (a number), not a "
     "finite number; give the step time in seconds, a number above 0"),
    (entry(float("inf")), "baselines.h100.pretrain_llama3.1_70b.fp8 is inf (a number)"),
    (entry(-7.43), "baselines.h100.pretrain_llama3.1_70b.fp8 is -7.43; give the step time in "
     "seconds, a number above 0 and at most 86400"),
    (entry(0), "baselines.h100.pretrain_llama3.1_70b.fp8 is 0; give the step time"),
    (entry(1e9), "baselines.h100.pretrain_llama3.1_70b.fp8 is 1000000000.0; give the step"),
    (entry("7.43"), "baselines.h100.pretrain_llama3.1_70b.fp8 is '7.43' (text), not a number; "
     "give the step time"),
    (entry(True), "baselines.h100.pretrain_llama3.1_70b.fp8 is true (true or false)"),
    (entry(None), "baselines.h100.pretrain_llama3.1_70b.fp8 is null"),
    ({**good(), "baselines": {"h100": {"pretrain_llama3.1_8b": {"fp8": 1.0}}}},
     "baselines.h100.pretrain_llama3.1_8b is not a workload of the exemplar set on h100; give "
     "one of pretrain_gpt_oss_120b, pretrain_llama3.1_70b, pretrain_nemotron-h_56b, "
     "pretrain_qwen3_235b"),
    ({**good(), "baselines": {"h200": {}}}, "baselines.h200 is not a GPU type of the exemplar "
     "set; give one of gb300, gb200, b300, b200, h100"),
    ({**good(), "baselines": {"h100": {"pretrain_qwen3_235b": {"fp8": 1.0}}}},
     "baselines.h100.pretrain_qwen3_235b.fp8 is not a dtype of pretrain_qwen3_235b in the set; "
     "give one of bf16"),
    ({**good(), "figure": "tokens_per_s"}, "figure is 'tokens_per_s' (text), not one of "),
    ({**good(), "set": "mlperf"}, "set is mlperf; the suite ran the exemplar set"),
    ({**good(), "schema": 2}, "schema is 2; this llmb reads schema 1"),
    ({**good(), "scale": 0}, "scale is 0; give the GPUs the figures were measured on, e.g. 512"),
    ({k: v for k, v in good().items() if k != "scale"}, "the record has no scale"),
    ({**good(), "comment": "x" * 5000}, "comment is 'xxxxxxxx"),
    ([1, 2], "the record is a list of 2 item(s)"),
]


@pytest.mark.parametrize(("data", "message"), BAD, ids=[m[:50] for _, m in BAD])
def test_a_bad_entry_is_one_line_naming_it(tmp_path, data, message):
    path = written(tmp_path, data)
    with pytest.raises(RunError) as err:
        baseline.load(path, SET)
    text = str(err.value)
    assert text.startswith(f"--baseline {path}") and "\n" not in text
    assert message in text, text


def test_a_huge_file_is_refused_without_reading_it_whole(tmp_path):
    path = tmp_path / "huge.yaml"
    with path.open("wb") as fh:
        fh.truncate(yamlfile.MAX_YAML_BYTES + 1)
    with pytest.raises(RunError, match=rf"is larger than {yamlfile.MAX_YAML_BYTES} bytes"):
        baseline.load(str(path), SET)


def test_a_fifo_a_directory_and_a_missing_file_are_one_line(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # no writer: a blocking read would hang the test
    with pytest.raises(RunError, match="not a regular file"):
        baseline.load(str(fifo), SET)
    with pytest.raises(RunError, match="Is a directory"):
        baseline.load(str(tmp_path), SET)
    with pytest.raises(RunError, match="No such file or directory"):
        baseline.load(str(tmp_path / "none.yaml"), SET)


def test_not_yaml_and_a_key_given_twice_are_one_line(tmp_path):
    with pytest.raises(RunError, match="is not valid YAML"):
        baseline.load(written(tmp_path, "baselines: [\n"), SET)
    with pytest.raises(RunError, match="the key scale is given twice"):
        baseline.load(written(tmp_path, "scale: 1\nscale: 2\n"), SET)


def test_save_writes_a_new_file_only(tmp_path):
    data = baseline.load(written(tmp_path, good()), SET).data
    target = tmp_path / "mine.yaml"
    baseline.save(target, data)
    assert baseline.load(str(target), SET).data == data
    with pytest.raises(RunError, match="exists; choose another name"):
        baseline.save(target, data)
    with pytest.raises(RunError, match="is not a directory"):
        baseline.save(tmp_path / "no" / "such.yaml", data)
