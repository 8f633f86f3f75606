"""llmb.llmbrun.report: `llmb-run report` over an install as real runs leave it
(tests/helpers/fakeinstall.py), through the analyzer's command line."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import fakeinstall
import pytest
import runinstall


def llmb_run(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return runinstall.run(args, cwd, timeout=300, **env)


@pytest.fixture(scope="module")
def install(tmp_path_factory) -> Path:
    return fakeinstall.with_four_runs(tmp_path_factory.mktemp("i") / "llmb")


# --- llmb-run report --------------------------------------------------------------------------

def test_report_writes_the_page_and_says_where(install):
    proc = llmb_run(["report"], install)
    assert proc.returncode == 0, proc.stderr
    out = install / "report"
    assert proc.stdout.splitlines()[:2] == [f"report: {out}/index.html",
                                            f"report: {out}/report.md"]
    assert re.fullmatch(r"Summary: 5 log\(s\): 3 Success, 2 Failed; skipped 4 sbatch output; "
                        r"configurations: 1 pass, 1 below", proc.stdout.splitlines()[2])
    html = (out / "index.html").read_text()
    assert "<html" in html and "data:image/png;base64," in html
    assert list((out / "plots").glob("*.png"))
    assert "node failure" in (out / "report.md").read_text()


def test_report_output_elsewhere_and_again(install, tmp_path):
    target = tmp_path / "shared" / "week12"
    for _ in range(2):  # a second report replaces the first
        proc = llmb_run(["report", "--output", str(target)], install)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.startswith(f"report: {target}/index.html\n")


def test_report_errors_are_one_line(install, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    proc = llmb_run(["report", "--output", str(blocker / "sub")], install)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.startswith(f"llmb-run: --output {blocker}/sub: cannot create it: ")
    assert len(proc.stderr.splitlines()) == 1
    empty = fakeinstall.make_install(tmp_path / "empty")
    proc = llmb_run(["report"], empty)
    assert proc.returncode == 1
    assert proc.stderr == f"llmb-run: no runs yet: {empty}/workloads does not exist\n"

