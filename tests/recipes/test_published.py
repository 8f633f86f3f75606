"""The published Megatron-Bridge numbers (common/references/megatron-bridge.yaml): the loader's
checks, the data's shape, the step time a row implies and the rule that matches a run to a row.

The known row is DeepSeekV3 on 256 DGX-GB300 in MXFP8 of the 26.08 container, read by hand at
Megatron-Bridge v0.6.0, docs/performance-summary.md line 45:
| DGX-GB300 | 256 | MXFP8 | 4096 | 1 | 4096 | 1 | 2 | 1 | 8 | 32 | 6288 | 1635 |
The archive publishes the same configuration for 26.06.01 (line 50, 6304) and 26.06 (line 112,
6338).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest
import yaml
from llmb.recipes import published
from llmb.recipes.published import PublishedError, Run
from paths import TESTS

SUMMARY = "docs/performance-summary.md"
ARCHIVE = "docs/performance-summary-archive.md"
ROWS_PER_FILE = {SUMMARY: 18, ARCHIVE: 275}
ROWS_PER_CONTAINER = {"26.08": 18, "26.06.01": 14, "26.06": 41, "26.04.01": 47, "26.04": 44,
                      "26.02.01": 36, "26.02": 33, "25.11": 32, "25.09": 28}

DEEPSEEK_GB300 = Run(model="deepseek_v3", gpu_type="gb300", gpus=256, precision="MXFP8",
                     gbs=4096, mbs=1, seq_len=4096, tp=1, pp=2, cp=1, vp=8, ep=32)


def rows() -> tuple[published.Row, ...]:
    return published.load()


def at(file: str, line: int, precision: str | None = None) -> published.Row:
    found = [r for r in rows() if r.file == file and r.line == line
             and (precision is None or r.precision == precision)]
    assert len(found) == 1, found
    return found[0]


# --- the loader ---------------------------------------------------------------------------

def first_row() -> dict[str, object]:
    """The data file's first row as written (the file's first line that starts a row)."""
    text = published.REFERENCES_FILE.read_text()
    line = next(ln for ln in text.splitlines() if ln.startswith("  - {"))
    return dict(yaml.safe_load(line.removeprefix("  - ")))


def write(tmp_path: Path, rows_: list[dict[str, object]], **top: object) -> Path:
    doc = {"source": {"repository": "NVIDIA-NeMo/Megatron-Bridge", "ref": "v0.6.0",
                      "commit": "0" * 40}, "rows": rows_, **top}
    path = tmp_path / "references.yaml"
    path.write_text(json.dumps(doc))  # JSON is YAML
    return path


@pytest.mark.parametrize(("change", "field", "says"), [
    ({"gpus": 0}, "gpus", "whole number of at least 1"),
    ({"gbs": "4096"}, "gbs", "whole number"),
    ({"mbs": True}, "mbs", "whole number"),
    ({"fsdp": -1}, "fsdp", "at least 0"),
    ({"tokens_per_sec_per_gpu": 0}, "tokens_per_sec_per_gpu", "above 0"),
    ({"precision": "fp8"}, "precision", "fp8_cs"),
    ({"task": "train"}, "task", "pretrain"),
    ({"gpu_type": "a100"}, "gpu_type", "gb300"),
    ({"gpu_type": "gb200"}, "gpu_type", "make them agree"),
    ({"precision_published": "BF16"}, "precision", "make them agree"),
    ({"model": "DeepSeek V3"}, "model", "lower-case"),
    ({"container": 26.08}, "container", "quoted"),
    ({"parenthesized": "no"}, "parenthesized", "true or false"),
    ({"tp": None}, "tp", "whole number"),
    ({"footnote": ""}, "footnote", "non-empty"),
    ({"ep_size": 8}, "ep_size", "unknown field"),
    ({"seq_len": dataclasses.MISSING}, "seq_len", "lacks field"),
])
def test_a_bad_row_is_refused_in_one_line_naming_file_row_and_field(
        tmp_path: Path, change: dict[str, object], field: str, says: str) -> None:
    good = first_row()
    bad = {k: v for k, v in {**good, **change}.items() if v is not dataclasses.MISSING}
    path = write(tmp_path, [good, bad])
    with pytest.raises(PublishedError) as caught:
        published.load(path)
    message = str(caught.value)
    assert "\n" not in message
    assert f"{path} row 2" in message and field in message and says in message


@pytest.mark.parametrize(("doc", "says"), [
    ({"rows": []}, "rows is list; give a list of rows"),
    ({"rows": [{"gpus": 8}]}, "row 1 lacks field 'file'"),
    ({"rows": ["a row"]}, "row 1 is str"),
    ({"notes": "x"}, "a mapping of source"),
    ({"source": {"repository": "x", "ref": ""}}, "source is"),
    ({"source": {"repository": "x", "ref": "", "commit": "c"}}, "source.ref is ''"),
])
def test_a_bad_file_is_refused_in_one_line(
        tmp_path: Path, doc: dict[str, object], says: str) -> None:
    path = write(tmp_path, [first_row()], **doc)
    with pytest.raises(PublishedError) as caught:
        published.load(path)
    assert "\n" not in str(caught.value)
    assert str(path) in str(caught.value) and says in str(caught.value)


# --- the data -----------------------------------------------------------------------------

def test_the_data_has_every_published_row_of_each_file_and_container() -> None:
    per_file = {f: sum(r.file == f for r in rows()) for f in ROWS_PER_FILE}
    per_container = {c: sum(r.container == c for r in rows()) for c in ROWS_PER_CONTAINER}
    assert per_file == ROWS_PER_FILE
    assert per_container == ROWS_PER_CONTAINER
    assert len(rows()) == sum(ROWS_PER_FILE.values())
    assert {(r.repository, r.ref) for r in rows()} == {("NVIDIA-NeMo/Megatron-Bridge", "v0.6.0")}
    assert {r.task for r in rows()} == {"pretrain", "sft", "lora"}


def test_the_known_row_and_the_step_time_it_implies() -> None:
    row = at(SUMMARY, 45)
    assert (row.container, row.model, row.model_published, row.system, row.gpu_type) == (
        "26.08", "deepseek_v3", "DeepSeekV3", "DGX-GB300", "gb300")
    assert (row.gpus, row.precision, row.precision_published, row.gbs, row.mbs, row.seq_len) == (
        256, "fp8_mx", "MXFP8", 4096, 1, 4096)
    assert (row.tp, row.pp, row.cp, row.vp, row.ep, row.fsdp) == (1, 2, 1, 8, 32, None)
    assert (row.tokens_per_sec_per_gpu, row.model_tflops_per_gpu) == (6288, 1635)
    # 4096 x 4096 tokens / (6288 tokens/s/GPU x 256 GPUs) = 16777216 / 1609728 s
    assert published.step_time(row) == pytest.approx(10.42239, abs=1e-5)


def test_a_cell_with_parentheses_gives_two_rows() -> None:
    """25.11, DGX-GB300, LLAMA3_8B: 'FP8-CS (FP8-MX)', '37556 (36108)', '1933 (1858)'."""
    main, alt = at(ARCHIVE, 552, "fp8_cs"), at(ARCHIVE, 552, "fp8_mx")
    assert (main.precision_published, main.tokens_per_sec_per_gpu, main.parenthesized) == (
        "FP8-CS", 37556, False)
    assert (alt.precision_published, alt.tokens_per_sec_per_gpu, alt.model_tflops_per_gpu,
            alt.parenthesized) == ("FP8-MX", 36108, 1858, True)
    # 25.09 prints no precision: its parenthesized FP8 is the finer one (fp8_sc on H100)
    h100 = [r for r in rows() if r.container == "25.09" and r.gpu_type == "h100"]
    assert {r.precision for r in h100} == {"fp8_cs", "fp8_sc"}
    assert all(r.precision_published is None for r in h100)


# --- matching -----------------------------------------------------------------------------

def test_an_exact_match_is_the_newest_container_and_names_the_older_ones() -> None:
    found = published.match(DEEPSEEK_GB300)
    assert not found.no_reference
    assert found.reference == at(SUMMARY, 45)
    assert found.others == (at(ARCHIVE, 50), at(ARCHIVE, 112))
    assert found.describe().startswith(f"published reference: {SUMMARY}:45 (26.08 pretrain")
    assert published.step_time(found.reference) == pytest.approx(10.42239, abs=1e-5)


def test_vp_and_ep_not_used_are_one_and_fsdp_is_compared_where_given() -> None:
    h100 = Run(model="llama3_70b", gpu_type="h100", gpus=64, precision="FP8-CS", gbs=128,
               mbs=1, seq_len=8192, tp=4, pp=8, vp=5)
    assert published.match(dataclasses.replace(h100, ep=1)).reference == at(ARCHIVE, 590)
    assert published.match(dataclasses.replace(h100, fsdp=0)).reference == at(ARCHIVE, 590)
    assert published.match(dataclasses.replace(h100, fsdp=8)).differing == ("fsdp",)
    assert published.match(dataclasses.replace(h100, vp=None)).differing == ("vp",)


def test_a_near_miss_names_the_nearest_row_and_the_fields_that_differ() -> None:
    miss = published.match(dataclasses.replace(DEEPSEEK_GB300, tp=2, gbs=2048))
    assert miss.no_reference and miss.reference is None
    # 26.08, 26.06.01 and 26.06 publish the same configuration: the tie goes to the newest
    assert miss.nearest == at(SUMMARY, 45)
    assert miss.differing == ("gbs", "tp")
    assert miss.describe() == (
        f"no published reference; nearest is {SUMMARY}:45 (26.08 pretrain: DeepSeekV3 on 256x "
        "DGX-GB300, MXFP8), differing in gbs 2048 (published 4096), tp 2 (published 1)")


def test_the_nearest_row_is_of_the_same_model_and_gpu_type_before_fewer_differences() -> None:
    """Rank: same model and GPU type, then same model, then same GPU type, then any; within
    a rank, the fewest differing fields."""
    gb200 = at(SUMMARY, 46)
    run = Run(model="deepseek_v3", gpu_type="gb300", gpus=256, precision="fp8_mx", gbs=4096,
              mbs=1, seq_len=4096, tp=1, pp=4, cp=1, vp=4, ep=64)
    assert published.differing(run, gb200) == ("gpu_type",)
    miss = published.match(run)  # a GB300 row of DeepSeekV3, however many fields it differs in
    assert miss.nearest is not None
    assert (miss.nearest.model, miss.nearest.gpu_type) == ("deepseek_v3", "gb300")
    assert "gpu_type" not in miss.differing and len(miss.differing) > 1
    # Kimi K2 is published on GB300 only: an H100 run of it is nearest to a GB300 row of it
    kimi = published.match(dataclasses.replace(run, model="kimi_k2", gpu_type="h100"))
    assert kimi.nearest is not None and kimi.nearest.model == "kimi_k2"
    assert kimi.differing[0] == "gpu_type"
    # a model never published: the nearest row is of the same GPU type
    other = published.match(dataclasses.replace(run, model="mixtral_8x7b"))
    assert other.nearest is not None and other.nearest.gpu_type == "gb300"
    assert other.differing[0] == "model"


@pytest.mark.parametrize(("text", "key"), [
    ("BF16", "bf16"), ("bf16", "bf16"), ("FP8", "fp8_cs"), ("FP8-CS", "fp8_cs"),
    ("fp8_cs", "fp8_cs"), ("FP8-MX", "fp8_mx"), ("MXFP8", "fp8_mx"), ("fp8_mx", "fp8_mx"),
    ("fp8_sc", "fp8_sc"), ("NVFP4", "nvfp4"), (" nvfp4 ", "nvfp4"),
])
def test_precision_spellings_normalize(text: str, key: str) -> None:
    assert published.normalize_precision(text) == key


def test_an_unknown_precision_is_refused_in_one_line() -> None:
    with pytest.raises(PublishedError) as caught:
        published.match(dataclasses.replace(DEEPSEEK_GB300, precision="fp16"))
    assert "\n" not in str(caught.value) and "'fp16'" in str(caught.value)
    assert "fp8_mx" in str(caught.value)


def test_every_published_precision_text_normalizes_to_the_row_precision() -> None:
    texts = {r.precision_published: r.precision for r in rows() if r.precision_published}
    assert set(texts) == {"BF16", "FP8", "FP8-CS", "FP8-MX", "MXFP8", "NVFP4"}
    assert all(published.normalize_precision(t) == k for t, k in texts.items())


# --- the generator ------------------------------------------------------------------------

def generator() -> ModuleType:
    path = TESTS / "tools" / "bridge_references.py"
    spec = importlib.util.spec_from_file_location("bridge_references", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SNIPPET = """\
