"""`llmb-run verify-archive FILE`: is an archive (llmb.llmbrun.archive.pack) complete and
consistent?

The archive is not trusted. llmb.llmbrun.archive.unpack checks every member before anything is
written (only regular files and directories under `llmb-archive/`, no absolute or `..` path,
no link or device, one plain spelling per path, nothing twice, nothing larger than the index
lists) and refuses the whole archive otherwise; an archive whose first file is not a readable
index is not unpacked at all. The rest is unpacked file by file under a fresh private
directory.

Then, on the unpacked tree: every file listed in ARCHIVE.json is present with its size and
sha256, and no file is there that the index does not list; each run of the index is a path
under runs/ of the tree, and its manifest is JSON with its training log (a Slurm run its job
script); system.json and, where the index says they were made, analysis.json and the report
are present; the analyzer, run again over the archived logs, gives what analysis.json says;
report.md and index.html are what analysis.json renders to (with the archived plots); and no
file copied from the install holds a secret in clear (llmb.shared.redact.clear_secrets; the
analyzer's outputs are made from those). Exit 0 when all holds; 1 with one line per problem
otherwise.

What this proves: the archive is whole and was not changed after it was made, unless someone
rewrote the logs, the analysis, the report and the index together (the index is not signed).
"""
from __future__ import annotations

import errno
import json
import re
import sys
import tarfile
import tempfile
import zlib
from collections.abc import Iterable, Mapping
from pathlib import Path, PurePosixPath
from typing import TextIO

from llmb import manifest
from llmb.llmbrun import analyzer
from llmb.llmbrun.archive.format import (
    INDEX,
    ROOT,
    ArchiveIndex,
    FileEntry,
    ReportNote,
    RunEntry,
    ScreenNote,
    pieces,
    sha256,
)
from llmb.llmbrun.archive.unpack import UnsafeArchive, extract, safe_members
from llmb.llmbrun.errors import PROG, RunError
from llmb.shared import files, records, redact, values

MAX_JSON_BYTES = 256 << 20  # analysis.json of the largest install: a few MB
COMPARED = ("status", "max_iteration", "time_mean", "time_std_dev", "tflops_per_gpu_mean",
            "reason", "suspect_nodes", "pct_of_reference", "experiment", "config_key")
# Made by the analyzer from the redacted runs, never redacted themselves (a "config_key" is
# no secret): not scanned for secrets in clear.
ANALYZER_OUTPUT = ("analysis.json", "report/")
NO_INDEX = f"no readable {INDEX}: not an llmb archive, or its index was removed"


def compare_analysis(stored: analyzer.AnalyzerJson, fresh: analyzer.AnalyzerJson,
                     withheld: Iterable[str] = ()) -> list[str]:
    """Differences between the archived analysis and one computed from the archived logs
    (`withheld`: logs not unpacked, already named as changed: not missing logs too)."""
    problems = []
    skipped = {name.removeprefix("runs/") for name in withheld}
    old = {r.get("filename"): r for r in stored.get("results") or [] if isinstance(r, dict)}
    new = {r.get("filename"): r for r in fresh.get("results") or [] if isinstance(r, dict)}
    for name in sorted(set(old) | set(new), key=str):
        if name not in new:
            if name not in skipped:
                problems.append(f"analysis.json has a result for {name}, but there is no such "
                                "log")
        elif name not in old:
            problems.append(f"{name} is not in analysis.json")
        else:
            for key in COMPARED:
                a, b = old[name].get(key), new[name].get(key)
                if isinstance(a, float) and isinstance(b, float) and \
                        abs(a - b) <= 1e-9 * max(1.0, abs(a)):
                    continue
                if a != b:
                    problems.append(f"{name}: analysis.json says {key}={a}, its log gives {b}")
                    break
    verdicts = {c.get("config_key"): c.get("verdict") for c in stored.get("configurations") or []
                if isinstance(c, dict)}
    for c in fresh.get("configurations") or []:
        if verdicts.get(c.get("config_key")) != c.get("verdict"):
            problems.append(f"configuration {c.get('config_key')}: analysis.json says verdict="
                            f"{verdicts.get(c.get('config_key'))}, the logs give "
                            f"{c.get('verdict')}")
    return problems


