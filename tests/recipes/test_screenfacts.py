"""llmb.recipes.screenfacts: gpus.yaml's `screen:` block, what llmb-run screen expects of one
healthy GPU of each type (each figure with its public source and a tolerance), checked, and
kept equal to the table of docs/screen.md, "Expected figures"."""

from __future__ import annotations

import re

import pytest
from llmb.recipes import catalog, screenfacts
from paths import REPO


def test_every_gpu_type_has_screen_expectations_with_a_public_source():
    for name in catalog.gpu_types():
        gpu = catalog.get_gpu_type(name)
        found = screenfacts.expectations(gpu)
        assert set(found) == {"matmul_bf16_tflops", "matmul_fp8_tflops", "memory_gbps",
                              "nvlink_busbw_gbps"}
        # the matrix multiply is held to the dense peak the MFU figures use: one number
        assert found["matmul_bf16_tflops"].expected == gpu.peak_tflops["bf16"]
        assert found["matmul_fp8_tflops"].expected == gpu.peak_tflops["fp8"]
        for e in found.values():
            assert 0 < e.floor < e.expected and "nvidia.com/" in e.source
    h100 = screenfacts.expectations(catalog.get_gpu_type("h100"))
    assert (h100["matmul_bf16_tflops"].expected, h100["memory_gbps"].expected) == (989, 3350)
    assert h100["nvlink_busbw_gbps"].expected == 900 / 2  # one direction of 900 GB/s


@pytest.mark.parametrize(("block", "message"), [
    ({"memory": {}}, "unknown key"),
    ({"memory_gbps": {"expected": 1, "tolerance": 0.1}}, "missing key.*source"),
    ({"memory_gbps": {"expected": "3 TB/s", "tolerance": 0.1, "source": "x"}},
     "must be numbers"),
    ({"memory_gbps": {"expected": 3350, "tolerance": 1.0, "source": "x"}},
     "tolerance at least 0 and below 1"),
    ({"memory_gbps": {"expected": 0, "tolerance": 0.1, "source": "x"}}, "must be positive"),
    ({"matmul": {"tolerance": 0.4, "source": " "}}, "source must name"),
    ([1], "expected a mapping"),
])
def test_a_screen_block_that_cannot_be_used_is_refused(block, message):
    found = screenfacts.problem("gpus.yaml: h100.screen", block)
    assert found is not None and re.search(message, found), found
    assert screenfacts.problem("gpus.yaml: h100.screen", None) is None


def test_readme_screen_table_is_gpus_yaml():
    """docs/screen.md's "Expected figures" table shows gpus.yaml's figures and tolerances, no
    others."""
    text = (REPO / "docs" / "screen.md").read_text().split("## Expected figures")[1]
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:6]]
            for line in text.splitlines() if line.startswith(("| H100", "| B200", "| GB200"))}
    names = {"H100 SXM": "h100", "B200": "b200", "GB200": "gb200"}
    assert set(rows) == set(names)
    for label, gpu in names.items():
        e = screenfacts.expectations(catalog.get_gpu_type(gpu))
        figures = [f"{e['matmul_bf16_tflops'].expected:g} / {e['matmul_fp8_tflops'].expected:g}",
                   f"{e['memory_gbps'].expected:g}", f"{e['nvlink_busbw_gbps'].expected:g}"]
        assert rows[label][:3] == figures, label
        head = next(line for line in text.splitlines() if line.startswith("| GPU | matmul"))
        for key in ("matmul_bf16_tflops", "memory_gbps", "nvlink_busbw_gbps"):
            assert f"(-{e[key].tolerance:.0%}".replace("%", " %") in head
