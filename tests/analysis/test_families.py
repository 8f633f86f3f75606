"""llmb.analysis.families: every family is one object the scan and the bulk read ask, recognised
by the needle its step lines hold."""

from __future__ import annotations

from pathlib import Path

import pytest
from llmb.analysis import bulk, families, family_steptime, timing
from llmb.analysis.family import Family
from logformats import MegatronStep, megatron_startup, nemo_step


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


def rank0_lines(count: int = 50) -> list[str]:
    """What Megatron-Bridge's rank 0 prints: its start-up, then a Step Time line a step."""
    return megatron_startup(8, 8) + [MegatronStep(k, 50, 4189.6 + k, 1610.2).step_time_text()
                                     for k in range(1, count + 1)]


def scanned(tmp_path: Path, lines: list[str]) -> timing.LogScan:
    log = tmp_path / "log.out"
    log.write_text("\n".join(lines) + "\n")
    return timing.scan_log(log)


def test_rank_0s_log_is_read_from_its_step_time_lines(tmp_path: Path) -> None:
    """One line per iteration in order, from iteration 1 (step index 0); the final index from
    the start-up's train_iters; the step time and TFLOPS as the lines print them."""
    scan = scanned(tmp_path, rank0_lines())
    assert scan.log_family is family_steptime.STEP_TIME and scan.label(0) == 1
    assert (scan.final_index, scan.max_iteration, len(scan.steps)) == (49, 49, 50)
    assert scan.steps[0] == timing.Step(4.19, 1610.2) and scan.steps[49] == timing.Step(4.24,
                                                                                        1610.2)
    assert scan.complete() and scan.world_size == 8
    partial = scanned(tmp_path, rank0_lines(23))  # a run that stopped: as far as it got
    assert (partial.max_iteration, partial.final_index, partial.complete()) == (22, 49, False)
    no_config = scanned(tmp_path, rank0_lines()[len(megatron_startup(8, 8)):])
    assert len(no_config.steps) == 50 and no_config.final_index is None  # the manifest's then


def test_a_log_with_iteration_lines_is_megatrons_and_counts_each_step_once(
        tmp_path: Path) -> None:
    """Every rank's output in one file (or the last rank's): the Step Time lines are the
    iteration lines' companions, not steps of their own, glued or not."""
    for glued in (False, True):
        lines = megatron_startup(8, 8) + [x for k in range(1, 51) for x in MegatronStep(
            k, 50, 4189.6, 1610.2).lines(glued)]
        scan = scanned(tmp_path, lines)
        assert scan.family == "megatron" and scan.step_lines == 50 and len(scan.steps) == 50
        assert scan.steps[0] == timing.Step(4.1896, 1610.2)


@pytest.mark.parametrize(("text", "name"), [
    (MegatronStep(1, 50, 4189.6, 1610.2).step_time_text(), None),  # once: a companion, maybe
    ("\n".join(MegatronStep(1, 50, 4189.6, 1610.2).lines(False) * 2), "megatron"),
    ("\n".join([MegatronStep(1, 50, 4189.6, 1610.2).step_time_text()] * 2), "bridge-step-time"),
])
def test_step_time_lines_are_a_family_only_alone_and_twice(text: str, name: str | None) -> None:
    buf = (text + "\n").encode()
    found = families.recognised(buf, len(buf))
    assert (found.name if found is not None else None) == name


@pytest.mark.parametrize(("config", "final"), [
    (["train:", "  train_iters: 50"], 49), (["  max_train_iters: 9", "  train_iters: 20"], 19),
    (["  train_iters: 0"], None), (["  train_iters: 5.5"], None), ([], None)])
def test_rank_0s_final_iteration_is_its_configurations_train_iters(
        tmp_path: Path, config: list[str], final: int | None) -> None:
    scan = scanned(tmp_path, config + rank0_lines(3)[len(megatron_startup(8, 8)):])
    assert scan.final_index == final and sorted(scan.steps) == [0, 1, 2]
