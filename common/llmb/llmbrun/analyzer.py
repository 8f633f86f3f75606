"""llmb-run's use of the analyzer, always through its command line (`python -m llmb.analysis.cli`).

The analyzer is its own program with its own options and exit codes; llmb-run asks it for
`--format=json` and, for `report`, `--report=DIR`. What llmb-run reads from the JSON:
results[] (`filename`, `status` Success|Failed|Invalid, `time_mean`, `reason`, `suspect_nodes`,
`config_key`) and configurations[] (`config_key`, `verdict`, `pct_of_reference`). Fields an
older analyzer does not give are absent and shown as "-".

Several runs are analyzed in ONE analyzer process: a temporary directory holds one link per
job (named by the job id) to that job's run directory, so each result's path says which job
it belongs to and the verdicts group the repeats among them.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llmb.llmbrun.clusterconfig import ClusterConfig
from llmb.shared.errors import LlmbError

PACKAGE_DIR = Path(__file__).resolve().parents[2]  # <repo>/common
TIMEOUT_S = 1800


class AnalyzerError(LlmbError):
    """The analyzer could not run or gave no JSON; str() is one line."""


def run(args: list[str], timeout: float = TIMEOUT_S, cwd: Path | None = None,
        python: str | None = None) -> subprocess.CompletedProcess[str]:
    """`python -m llmb.analysis.cli ARGS` (in cwd) with this package on the path; `python`
    (default: llmb-run's own) runs it."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(PACKAGE_DIR), os.environ.get("PYTHONPATH")) if p)}
    try:
        return subprocess.run([python or sys.executable, "-m", "llmb.analysis.cli", *args],
                              env=env,
                              capture_output=True, text=True, errors="replace",
                              timeout=timeout, check=False, cwd=cwd,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise AnalyzerError(f"the analyzer did not finish within {timeout:.0f} s") from None


@dataclass(frozen=True)
class ReportPython:
    """The Python that can draw the report (None when none can) and those asked."""

    python: str | None
    tried: tuple[str, ...]

    def missing(self) -> str:
        """Why there is no report, in one phrase."""
        return (f"no Python here has matplotlib, which the HTML report needs (tried "
                f"{', '.join(self.tried)}); install common/requirements/report.txt into a "
                "workload venv (the installer does)")


REPORT_MODULES = ("matplotlib", "yaml")
# Whether a Python has them: found, not imported (importing matplotlib costs a Python a third
# of a second; a broken install is the analyzer's to report, in its own line).
_HAS_MODULES = ("import importlib.util as u, sys; "
                f"sys.exit(0 if all(u.find_spec(m) for m in {REPORT_MODULES!r}) else 1)")


def report_python(cfg: ClusterConfig) -> ReportPython:
    """A Python with matplotlib and PyYAML for the analyzer's --report: llmb-run's own, else
    a workload venv's (each gets common/requirements/report.txt). The installer may run
    llmb-run with the system python3, which has PyYAML only."""
    candidates = [sys.executable]
    for w in cfg.workloads.values():
        if w.python.is_file() and os.access(w.python, os.X_OK):
            candidates.append(str(w.python))
    tried: list[str] = []
    for python in dict.fromkeys(candidates):
        tried.append(python)
        if _has_report_modules(python):
            return ReportPython(python, tuple(tried))
    return ReportPython(None, tuple(tried))


def _has_report_modules(python: str) -> bool:
    if python == sys.executable:  # this Python: asked here, no second one started
        return all(importlib.util.find_spec(m) is not None for m in REPORT_MODULES)
    try:
        probe = subprocess.run([python, "-c", _HAS_MODULES], capture_output=True, timeout=120,
                               check=False, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return False
    return probe.returncode == 0


def last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def analyze_json(directory: Path | str, extra: list[str] | None = None,
                 cwd: Path | None = None) -> dict[str, Any]:
    """The analyzer's JSON for a directory (exit 1, no successful run, still has JSON)."""
    proc = run(["--format=json", *(extra or []), str(directory)], cwd=cwd)
    try:
        data = json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise AnalyzerError(last_line(proc.stderr) or
                            f"the analyzer gave no JSON (exit {proc.returncode})") from None
    if not isinstance(data, dict):
        raise AnalyzerError("the analyzer's JSON is not an object")
    return data


@dataclass
class RunAnalysis:
    """The analyzer's view of some jobs: results per job id, configurations by key."""

    results: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    configurations: dict[str, dict[str, Any]] = field(default_factory=dict)
    error: str | None = None

    def result(self, job_id: str) -> dict[str, Any] | None:
        """The result of the job's own log (the last restart when it was requeued)."""
        mine = [r for r in self.results.get(job_id, [])
                if f"_{job_id}_" in str(r.get("filename", ""))]
        pool = mine or self.results.get(job_id, [])
        return sorted(pool, key=lambda r: str(r.get("filename")))[-1] if pool else None

    def verdict(self, job_id: str) -> str | None:
        result = self.result(job_id)
        config = self.configurations.get(str(result.get("config_key"))) if result else None
        return config.get("verdict") if config else None

    def suspect_nodes(self, job_id: str) -> list[str]:
        """Nodes the analyzer names in the job's failed or invalid results."""
        nodes: list[str] = []
        for r in self.results.get(job_id, []):
            if r.get("status") != "Success" and isinstance(r.get("suspect_nodes"), list):
                nodes.extend(str(n) for n in r["suspect_nodes"] if n)
        return list(dict.fromkeys(nodes))


def from_json(data: Mapping[str, Any], job_of: Mapping[str, str] | None = None) -> RunAnalysis:
    """Group the analyzer's results by job: the first path component of each result's
    filename is the link name (the job id), unless `job_of` maps filenames otherwise."""
    out = RunAnalysis()
    for r in data.get("results") or []:
        if not isinstance(r, dict):
            continue
        name = str(r.get("filename", ""))
        job = (job_of or {}).get(name) or name.split("/", 1)[0]
        out.results.setdefault(job, []).append(r)
    for c in data.get("configurations") or []:
        if isinstance(c, dict) and c.get("config_key") is not None:
            out.configurations[str(c["config_key"])] = c
    return out


def present_runs(run_dirs: Mapping[str, str | Path | None]) -> dict[str, Path]:
    """The jobs whose run directory exists (and whose id can name a link)."""
    return {job: Path(d) for job, d in run_dirs.items()
            if d and re.fullmatch(r"[A-Za-z0-9_.+-]+", job) and job not in (".", "..")
            and Path(d).is_dir()}


@contextlib.contextmanager
def linked(run_dirs: Mapping[str, Path], name: str = "runs") -> Iterator[Path]:
    """A temporary folder `name` holding one link per job (named by its id) to its run
    directory: what the analyzer is given, so that each result names its job."""
    with tempfile.TemporaryDirectory(prefix="llmb-run-analysis-") as tmp:
        base = Path(tmp) / name
        base.mkdir()
        for job, run_dir in run_dirs.items():
            (base / job).symlink_to(run_dir.resolve(), target_is_directory=True)
        yield base


def analyze_runs(run_dirs: Mapping[str, str | Path | None]) -> RunAnalysis:
    """Analyze the run directories of these jobs (job id -> run dir) in one analyzer call."""
    present = present_runs(run_dirs)
    if not present:
        return RunAnalysis()
    with linked(present) as base:
        try:
            return from_json(analyze_json(base))
        except AnalyzerError as exc:
            return RunAnalysis(error=str(exc))
