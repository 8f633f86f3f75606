"""llmb.container.gpuhealth: what nvidia-smi says of a screen task's GPU, asked of the nvidia-smi
test double (tests/e2e/bin/nvidia-smi: the GPUs CUDA_VISIBLE_DEVICES names, a healthy H100's
facts unless told otherwise, and a driver's refusal of a field it does not know)."""

from __future__ import annotations

import pytest
from llmb.container import gpuhealth
from paths import E2E_BIN

UUID = "GPU-00000000-0000-0000-0000-{:012d}"


@pytest.fixture(autouse=True)
def double(monkeypatch):
    monkeypatch.setenv("PATH", f"{E2E_BIN}:/usr/bin:/bin")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5")
    monkeypatch.delenv("NVIDIA_SMI_DOUBLE_FACTS", raising=False)
    monkeypatch.delenv("NVIDIA_SMI_DOUBLE_LACKS", raising=False)


def test_identity_of_every_visible_gpu():
    rows = gpuhealth.identity_rows()
    assert [(r["index"], r["uuid"], r["pci.bus_id"]) for r in rows] == [
        ("0", UUID.format(4), "00000000:1C:00.0"), ("1", UUID.format(5), "00000000:1D:00.0")]
    assert {r["driver_version"] for r in rows} == {"570.124.06"}


def test_health_sampled_while_busy(monkeypatch):
    monkeypatch.setenv("NVIDIA_SMI_DOUBLE_FACTS", "5:ecc.errors.uncorrected.volatile.total=3;"
                       "5:remapped_rows.pending=Yes;5:clocks_throttle_reasons.active=0x40")
    facts = gpuhealth.Sampler(UUID.format(5)).facts()
    assert facts is not None
    assert (facts["ecc.errors.uncorrected.volatile.total"], facts["remapped_rows.pending"],
            facts["clocks_throttle_reasons.active"]) == ("3", "Yes", "0x40")
    assert (facts["enforced.power.limit"], facts["pcie.link.width.current"]) == ("700.00", "16")
    assert facts["retired_pages.pending"] is None  # [N/A] on a GPU that remaps rows instead
    assert (facts["sampled"], facts["unknown_fields"]) == ("while busy", [])
    healthy = gpuhealth.Sampler(UUID.format(4)).facts()
    assert healthy is not None and healthy["ecc.errors.uncorrected.volatile.total"] == "0"


def test_a_field_the_driver_lacks_is_left_out_and_said(monkeypatch):
    monkeypatch.setenv("NVIDIA_SMI_DOUBLE_LACKS", "clocks_throttle_reasons.active,serial")
    rows, unknown = gpuhealth.query(gpuhealth.IDENTITY)
    assert unknown == ["serial"] and len(rows) == 2 and "serial" not in rows[0]
    facts = gpuhealth.Sampler(UUID.format(4)).facts()
    assert facts is not None
    assert facts["unknown_fields"] == ["clocks_throttle_reasons.active"]
    assert facts["sampled"] == "after the work" and facts["temperature.gpu"] == "45"


def test_without_nvidia_smi_nothing_is_said(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    assert gpuhealth.identity_rows() == []
    assert gpuhealth.Sampler(UUID.format(4)).facts() is None