## 26.06.01 NeMo Container

### Pre-Training Performance

#### Model: GPT OSS 120B

| System | #-GPUs | Precision | GBS | MBS | Sequence Length | TP | PP | CP | VP | EP | Tokens / sec / GPU | Model TFLOP / sec / GPU |
|--------|--------|-----------|-----|-----|-----------------|----|----|----|----|----|-----------------------|-------------------------|
| DGX-GB300 | 64 | MXFP8 | 1280 | 4 | 4096 | 1 | 1 | 1 | n/a | 16 | 20288 | 661[^gpt-oss-note] |

## 25.09 NeMo Container

### Pre-Training Performance

#### System: DGX-GB200

| Model | #-GPUs | GBS | MBS | Sequence Length | FSDP | TP | PP | CP | VP | EP | GA | Tokens / sec / GPU | Model TFLOP / sec / GPU |
|-------|--------|-----|-----|-----------------|------|----|----|----|----|----|----|-----------------------|-------------------------|
| LLAMA3_70B | 64 | 128 | 2 | 8192 | 64 (0) | 1 (2) | 1 (4) | 1 | 1 (5) | 1 | 1 (16) | 3986 (3546) | 1791 (1593) |
"""  # noqa: E501


def test_the_generator_reads_both_table_forms() -> None:
    made = list(generator().rows("x.md", SNIPPET))
    assert [(r["line"], r["container"], r["precision"], r["parenthesized"]) for r in made] == [
        (9, "26.06.01", "fp8_mx", False), (19, "25.09", "fp8_cs", False),
        (19, "25.09", "fp8_mx", True)]
    assert (made[0]["vp"], made[0]["model_tflops_per_gpu"], made[0]["footnote"]) == (
        None, 661, "gpt-oss-note")
    alt = made[2]
    assert (alt["fsdp"], alt["tp"], alt["pp"], alt["cp"], alt["vp"], alt["ga"]) == (
        0, 2, 4, 1, 5, 16)
    assert (alt["tokens_per_sec_per_gpu"], alt["model"], alt["gpu_type"]) == (
        3546, "llama3_70b", "gb200")