def check_files(root: Path, listed: Mapping[str, FileEntry], held: Mapping[str, str] | None = None
                ) -> tuple[list[str], set[str]]:
    """Every listed file present at its size and sha256, nothing else; `held`: the members not
    unpacked (llmb.llmbrun.archive.unpack.extract), with why."""
    held = held or {}
    problems = [f"{values.shown(name)} was changed after the archive was made ({why}; it was "
                "not unpacked)" if name in listed else
                f"{values.shown(name)} is in the archive but not in {INDEX} (not unpacked)"
                for name, why in sorted(held.items())]
    present = {Path(d, n).relative_to(root).as_posix() for d, _, names in files.walk(root)
               for n in names if Path(d, n).is_file()}
    present.discard(INDEX)
    for name in sorted(set(listed) - set(held)):
        info = listed[name]
        path = root / name
        if name not in present:
            problems.append(f"{name} is listed in {INDEX} but missing")
        elif path.stat().st_size != info["bytes"] or sha256(path) != info["sha256"]:
            problems.append(f"{name} was changed after the archive was made (its size or "
                            f"sha256 differs from {INDEX})")
    problems += [f"{name} is in the archive but not in {INDEX}"
                 for name in sorted(present - set(listed))]
    return problems, present


def inside(root: Path, name: str, top: str) -> bool:
    """Whether `name` (from the index) is a plain relative path under root/top: no absolute
    path, no `..`, no link on the way out of the unpacked tree."""
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts or not path.parts or path.parts[0] != top or \
            values.control_characters(name):
        return False
    return (root / name).resolve().is_relative_to(root.resolve())


# What a JSON file of an archive may hold, counted on its bytes before it is parsed: a parsed
# value costs tens of bytes per byte of `{},` (a 210 MB file of them took 5.4 GB). The analysis
# of 20,000 runs has some 100,000 objects and lists and a few million values.
MAX_JSON_CONTAINERS = 1_000_000
MAX_JSON_VALUES = 10_000_000


def read_json(path: Path) -> object:
    """A JSON file of the unpacked archive; ValueError when it is not one (too large, too
    deep, too many values, not JSON)."""
    try:
        data = files.read_bounded(path, MAX_JSON_BYTES)
    except files.FileRefused as exc:
        raise ValueError(exc.reason) from None
    containers = data.count(b"{") + data.count(b"[")
    if containers > MAX_JSON_CONTAINERS or data.count(b",") > MAX_JSON_VALUES:
        raise ValueError(f"holds more objects, lists or values than an analysis of any "
                         f"install ({containers} brackets)")
    try:
        return json.loads(data)
    except RecursionError:
        raise ValueError("nested too deep") from None


def check_runs(root: Path, index: ArchiveIndex, present: set[str]) -> list[str]:
    problems = []
    if not isinstance(index.get("runs"), list):
        problems.append(f"{INDEX}: runs is {values.shown(type(index.get('runs')).__name__)}, "
                        "not a list of runs")
    listed = [str(r.get("run", "")).rstrip("/") + "/" for r in runs_of(index)
              if isinstance(r, dict)]
    unlisted = sorted(n for n in present
                      if n.startswith("runs/") and not any(n.startswith(r) for r in listed))
    if unlisted:
        problems.append(f"{values.shown(unlisted[0])} (and {len(unlisted) - 1} more file(s) "
                        f"under runs/) belongs to no run {INDEX} lists")
    for run in runs_of(index):
        name = str(run.get("run", "")) if isinstance(run, dict) else ""
        run_dir = root / name
        if not inside(root, name, "runs"):
            problems.append(f"run {values.shown(name)} of {INDEX} is not a path under runs/ "
                            "of the archive")
            continue
        if not run_dir.is_dir():
            problems.append(f"run {values.shown(name)} of {INDEX} is missing")
            continue
        if not run.get("manifest"):
            continue  # a run made without llmb's launch: nothing to check it against
        try:
            recorded = manifest.read(manifest.path_in(run_dir))
        except manifest.ManifestError as exc:
            problems.append(f"{name}: no {manifest.NAME}" if exc.missing
                            else f"{name}: {manifest.NAME} {exc.reason}")
            continue
        if not list(run_dir.glob("*/log-*.out")):
            problems.append(f"{name}: its manifest has no training log (log-*.out): the job "
                            "never wrote one, or the log was left out")
        if recorded.get("cluster_type") == "slurm" and not list(run_dir.glob("*_sbatch.sh")):
            problems.append(f"{name}: no job script (*_sbatch.sh)")
    return problems


def read_analysis(root: Path) -> analyzer.AnalyzerJson:
    """The archived analysis.json, held to the analyzer's JSON type; ValueError (one line
    naming the field) when it is missing, not JSON or not of that type."""
    try:
        stored = read_json(root / "analysis.json")
    except ValueError:
        raise ValueError("analysis.json is missing or not JSON") from None
    try:
        return analyzer.checked(stored, "analysis.json")
    except analyzer.AnalyzerError as exc:
        raise ValueError(str(exc)) from None


