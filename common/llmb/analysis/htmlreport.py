"""`--report=DIR`: the analysis as a self-contained web page, a markdown file and plots.

    DIR/index.html   one file, plots embedded as data: URIs, inline CSS, no script and no
                     link to anything: it opens from disk or as an e-mail attachment, offline
    DIR/report.md    the same tables, with the plots as DIR/plots/*.png
    DIR/plots/       one PNG per recipe / size / dtype / GPU type / scaling (llmb.analysis.plots)

Sections: summary, verdicts per configuration, plots, comparison with the baseline, runs that
failed or need a look (reason, suspect nodes), where each reference comes from, skipped files
and warnings. Every file is written whole (llmb.shared.files.atomic_write), index.html last, so a
report that was interrupted is never mistaken for a finished one.
"""

from __future__ import annotations

import base64
import datetime
import html
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from llmb.analysis import plots
from llmb.analysis.formats import config_label, printable
from llmb.analysis.record import AnalyzedRun, Comparison, Configuration
from llmb.shared.files import atomic_write

VERDICT_COLOURS = {"pass": "#dcfce7", "below": "#fee2e2", "no_reference": "#f3f4f6",
                   "no_successful_run": "#fde68a", "window_outside_runs": "#fde68a"}
STATUS_COLOURS = {"Success": "#dcfce7", "Failed": "#fee2e2", "Invalid": "#fde68a"}
CSS = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #111827; max-width: 1400px; }
h1 { font-size: 1.6em; } h2 { margin-top: 2em; border-bottom: 1px solid #d1d5db; }
table { border-collapse: collapse; margin: 0.5em 0; font-size: 0.9em; }
th, td { border: 1px solid #d1d5db; padding: 0.25em 0.6em; text-align: left; }
th { background: #f9fafb; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
img.plot { display: block; max-width: 100%; margin: 0.5em 0 1.5em; border: 1px solid #e5e7eb; }
.meta { color: #4b5563; } code { background: #f3f4f6; padding: 0 0.2em; }
"""


def _num(value: float | None, places: int) -> str:
    return "-" if value is None else f"{value:.{places}f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.2f}"


def verdict_rows(configs: Sequence[Configuration]) -> list[list[str]]:
    return [[config_label(c), f"{c['successful_runs']}/{c['runs']}", _num(c["time_median"], 3),
             _num(c["time_min"], 3), _num(c["time_max"], 3),
             _num(None if c["time_cv"] is None else c["time_cv"] * 100, 2),
             _num(c["reference_step_time"], 3), _num(c["pct_of_reference"], 1),
             str(c["verdict"])] for c in configs]


VERDICT_HEAD = ["Configuration", "Runs (ok/all)", "Median (s)", "Min (s)", "Max (s)", "CV %",
                "Reference (s)", "% of reference", "Verdict"]
COMPARE_HEAD = ["Configuration", "Baseline median (s)", "Median (s)", "Delta % (+ slower)",
                "Spread %", "Significant"]
FAIL_HEAD = ["Run", "Status", "Reason", "Suspect nodes"]
REF_HEAD = ["Configuration", "Reference step time (s)", "Source"]


def compare_rows(compared: Sequence[Comparison]) -> list[list[str]]:
    return [[config_label(c), _num(c["baseline_time_median"], 3), _num(c["time_median"], 3),
             f"{c['delta_pct']:+.2f}", _num(c["spread_pct"], 2),
             "yes" if c["significant"] else "no"] for c in compared]


def failure_rows(results: Iterable[AnalyzedRun]) -> list[list[str]]:
    """The runs with a reason (results may be a Spill: only these rows are held)."""
    return [[printable(str(r["filename"])), str(r["status"]), str(r["reason"]),
             ", ".join(r.get("suspect_nodes") or [])] for r in results if r.get("reason")]


def reference_rows(configs: Sequence[Configuration]) -> list[list[str]]:
    return [[config_label(c), _num(c["reference_step_time"], 3), str(c["reference_source"])]
            for c in configs if c.get("reference_step_time") is not None]


def summary_text(analysis: Mapping[str, Any]) -> list[str]:
    s, a = analysis["summary"], analysis["analysis"]
    verdicts = ", ".join(f"{n} {v}" for v, n in s["verdicts"].items() if n) or "none"
    lines = [
        f"Logs: {s['logs']} ({s['success']} Success, {s['failed']} Failed, {s['invalid']} "
        f"Invalid; {s['skipped']} skipped)",
        f"Configurations: {s['configurations']} ({verdicts})",
        f"Window: iterations {a['window']['first_iteration']}-{a['window']['last_iteration']}; "
        f"tolerance: {a['tolerance_pct']:g}% (pass at >= {100 - a['tolerance_pct']:g}% of the "
        "reference); statistics: population",
        "Directories: " + ", ".join(a["directories"]),
    ]
    if a.get("baseline"):
        b = a["baseline"]
        lines.append(f"Baseline: {b['directory']} ({b['significant']} significant change(s))")
    return [printable(line) for line in lines]


# --- HTML -------------------------------------------------------------------------------------

def _table(head: Sequence[str], rows: Sequence[Sequence[str]], colour_col: int | None = None,
           colours: Mapping[str, str] | None = None) -> str:
    out = ["<table>", "<tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr>"]
    for row in rows:
        cells = []
        for i, cell in enumerate(row):
            text = html.escape(printable(cell))
            style = ""
            if colours and i == colour_col and cell in colours:
                style = f' style="background:{colours[cell]}"'
            numeric = cell.replace(".", "", 1).replace("-", "", 1).replace("+", "", 1).isdigit()
            cls = ' class="num"' if numeric else ""
            cells.append(f"<td{cls}{style}>{text}</td>")
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</table>")
    return "\n".join(out)


def to_html(analysis: Mapping[str, Any], figures: Sequence[tuple[str, str, bytes]]) -> str:
    """figures: (title, file name, PNG bytes)."""
    configs = analysis["configurations"]
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        "<title>llmb benchmark report</title>", f"<style>{CSS}</style></head><body>",
        "<h1>llmb benchmark report</h1>",
        '<p class="meta">' + "<br>".join(html.escape(t) for t in summary_text(analysis))
        + f"<br>Generated {html.escape(_now())}</p>",
        "<h2>Verdicts</h2>",
        _table(VERDICT_HEAD, verdict_rows(configs), 8, VERDICT_COLOURS),
        "<h2>Plots</h2>",
    ]
    if not figures:
        parts.append("<p>No identified configuration with a figure or a reference.</p>")
    for title, _name, png in figures:
        data = base64.b64encode(png).decode("ascii")
        parts += [f"<h3>{html.escape(title)}</h3>",
                  f'<img class="plot" alt="{html.escape(title)}" '
                  f'src="data:image/png;base64,{data}">']
    if analysis.get("comparison") is not None:
        parts += ["<h2>Compared with the baseline</h2>",
                  _table(COMPARE_HEAD, compare_rows(analysis["comparison"]))]
    failures = failure_rows(analysis["results"])
    parts += ["<h2>Runs that failed or need a look</h2>",
              _table(FAIL_HEAD, failures, 1, STATUS_COLOURS) if failures
              else "<p>None: every run succeeded cleanly.</p>"]
    refs = reference_rows(configs)
    parts += ["<h2>Where the references come from</h2>",
              _table(REF_HEAD, refs) if refs else "<p>No configuration has a reference.</p>"]
    extra = [f"skipped {s['path']}: {s['reason']}" for s in analysis["skipped"]]
    extra += [f"warning: {w['path']}: {w['warning']}" for w in analysis.get("warnings") or []]
    if extra:
        parts += ["<h2>Skipped files and warnings</h2>", "<ul>"]
        parts += [f"<li>{html.escape(printable(e))}</li>" for e in extra]
        parts.append("</ul>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


# --- markdown ---------------------------------------------------------------------------------

def _md_cell(text: str) -> str:
    """A value in markdown: its HTML escaped as index.html escapes it (a markdown viewer shows
    raw HTML as HTML), its backslashes and table bars escaped."""
    return html.escape(printable(text), quote=False).replace("\\", "\\\\").replace("|", "\\|")


def _md_table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows]
    return out


def to_markdown(analysis: Mapping[str, Any], figures: Sequence[tuple[str, str, bytes]]) -> str:
    configs = analysis["configurations"]
    lines = ["# llmb benchmark report", ""]
    lines += [f"- {_md_cell(t)}" for t in summary_text(analysis)]
    lines += ["", "## Verdicts", "", *_md_table(VERDICT_HEAD, verdict_rows(configs)), "",
              "## Plots", ""]
    lines += [f"![{_md_cell(title)}](plots/{name})\n" for title, name, _ in figures]
    if analysis.get("comparison") is not None:
        lines += ["## Compared with the baseline", "",
                  *_md_table(COMPARE_HEAD, compare_rows(analysis["comparison"])), ""]
    failures = failure_rows(analysis["results"])
    lines += ["## Runs that failed or need a look", ""]
    lines += _md_table(FAIL_HEAD, failures) if failures else ["None."]
    refs = reference_rows(configs)
    lines += ["", "## Where the references come from", ""]
    lines += _md_table(REF_HEAD, refs) if refs else ["No configuration has a reference."]
    return "\n".join(lines) + "\n"


# --- writing ----------------------------------------------------------------------------------

def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def render_figures(analysis: Mapping[str, Any]) -> list[tuple[str, str, bytes]]:
    runs: dict[str, list[float]] = {}
    for r in analysis["results"]:
        if r["status"] == "Success" and r["time_mean"] is not None:
            runs.setdefault(r["config_key"], []).append(r["time_mean"])
    tolerance = analysis["analysis"]["tolerance_pct"]
    out = []
    for key, members in plots.families(analysis["configurations"]).items():
        png = plots.figure_png(key, members, runs, tolerance)
        out.append((plots.family_title(key), plots.slug(key) + ".png", png))
    return out


def write(analysis: Mapping[str, Any], directory: str) -> str:
    """Write the report into directory (created if needed); returns index.html's path."""
    figures = render_figures(analysis)
    os.makedirs(os.path.join(directory, "plots"), exist_ok=True)
    for _title, name, png in figures:
        atomic_write(os.path.join(directory, "plots", name), png)
    atomic_write(os.path.join(directory, "report.md"), to_markdown(analysis, figures))
    index = os.path.join(directory, "index.html")
    atomic_write(index, to_html(analysis, figures))
    return index
