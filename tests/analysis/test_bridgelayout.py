"""A Megatron-Bridge run's layout read from the configuration summary its rank 0 prints."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from llmb.analysis import bridgelayout
from llmb.analysis.bridgelayout import Layout
from llmb.container import megatronlog

QWEN = {"pipeline_model_parallel_size": 8, "virtual_pipeline_model_parallel_size": 3,
        "expert_model_parallel_size": 32}


def test_the_summary_gives_the_layout_and_defaults_fill_what_it_leaves_out() -> None:
    lines = megatronlog.startup_lines(256, 8, 4096, 8192, 50, mbs=1, layout=QWEN)
    assert bridgelayout.parse(lines) == Layout(tp=1, pp=8, cp=1, vp=3, ep=32, gbs=8192, mbs=1,
                                               seq_len=4096)


def test_older_yaml_is_read_too_and_a_log_without_either_has_no_layout() -> None:
    yaml = ["model:", "  tensor_model_parallel_size: 2", "  virtual_pipeline_model_parallel_size:"
            " None", "train:", "  global_batch_size: 128", "  micro_batch_size: 2",
            "dataset:", "  seq_length: 8192"]
    assert bridgelayout.parse(yaml) == Layout(2, 1, 1, None, 1, 128, 2, 8192)
    assert bridgelayout.parse(["iteration 1/ 50 | elapsed time per iteration (ms): 1.0 |"]) is None
    assert bridgelayout.parse(["model:", "  tensor_model_parallel_size: None"]) is None


def test_a_log_file_is_read_from_its_head(tmp_path: Path) -> None:
    log = tmp_path / "log.out"
    head = megatronlog.startup_lines(64, 4, 4096, 1280, 50, mbs=4,
                                     layout={"expert_model_parallel_size": 16})
    log.write_text("\n".join(["noise"] * 100 + head + ["Step Time : 1.00s GPU utilization: "
                                                        "1.0MODEL_TFLOP/s/GPU"] * 10) + "\n")
    assert bridgelayout.read(log) == Layout(1, 1, 1, None, 16, 1280, 4, 4096)
    assert bridgelayout.read(tmp_path / "missing.out") is None


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(st.sampled_from(" [](): \n0123456789Nonea_z-=\t"), max_size=400),
                max_size=30))
def test_any_text_gives_a_layout_or_none_never_an_error(lines: list[str]) -> None:
    found = bridgelayout.parse(lines)
    assert found is None or isinstance(found, Layout)