def check_analysis(root: Path, index: ArchiveIndex, held: Iterable[str] = ()) -> list[str]:
    if index.get("analysis_error") is not None:
        if (root / "analysis.json").exists():
            return [f"{INDEX} says the archive has no analysis, but analysis.json is there: "
                    "one of them was changed after the archive was made"]
        return []  # the archive says why there is none
    try:
        stored = read_analysis(root)
    except ValueError as exc:
        return [str(exc)]
    try:
        fresh = analyzer.analyze([root / "runs"])
    except analyzer.AnalyzerError as exc:
        return [f"the archived logs cannot be analyzed: {exc}"]
    except records.BadRecord as exc:
        return [f"the archived logs cannot be analyzed: the analyzer's JSON {exc.problem}"]
    return compare_analysis(stored, fresh, held)


def check_secrets(root: Path, names: set[str]) -> list[str]:
    problems = []
    for name in sorted(names):
        if name.startswith(ANALYZER_OUTPUT):
            continue
        with (root / name).open("rb") as fh:
            for number, raw in enumerate(pieces(fh), 1):
                found = redact.clear_secrets(raw.decode("utf-8", "replace"))
                if found:
                    problems.append(f"{name} line {number}: {found[0]} in clear")
                    break
    return problems


def verify_tree(root: Path, held: Mapping[str, str] | None = None
                ) -> tuple[list[str], ArchiveIndex | None]:
    """Problems of an unpacked archive (root = .../llmb-archive), and its index; `held`: the
    members extract did not write, with why."""
    try:
        data = read_json(root / INDEX)
        if not isinstance(data, dict) or not isinstance(data.get("files"), dict):
            raise ValueError
    except ValueError:
        return [NO_INDEX], None
    try:
        index = records.check(ArchiveIndex, data)
    except records.BadRecord as exc:
        return [f"{INDEX}: {exc.problem}; it is not the index llmb-run archive writes"], None
    problems, present = check_files(root, index["files"], held)
    if "system.json" not in present:
        problems.append("system.json (the system description) is missing")
    problems += check_runs(root, index, present)
    problems += check_analysis(root, index, held or {})
    problems += check_report(root, index)
    problems += check_secrets(root, present)
    return problems, index


def report_note(index: ArchiveIndex) -> ReportNote:
    """The index's note on the report, or {} when a crafted index holds something else."""
    value = index.get("report")
    return value if isinstance(value, dict) else {}


def screen_note(index: ArchiveIndex) -> ScreenNote:
    """The index's note on the screen, or {} when it has none (or a crafted one)."""
    value = index.get("screen")
    return value if isinstance(value, dict) else {}


def runs_of(index: ArchiveIndex) -> list[RunEntry]:
    value = index.get("runs")
    return value if isinstance(value, list) else []


_GENERATED = re.compile(r"<br>Generated [^<]*</p>")


def check_report(root: Path, index: ArchiveIndex) -> list[str]:
    """report/report.md and report/index.html are what analysis.json renders to (with the
    archived plots; only the time it was generated may differ), and report/plots holds the
    plots they show and nothing else."""
    if report_note(index).get("status") != "written":
        return []
    html_file, md_file = root / "report" / "index.html", root / "report" / "report.md"
    if not html_file.is_file():
        return ["report/index.html is missing"]
    try:
        stored = read_analysis(root)
        page = analyzer.render(stored, root / "report" / "plots")
    except ValueError:
        return []  # check_analysis said so
    except Exception as exc:  # a crafted analysis.json: one line, never a traceback
        return [f"the report cannot be checked: analysis.json is not what the analyzer "
                f"writes ({type(exc).__name__})"]
    markdown, html, plots = page.markdown, page.html, set(page.plots)
    screen = _screen_section(root, index, markdown, html)
    if isinstance(screen, str):
        return [screen]
    if screen is not None:
        markdown, html, screen_plot = screen
        plots |= screen_plot
    problems = [f"report/plots/{name} is missing" for name in page.missing]
    problems += [f"report/plots/{p.name} is not a plot of analysis.json"
                 for p in sorted((root / "report" / "plots").glob("*")) if p.name not in plots]
    for path, expected, alone in ((md_file, markdown, page.markdown), (html_file, html, page.html)):
        try:
            text = _GENERATED.sub("", files.read_text(path, MAX_JSON_BYTES))
        except files.FileRefused:
            problems.append(f"report/{path.name} is missing or unreadable")
            continue
        if text != _GENERATED.sub("", expected):
            source = "screen/screen.json" if screen is not None and \
                _analysis_part_matches(text, _GENERATED.sub("", alone)) else "analysis.json"
            problems.append(f"report/{path.name} does not say what {source} says (one of "
                            "them was changed after the report was made)")
    return problems


