"""llmb.llmbrun.screen.health: each GPU health fact, as the tasks gather it (llmb.container.
gpuhealth asking the nvidia-smi test double, tests/e2e/bin/nvidia-smi, told the fact), named on
a GPU screen: memory errors whatever the GPU's speed, a throttle, a power cap or a narrow PCIe
link only with the slow figure it explains."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import screenfiles
from llmb.container import gpuhealth
from llmb.llmbrun.screen import health, results
from llmb.recipes import catalog
from paths import E2E_BIN

H100_GPU = catalog.get_gpu_type("h100")

NODES, PER_NODE = screenfiles.NODES, screenfiles.PER_NODE


def sampled(monkeypatch, gpu: int, facts: str) -> dict[str, Any]:
    """What a task on (physical) GPU `gpu` records, the double told `facts`."""
    monkeypatch.setenv("PATH", f"{E2E_BIN}:/usr/bin:/bin")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", str(gpu))
    monkeypatch.setenv("NVIDIA_SMI_DOUBLE_FACTS", facts)
    got = gpuhealth.Sampler(f"GPU-00000000-0000-0000-0000-{gpu:012d}").facts()
    assert got is not None
    return got


def screen(folder: Path, monkeypatch, facts: dict[int, str], **kwargs: Any) -> dict[str, Any]:
    """A GPU screen whose task of rank r told the double facts[r] (a healthy GPU else)."""
    screenfiles.write_screen(folder, repeats=5, mode="gpu", **kwargs)
    for path in sorted((folder / "ranks").glob("rank-*.json")):
        rank = json.loads(path.read_text())
        rank["health"] = sampled(monkeypatch, rank["local_rank"], facts.get(rank["rank"], ""))
        path.write_text(json.dumps(rank))
    doc = results.document(folder, H100_GPU, NODES, PER_NODE)
    assert doc is not None
    return dict(doc)


@pytest.mark.parametrize(("fact", "why"), [
    ("ecc.errors.uncorrected.volatile.total=2", "2 uncorrectable ECC error(s)"),
    ("remapped_rows.pending=Yes", "a remapped memory row waits for a GPU reset"),
    ("remapped_rows.failure=Yes", "a memory row remap failed"),
    ("retired_pages.pending=Yes", "a retired memory page waits for a GPU reset")])
def test_a_memory_error_names_the_gpu_whatever_its_speed(tmp_path, monkeypatch, fact, why):
    doc = screen(tmp_path, monkeypatch, {3: f"1:{fact}"})  # node2's GPU 1
    (named,) = doc["named"]
    assert (named["kind"], named["name"], named["figure"]) == ("gpu", "node2 GPU 1", "health")
    assert named["why"].startswith(why)
    assert doc["suspects"] == ["node2"]
    node2 = doc["nodes"][1]
    assert node2["verdict"] == "unhealthy" and node2["gpus"][1]["verdict"] == "unhealthy"
    assert node2["gpus"][1]["figures"] == doc["nodes"][0]["gpus"][1]["figures"]  # not slow


def test_healthy_gpus_name_nothing_and_keep_their_facts(tmp_path, monkeypatch):
    doc = screen(tmp_path, monkeypatch, {})
    assert (doc["named"], doc["suspects"]) == ([], [])
    facts = doc["nodes"][0]["gpus"][0]["health"]
    assert facts["ecc_uncorrected"] == 0 and facts["throttle"] == []
    assert (facts["power_limit_w"], facts["pcie_gen"], facts["pcie_width"]) == (
        700.0, [5, 5], [16, 16])


def test_a_throttle_alone_names_nothing(tmp_path, monkeypatch):
    doc = screen(tmp_path, monkeypatch, {2: "0:clocks_throttle_reasons.active=0x40"})
    assert doc["named"] == []
    assert doc["nodes"][1]["gpus"][0]["health"]["throttle"] == ["hardware thermal slowdown"]


def test_a_throttle_and_a_power_cap_explain_a_slow_gpu(tmp_path, monkeypatch):
    doc = screen(tmp_path, monkeypatch, {2: "0:clocks_throttle_reasons.active=0x44;"
                                            "0:enforced.power.limit=400.00 W"})
    node2 = doc["nodes"][1]["gpus"][0]
    assert health.slows_compute(node2["health"]) == [
        "software power cap active", "hardware thermal slowdown active",
        "power limit 400 W of its default 700 W"]
    # the same GPU slow: the facts come with the figure they explain
    path = tmp_path / "ranks" / "rank-00002.json"
    rank = json.loads(path.read_text())
    rank["repeats"]["matmul_bf16_tflops"] = [v * 0.7 for v in rank["repeats"][
        "matmul_bf16_tflops"]]
    path.write_text(json.dumps(rank))
    doc = dict(results.document(tmp_path, H100_GPU, NODES, PER_NODE) or {})
    (named,) = doc["named"]
    assert (named["name"], named["figure"]) == ("node2 GPU 0", "matmul_bf16_tflops")
    assert named["explained_by"] == ["hardware thermal slowdown active",
                                     "power limit 400 W of its default 700 W",
                                     "software power cap active"]
    assert "; explained by: hardware thermal slowdown active" in named["why"]


def test_a_narrow_pcie_link_explains_a_slow_network(tmp_path, monkeypatch):
    slow = {"pairs-1:node2,node3": 30.0, "pairs-2:node1,node3": 31.0}  # node3's pairs
    doc = screen(tmp_path, monkeypatch, {4: "0:pcie.link.width.current=8"}, slow=slow)
    named = {(n["kind"], n["name"]): n for n in doc["named"]}
    node3 = named[("node", "node3")]
    assert node3["figure"] == "pairs busbw_gbps"
    assert node3["explained_by"] == ["node3: PCIe link Gen5 x8 of Gen5 x16"]
    assert doc["suspects"] == ["node3"]
