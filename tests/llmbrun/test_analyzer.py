"""llmb.llmbrun.analyzer: llmb-run's one door to the analyzer (in-process, its JSON held to
its checked type): per-job results of several runs in one analysis, verdicts and suspect nodes
by job, over an install as real runs leave it (tests/helpers/fakeinstall.py)."""

from __future__ import annotations

from pathlib import Path

import fakeinstall
import pytest
from llmb.llmbrun import analyzer


@pytest.fixture(scope="module")
def install(tmp_path_factory) -> Path:
    return fakeinstall.with_four_runs(tmp_path_factory.mktemp("i") / "llmb")


def run_dir(root: Path, job: str) -> Path:
    (found,) = root.glob(f"workloads/*/experiments/*/*_{job}000")
    return found


# --- several jobs, one analyzer call ----------------------------------------------------------

def test_results_verdicts_and_suspect_nodes_by_job(install):
    found = analyzer.analyze_runs({j: run_dir(install, j) for j in ("11", "12", "13", "14")})
    assert found.error is None
    assert sorted(found.results) == ["11", "12", "13", "14"]
    assert [r["status"] for r in found.results["11"]] == ["Failed", "Success"]
    assert found.result("11")["filename"].endswith("_11_1.out")  # the last attempt decides
    assert found.result("11")["status"] == "Success"
    assert found.suspect_nodes("11") == ["node2"]  # named by the failed first attempt
    assert "time limit" in found.result("12")["reason"]
    assert found.suspect_nodes("12") == []
    # 11 and 13 are repeats of one configuration: the median of 9.5 s and 30 s is below
    assert found.verdict("11") == found.verdict("13") == "below"
    assert found.verdict("14") == "pass"


def test_jobs_that_cannot_be_analyzed_are_left_out(install, tmp_path):
    found = analyzer.analyze_runs({"../x": run_dir(install, "11"), "15": tmp_path / "nope",
                                   "16": "", "14": run_dir(install, "14")})
    assert list(found.results) == ["14"]
    assert analyzer.analyze_runs({}).results == {}
    assert found.result("15") is None and found.verdict("15") is None
    assert found.suspect_nodes("15") == []


def test_an_analyzer_failure_is_one_line(tmp_path):
    with pytest.raises(analyzer.AnalyzerError) as info:
        analyzer.analyze([tmp_path / "missing"])
    assert "missing" in str(info.value) and "\n" not in str(info.value)


def test_json_of_another_type_is_one_line_naming_the_field():
    with pytest.raises(analyzer.AnalyzerError) as info:
        analyzer.checked({"results": ["garbage"], "configurations": [], "summary": {}},
                         "analysis.json")
    assert str(info.value).startswith("analysis.json is not the analyzer's JSON: results")
    assert "\n" not in str(info.value)


def test_from_json_groups_by_link_name_or_mapping():
    data = analyzer.checked({
        "results": [{"filename": "7/exp/log-a_7_0.out", "status": "Success", "config_key": "k"},
                    {"filename": "other.out", "status": "Failed"}],
        "configurations": [{"config_key": "k", "verdict": "pass"}], "summary": {}})
    found = analyzer.from_json(data, job_of={"other.out": "9"})
    assert sorted(found.results) == ["7", "9"]
    assert found.verdict("7") == "pass" and found.verdict("9") is None
