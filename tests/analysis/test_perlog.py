"""llmb.analysis.perlog: one log's outcome as a worker sends it back: a result with its
configuration, why it is skipped, or why it cannot be read; plain data either way."""

from __future__ import annotations

import json
import os
import pickle
import shutil
from pathlib import Path

from llmb.analysis.identify import Manifests
from llmb.analysis.perlog import LogAnalyzer, Task
from paths import LOGS

GOOD = LOGS / "verdicts" / "pretrain_llama3.1_8b_fp8_gpus8_tp1_pp1_cp2_vpNone_mbs1_gbs128"
CUSTOM = LOGS / "experiments" / "custom-nemotron-run"


def test_a_log_becomes_a_result_with_its_configuration(tmp_path: Path) -> None:
    analyzer = LogAnalyzer(str(LOGS), None, (11, 44))
    log = next(GOOD.rglob("log-*.out"))
    outcome = analyzer(Task(str(LOGS), str(log)))
    assert outcome.result is not None and outcome.skipped is None
    assert outcome.result["config_key"] == "llama3.1/8b/fp8/h100/8gpu/weak/gbs128"
    assert outcome.result["status"] == "Success"
    assert pickle.loads(pickle.dumps(outcome)) == outcome  # what a worker sends back


def test_the_manifest_beside_it_identifies_it_and_its_problem_is_passed_on(tmp_path: Path
                                                                          ) -> None:
    shutil.copytree(CUSTOM, tmp_path / "custom")
    [log] = (tmp_path / "custom").rglob("log-*.out")
    analyzer = LogAnalyzer(str(tmp_path), None, (11, 44))
    outcome = analyzer(Task(str(tmp_path), str(log), Manifests().near(str(log))))
    assert outcome.result is not None and outcome.result["identified_by"] == "manifest"
    [manifest] = (tmp_path / "custom").rglob("llmb_manifest.json")
    manifest.write_text(json.dumps({"workload": "pretrain_nemotron4", "num_gpus": "many"}))
    outcome = LogAnalyzer(str(tmp_path), None, (11, 44))(
        Task(str(tmp_path), str(log), Manifests().near(str(log))))
    assert outcome.manifest == str(manifest) and "identified by name instead" in str(
        outcome.warning)


def test_what_is_not_a_log(tmp_path: Path) -> None:
    analyzer = LogAnalyzer(str(tmp_path), None, (11, 44))
    (tmp_path / "stray.out").write_bytes(bytes(range(256)) * 10)
    assert analyzer(Task(str(tmp_path), str(tmp_path / "stray.out"))).skipped == \
        "no training output"
    os.mkfifo(tmp_path / "log-fifo.out")
    fifo = analyzer(Task(str(tmp_path), str(tmp_path / "log-fifo.out"))).result
    assert fifo is not None and fifo["error"] == "cannot read: not a regular file"
    assert fifo["config_key"] == f"unidentified/{tmp_path.name}"


def test_an_empty_log_takes_the_result_of_the_first_like_it(tmp_path: Path) -> None:
    """Empty logs of one folder and name: the first is analyzed, the others take its result
    with their own names; one whose job left a batch output is analyzed on its own."""
    exp = "pretrain_llama3.1_8b_fp8_gpus8_tp1_pp1_cp2_vpNone_mbs1_gbs128"
    folder = tmp_path / exp / f"{exp}_1" / exp
    folder.mkdir(parents=True)
    logs = [folder / f"log-{exp}_{job}_0.out" for job in (11, 12, 13, 14)]
    for log in logs:
        log.touch()
    (folder / f"sbatch_{exp}_14.out").write_text(
        "srun: error: node2: tasks 0-7: Exited with exit code 1\n")
    analyzer = LogAnalyzer(str(tmp_path), None, (11, 44))
    alone = LogAnalyzer(str(tmp_path), None, (11, 44))
    for log in logs:
        task = Task(str(tmp_path), str(log))
        quick = analyzer.empty(task)
        assert (quick is None) == (log == logs[-1])  # the last: its batch output says why
        assert analyzer(task).full() == alone.analyze(task).full()
        if quick is not None:
            assert quick.full() == alone.analyze(task).full() and quick.brief is not None
            assert quick.full()["reason"].startswith("no training step in the log")  # type: ignore
    assert len(analyzer._empties) == 1
    other = folder / "log-by-hand.out"  # not nemo-run's name: no job to look up, analyzed
    other.touch()
    assert analyzer.empty(Task(str(tmp_path), str(other))) is None
