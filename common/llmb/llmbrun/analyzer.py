"""llmb-run's one door to the analyzer (llmb.analysis): no other module of llmb-run imports it.

llmb-run asks the analyzer in-process, by `analyze` (typed arguments in, the analyzer's JSON out
as its checked type, llmb.analysis.record.AnalyzerJson), and through its command line
(`python -m llmb.analysis.cli`) only where another Python draws the report: matplotlib may live
only in a workload venv (`report_python`). Either way the JSON llmb-run reads back is held to
AnalyzerJson first (`checked`), so a field of the wrong type is one line, never a traceback.
What llmb-run reads from it: results[] (`filename`, `status` Success|Failed|Invalid,
`time_mean`, `reason`, `suspect_nodes`, `config_key`) and configurations[] (`config_key`,
`verdict`, `pct_of_reference`). Fields an older analyzer does not give are absent and shown
as "-".

Several runs are analyzed in ONE analysis: a temporary directory holds one link per job (named
by the job id) to that job's run directory, so each result's path says which job it belongs to
and the verdicts group the repeats among them. The report's pages are drawn again from the JSON
and the plots already drawn (`render`, no matplotlib: verify-archive compares them with an
archive's).
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
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

from llmb.analysis import record
from llmb.analysis.record import AnalyzedRun, AnalyzerJson, Configuration
from llmb.llmbrun.clusterconfig import ClusterConfig
from llmb.shared import files, records
from llmb.shared.errors import LlmbError
from llmb.shared.values import shown

__all__ = ["AnalyzedRun", "AnalyzerJson", "Configuration"]

PACKAGE_DIR = Path(__file__).resolve().parents[2]  # <repo>/common
TIMEOUT_S = 1800


class AnalyzerError(LlmbError):
    """The analyzer could not run or gave no JSON; str() is one line."""


def _command(args: list[str], python: str, timeout: float = TIMEOUT_S
             ) -> subprocess.CompletedProcess[str]:
    """`python -m llmb.analysis.cli ARGS` with this package on the path: the analyzer of another
    Python (one with matplotlib)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(PACKAGE_DIR), os.environ.get("PYTHONPATH")) if p)}
    try:
        return subprocess.run([python, "-m", "llmb.analysis.cli", *args], env=env,
                              capture_output=True, text=True, errors="replace",
                              timeout=timeout, check=False,
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


def checked(data: object, what: str = "the analyzer's output") -> AnalyzerJson:
    """data held to the analyzer's JSON type; AnalyzerError naming `what` and the field."""
    try:
        return record.checked(data)
    except records.BadRecord as exc:
        raise AnalyzerError(f"{what} is not the analyzer's JSON: {exc.problem}") from None


def analyze(directories: Sequence[Path]) -> AnalyzerJson:
    """The analyzer's JSON for these trees, analyzed in this process (exit 1 of its command
    line, no successful run, still is an analysis); AnalyzerError, one line, when a tree is
    missing or holds no log, or the catalog cannot be read."""
    from llmb.analysis import cli

    try:
        data = cli.analyze([str(d) for d in directories])
    except (FileNotFoundError, LookupError) as exc:
        raise AnalyzerError(str(exc)) from None
    except ModuleNotFoundError as exc:
        raise AnalyzerError(f"{sys.executable} cannot import {exc.name}; activate the workload "
                            "venv or set LLMB_PYTHON to a Python that has it") from None
    return checked(data)


@dataclass(frozen=True)
class Analyzed:
    """An analysis with its report: the analyzer's JSON (None when it gave none, `error` says
    why) and why the report was not written (`unwritten`; None when it was)."""

    analysis: AnalyzerJson | None
    error: str | None = None
    unwritten: str | None = None


def analyze_with_report(directory: Path, out: Path, python: str | None = None) -> Analyzed:
    """The analysis of `directory` and its report in `out` (index.html, report.md, plots/):
    drawn here when `python` is None or llmb-run's own, else by that Python's analyzer (its
    command line: matplotlib lives there). The JSON alone when the report cannot be drawn."""
    if python is None or python == sys.executable:
        return _report_here(directory, out)
    index = out / "index.html"
    before = _modified(index)
    proc = _command(["--format=json", f"--report={out}", str(directory)], python)
    why = last_line(proc.stderr) or f"exit {proc.returncode}"
    unwritten = why if _modified(index) in (None, before) else None
    if not proc.stdout.strip():  # refused before analyzing (a report it cannot write)
        try:
            return Analyzed(analyze([directory]), unwritten=unwritten)
        except AnalyzerError as exc:
            return Analyzed(None, str(exc), unwritten)
    try:
        return Analyzed(checked(json.loads(proc.stdout)), unwritten=unwritten)
    except ValueError:
        return Analyzed(None, f"the analyzer gave no JSON: {why}", unwritten)
    except AnalyzerError as exc:
        return Analyzed(None, str(exc), unwritten)


def _report_here(directory: Path, out: Path) -> Analyzed:
    try:
        data = analyze([directory])
    except AnalyzerError as exc:
        return Analyzed(None, str(exc), str(exc))
    if importlib.util.find_spec("matplotlib") is None:
        return Analyzed(data, unwritten=f"the report needs matplotlib, which {sys.executable} "
                        "cannot import; install common/requirements/report.txt")
    from llmb.analysis import htmlreport

    try:
        htmlreport.write(data, str(out))
    except OSError as exc:
        return Analyzed(data, unwritten=f"{shown(out)}: cannot write: {exc.strerror or exc}")
    return Analyzed(data)


def _modified(path: Path) -> int | None:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return None


def summary_line(data: AnalyzerJson) -> str:
    """The analyzer's last line for this analysis (`Summary: N log(s): ...`)."""
    from llmb.analysis import formats

    return formats.summary_line(data["summary"])


def has_logs(tree: Path) -> bool:
    """Whether the analyzer would find a log under tree (the first one found is enough)."""
    from llmb.analysis import discover

    return tree.is_dir() and any(found.problem is None for found in discover.walk([str(tree)]))


def empty(tree: Path) -> AnalyzerJson:
    """The analyzer's analysis of a tree without logs, as its JSON would hold it."""
    from llmb.analysis import cli
    from llmb.analysis.assemble import Assembly, materialize

    assembly = Assembly([str(tree)], None, cli.DEFAULT_WINDOW, cli.DEFAULT_TOLERANCE)
    try:
        return checked(materialize(assembly.finish()))
    finally:
        assembly.close()


MAX_PLOT_BYTES = 64 << 20


@dataclass(frozen=True)
class Rendered:
    """A report rendered from the analyzer's JSON and plots already drawn (no matplotlib)."""

    markdown: str
    html: str
    plots: tuple[str, ...]  # file names under plots/ it shows
    missing: tuple[str, ...]  # of those, the ones plots_dir lacks


def render(data: AnalyzerJson, plots_dir: Path) -> Rendered:
    """report.md and index.html for this analysis, with the PNGs of plots_dir (what the
    analyzer's --report writes, less its time stamp). Raises on an analysis without the
    fields a report shows (KeyError, TypeError, ...): callers say so in one line."""
    from llmb.analysis import htmlreport, plots

    figures, missing = [], []
    for key in plots.families(_held_configurations(data["configurations"])):
        name = plots.slug(key) + ".png"
        try:
            png = files.read_bounded(plots_dir / name, MAX_PLOT_BYTES)
        except files.FileRefused:
            missing.append(name)
            png = b""
        figures.append((plots.family_title(key), name, png))
    return Rendered(htmlreport.to_markdown(data, figures), htmlreport.to_html(data, figures),
                    tuple(name for _, name, _ in figures), tuple(missing))


# --- runs by job ------------------------------------------------------------------------------

@dataclass
class RunAnalysis:
    """The analyzer's view of some jobs: results per job id, configurations by key."""

    results: dict[str, list[AnalyzedRun]] = field(default_factory=dict)
    configurations: dict[str, Configuration] = field(default_factory=dict)
    error: str | None = None

    def result(self, job_id: str) -> AnalyzedRun | None:
        """The result of the job's own log (the last restart when it was requeued)."""
        mine = [r for r in self.results.get(job_id, []) if f"_{job_id}_" in r["filename"]]
        pool = mine or self.results.get(job_id, [])
        return sorted(pool, key=lambda r: r["filename"])[-1] if pool else None

    def verdict(self, job_id: str) -> str | None:
        result = self.result(job_id)
        key = result.get("config_key") if result else None
        config = self.configurations.get(key) if key is not None else None
        return config.get("verdict") if config else None

    def suspect_nodes(self, job_id: str) -> list[str]:
        """Nodes the analyzer names in the job's failed or invalid results."""
        nodes: list[str] = []
        for r in self.results.get(job_id, []):
            if r["status"] != "Success":
                nodes.extend(n for n in r.get("suspect_nodes", []) if n)
        return list(dict.fromkeys(nodes))


def _held(items: Sequence[object]) -> list[AnalyzedRun]:
    """results[] of an analysis `checked` held each to AnalyzedRun."""
    return cast("list[AnalyzedRun]", list(items))


def _held_configurations(items: Sequence[object]) -> list[Configuration]:
    """configurations[] of an analysis `checked` held each to Configuration."""
    return cast("list[Configuration]", list(items))


def from_json(data: AnalyzerJson, job_of: Mapping[str, str] | None = None) -> RunAnalysis:
    """Group the analyzer's results by job: the first path component of each result's
    filename is the link name (the job id), unless `job_of` maps filenames otherwise."""
    out = RunAnalysis()
    for r in _held(data["results"]):
        name = r["filename"]
        job = (job_of or {}).get(name) or name.split("/", 1)[0]
        out.results.setdefault(job, []).append(r)
    for c in _held_configurations(data["configurations"]):
        out.configurations[c["config_key"]] = c
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
    """Analyze the run directories of these jobs (job id -> run dir) in one analysis."""
    present = present_runs(run_dirs)
    if not present:
        return RunAnalysis()
    with linked(present) as base:
        try:
            return from_json(analyze([base]))
        except AnalyzerError as exc:
            return RunAnalysis(error=str(exc))
