"""The verdict of a suite planned from a set (`suite submit --set`) against a baseline file
(llmb.llmbrun.suite.baseline), by upstream's rule: the cluster passes when every workload x
dtype of the set on its GPU type performs above THRESHOLD of its baseline (NVIDIA/exemplar-
performance v26.08.00, Exemplar_validation.md: "> 95% baseline performance for all
workloads").

Per workload x dtype: performance = baseline step time / measured step time (the analyzer's
median), margin = performance - 1 (+3.1 %: faster than the baseline; -6.0 %: slower), verdict

    pass          performance above THRESHOLD (exactly 95 % is not above: below)
    below         performance at or under THRESHOLD
    no_run        planned, but no run of it succeeded (yet)
    not_planned   the suite could not plan it (no recipe, not installed, not published)
    no_baseline   the baseline file holds no figure for it

Anything but `pass` fails the set. `suite report --baseline` keeps its verdict beside the
suite's record (VERDICT_FILE, and the baseline as checked: BASELINE_FILE), which `llmb-run
archive --suite ID` packs with the runs, and writes HTML_FILE into the report folder.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Annotated, TypedDict

from llmb.llmbrun.errors import RunError
from llmb.llmbrun.suite import baseline, sets
from llmb.llmbrun.suite.baseline import Baseline
from llmb.llmbrun.suite.plan import NAME_LEN
from llmb.llmbrun.suite.record import Suite
from llmb.llmbrun.suite.sets import SetRecord, SetSource
from llmb.shared import clock, files, values
from llmb.shared.records import Bound

THRESHOLD = 0.95
VERDICT_FILE = "verdict.json"
BASELINE_FILE = "baseline.yaml"
HTML_FILE = "verdict.html"
VERDICTS = ("pass", "below", "no_run", "not_planned", "no_baseline")
TABLE = ("WORKLOAD", "DTYPE", "GPUS", "STEP_S", "BASELINE_S", "MARGIN", "VERDICT")

Name = Annotated[str, Bound(text=NAME_LEN)]


class Judged(TypedDict):
    """One workload x dtype of the set, judged."""

    workload: Name  # upstream's name with its size
    dtype: Name
    recipe: Name | None
    step_time_s: float | None  # measured: the analyzer's median
    baseline_s: float | None
    performance: float | None  # baseline_s / step_time_s
    margin_pct: float | None  # (performance - 1) x 100
    verdict: Name
    detail: Annotated[str, Bound(text=1024)] | None


class BaselineNote(TypedDict):
    path: Annotated[str, Bound(text=4096)]
    sha256: Name
    source: Annotated[str, Bound(text=baseline.TEXT_LEN)] | None


class VerdictRecord(TypedDict):
    """verdict.json: a set suite's verdict against one baseline file."""

    suite: Name
    set: Name
    source: SetSource
    gpu_type: Name
    scale: int  # the suite's
    set_scale: int
    rehearsal: bool
    threshold_pct: float
    figure: Name
    baseline: BaselineNote
    judged: Name  # when: clock.iso()
    passed: bool
    problems: list[Annotated[str, Bound(text=1024)]]
    entries: list[Judged]


def set_of(suite: Suite) -> SetRecord:
    found = suite.data.get("set")
    if found is None:
        raise RunError(f"suite {suite.id} was not planned from a set; --baseline and suite "
                       "baseline apply to `llmb-run suite submit --set NAME` suites")
    return found


def baseline_for(suite: Suite, path: str) -> Baseline:
    """The baseline file, checked against the suite's set and scale."""
    found = set_of(suite)
    base = baseline.load(path, sets.load(found["name"]))
    if base.scale != found["planned_scale"]:
        raise RunError(f"--baseline {values.shown(path)} holds figures at {base.scale} GPUs; "
                       f"suite {suite.id} ran at {found['planned_scale']}: give a baseline of "
                       f"that scale")
    return base


def _one(gpu: str, entry: sets.SetEntry, measured: float | None, base: Baseline) -> Judged:
    base_s = base.figure(gpu, entry["workload"], entry["dtype"])
    ratio = base_s / measured if base_s is not None and measured is not None else None
    if entry["config"] is None:
        verdict, detail = "not_planned", entry["missing"]
    elif measured is None:
        verdict, detail = "no_run", "no successful run"
    elif ratio is None:
        verdict, detail = "no_baseline", f"{base.path} has no {gpu} figure for it"
    else:
        verdict, detail = ("pass" if ratio > THRESHOLD else "below"), None
    return Judged(workload=entry["workload"], dtype=entry["dtype"], recipe=entry["recipe"],
                  step_time_s=measured, baseline_s=base_s, performance=ratio,
                  margin_pct=None if ratio is None else (ratio - 1.0) * 100.0,
                  verdict=verdict, detail=detail)