def _analysis_part_matches(text: str, alone: str) -> bool:
    """Whether a report with a screen section says what the analysis alone renders to around
    that section (which then is the part that differs): the section goes at the end of
    report.md and before </body> of index.html."""
    end = alone.rfind("</body>")
    end = len(alone) if end < 0 else end
    return text.startswith(alone[:end]) and text.endswith(alone[end:]) and \
        len(text) >= len(alone)


def _screen_section(root: Path, index: ArchiveIndex, markdown: str, html: str
                    ) -> tuple[str, str, set[str]] | str | None:
    """The report as the archive's screen section adds to it: (markdown, html, its plot's
    name); None when the index puts no screen in the report; a problem when it does but the
    archive's screen/screen.json cannot be read."""
    from llmb.llmbrun import screen

    if not screen_note(index).get("in_report"):
        return None
    try:
        doc = screen.checked_document(read_json(root / "screen" / "screen.json"))
        png_path = root / "report" / "plots" / screen.PLOT_FILE
        png = files.read_bounded(png_path, analyzer.MAX_PLOT_BYTES) if png_path.is_file() else None
        md, page = screen.with_section(markdown, html, doc, png)
    except (ValueError, files.FileRefused):
        return "the report's screen section cannot be checked: screen/screen.json is unreadable"
    except records.BadRecord as exc:
        return (f"the report's screen section cannot be checked: screen/screen.json is not "
                f"what llmb-run screen writes ({exc.problem})")
    return md or markdown, page, {screen.PLOT_FILE} if png is not None else set()


def _unpack_and_verify(path: Path) -> tuple[list[str], ArchiveIndex | None]:
    """Unpack under a private temporary directory (only when the first file is a readable
    index: nothing else is unpacked) and check the tree."""
    with tarfile.open(path, "r:*") as tar, \
            tempfile.TemporaryDirectory(prefix="llmb-verify-") as tmp:
        members, listed = safe_members(tar)
        if listed is None:
            return [NO_INDEX], None
        held = extract(tar, members, Path(tmp), listed)
        return verify_tree(Path(tmp) / ROOT, held)


def cmd_verify(path: Path, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    shown = values.shown(path)
    problem = files.path_problem(path, "file")  # never raises (a name too long, a loop)
    if problem == "does not exist":
        problem = "no such file"
    elif problem is None and not path.is_file():
        problem = "is not a file"  # a device or a fifo
    if problem:
        raise RunError(f"verify-archive {shown}: {problem}")
    try:
        problems, index = _unpack_and_verify(path)
    except UnsafeArchive as exc:
        raise RunError(f"verify-archive {shown}: refused: {exc}") from None
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise RunError(f"verify-archive {shown}: {tempfile.gettempdir()} is full "
                           f"({exc.strerror}); set TMPDIR to a larger filesystem") from None
        raise RunError(f"verify-archive {shown}: not a readable archive (damaged or "
                       f"truncated): {values.shown(exc.strerror or exc)}") from None
    except (tarfile.TarError, EOFError, zlib.error) as exc:
        raise RunError(f"verify-archive {shown}: not a readable archive (damaged or "
                       f"truncated): {values.shown(getattr(exc, 'strerror', None) or exc)}"
                       ) from None
    if problems or index is None:
        print(f"{PROG}: verify-archive: {shown}: {len(problems)} problem(s):", file=out)
        for p in problems:
            print(f"  {redact.for_people(values.shown(p))}", file=out)
        return 1
    runs = runs_of(index)
    note = ""
    if report_note(index).get("status") != "written":
        note += f"; no HTML report ({values.shown(report_note(index).get('detail'))})"
    if index.get("analysis_error"):
        note += f"; no analysis ({values.shown(index['analysis_error'])})"
    foreign = sum(1 for r in runs if isinstance(r, dict) and not r.get("manifest"))
    if foreign:
        note += f"; {foreign} run(s) without a manifest"
    checked = "" if index.get("analysis_error") else ", analysis matches the logs"
    print(f"{shown}: complete and consistent: {len(runs)} run(s), "
          f"{len(index.get('files') or {})} file(s){checked}{note}", file=out)
    return 0
