"""llmb.analysis.families: every family is one object the scan and the bulk read ask, recognised
by the needle its step lines hold."""

from __future__ import annotations

import pytest
from llmb.analysis import bulk, families, timing
from llmb.analysis.family import Family
from logformats import MegatronStep, nemo_step


def test_each_family_is_registered_once_under_its_own_name() -> None:
    names = [f.name for f in families.FAMILIES]
    assert len(set(names)) == len(names) and dict(zip(
        names, families.FAMILIES, strict=True)) == families.BY_NAME
    assert all({"tflops", "gbs"} <= set(f.field_names) for f in families.FAMILIES)


@pytest.mark.parametrize(("lines", "name"), [
    ([nemo_step(i, 49, 9.31, 814.6) for i in range(50)], "nemo"),
    ([x for k in range(1, 51) for x in MegatronStep(k, 50, 4189.6, 1610.2).lines(False)],
     "megatron"),
])
def test_a_log_is_recognised_by_its_first_needle_and_read_by_its_family(
        lines: list[str], name: str) -> None:
    buf = ("noise\n" + "\n".join(lines) + "\n").encode()
    found = families.recognised(buf, len(buf))
    assert isinstance(found, Family) and found.name == name
    by_object, by_name = bulk.read(buf, len(buf), found), bulk.read(buf, len(buf), name)
    assert by_object is not None and by_object == by_name and by_object.index == list(range(50))
    scan = timing.scan_lines(lines)
    assert scan.family == name and scan.log_family is found
    assert scan.label(0) == found.first_iteration
    assert scan.name("gbs") == found.field_names["gbs"]


def test_a_file_without_a_step_line_has_no_family() -> None:
    assert families.recognised(b"nothing here\n", 13) is None
    scan = timing.scan_lines(["nothing here"])
    assert scan.family is None and scan.label(11) == 11