def judge(suite: Suite, measured: list[float | None], base: Baseline) -> VerdictRecord:
    """The set's verdict; `measured`: each configuration's step time (None: no successful
    run), in the suite's order."""
    found = set_of(suite)
    gpu = found["gpu_type"]
    entries = [_one(gpu, e, measured[e["config"]] if e["config"] is not None else None, base)
               for e in found["entries"]]
    problems = []
    for kind in VERDICTS[1:]:
        mine = [e for e in entries if e["verdict"] == kind]
        if mine:
            first = mine[0]
            problems.append(f"{len(mine)} {kind} (e.g. {first['workload']} {first['dtype']}"
                            + (f" at {first['margin_pct']:+.1f}%" if kind == "below" else
                               f": {first['detail']}") + ")")
    rehearsal = found["planned_scale"] != found["scale"]
    return VerdictRecord(
        suite=suite.id, set=found["name"], source=found["source"], gpu_type=gpu,
        scale=found["planned_scale"], set_scale=found["scale"], rehearsal=rehearsal,
        threshold_pct=THRESHOLD * 100, figure=baseline.FIGURE,
        baseline=BaselineNote(path=base.path, sha256=base.sha256,
                              source=base.data.get("source")),
        judged=clock.iso(), passed=bool(entries) and not problems, problems=problems,
        entries=entries)


def _cells(e: Judged, scale: int) -> tuple[str, ...]:
    def num(value: float | None) -> str:
        return "-" if value is None else f"{value:.3f}"

    margin = "-" if e["margin_pct"] is None else f"{e['margin_pct']:+.1f}%"
    return (e["workload"], e["dtype"], str(scale), num(e["step_time_s"]), num(e["baseline_s"]),
            margin, e["verdict"])


def render(v: VerdictRecord) -> str:
    """The verdict as a table under its head line (summary: its one-line verdict)."""
    table = [TABLE] + [_cells(e, v["scale"]) for e in v["entries"]]
    widths = [max(len(row[i]) for row in table) for i in range(len(TABLE))]
    head = (f"set {v['set']} ({v['source']['release']}) on {v['gpu_type']} against "
            f"{values.shown(v['baseline']['path'])}: step time, pass above "
            f"{v['threshold_pct']:g}% of the baseline's performance\n")
    body = "".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
                   + "\n" for row in table)
    return head + body


def summary(v: VerdictRecord) -> str:
    rehearsal = (f" (a rehearsal at {v['scale']} GPUs, not the set's {v['set_scale']}: it "
                 "accepts nothing)" if v["rehearsal"] else "")
    if v["passed"]:
        return (f"set verdict: passed: every workload of the {v['set']} set on "
                f"{v['gpu_type']} is above {v['threshold_pct']:g}% of its baseline{rehearsal}")
    return "set verdict: failed: " + "; ".join(v["problems"]) + rehearsal


def render_html(v: VerdictRecord) -> str:
    """A page of the verdict (every text escaped)."""
    def row(cells: tuple[str, ...], tag: str = "td") -> str:
        return "<tr>" + "".join(f"<{tag}>{html.escape(c)}</{tag}>" for c in cells) + "</tr>\n"

    title = html.escape(f"Suite {v['suite']}: {v['set']} set on {v['gpu_type']}")
    return ("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>" + title
            + "</title></head><body>\n<h1>" + title + "</h1>\n<p>"
            + html.escape(f"Baseline: {v['baseline']['path']} (sha256 "
                          f"{v['baseline']['sha256']}); figure: step time in seconds")
            + "</p>\n<table>\n" + row(TABLE, "th")
            + "".join(row(_cells(e, v["scale"])) for e in v["entries"])
            + "</table>\n<p>" + html.escape(summary(v)) + "</p>\n</body></html>\n")


def keep(suite: Suite, v: VerdictRecord, base: Baseline, report_dir: Path) -> Path:
    """The verdict and its baseline beside the suite's record (what an archive packs), and
    its page in the report folder; the page's path."""
    folder = suite.path.parent
    files.atomic_write(folder / VERDICT_FILE, json.dumps(v, indent=2) + "\n")
    files.atomic_write(folder / BASELINE_FILE, base.text)
    page = report_dir / HTML_FILE
    files.atomic_write(page, render_html(v))
    return page
