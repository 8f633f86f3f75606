"""`llmb-run suite report [ID] [--check] [--format=table|json] [--output DIR] [--baseline FILE]`:
the analyzer's verdicts over exactly one suite's runs, and one verdict for the cluster; and
`llmb-run suite baseline [ID] --save FILE`.

The analyzer runs once (llmb.llmbrun.analyzer), over a folder
`suite-<id>` of links to the run directories of every ended job of the suite (earlier attempts
of resumed runs too, so the HTML report shows their failures), with `--report=DIR` (default
$LLMB_INSTALL/suites/<id>/report: index.html, report.md, plots/). Each configuration of the
suite gets the analyzer's figures for its configuration (median step time, reference, percent
of it, verdict `pass`, `below` or `no_reference`), `no_successful_run` when none of its runs is
done, and its count of done runs against the suite's repeats.

--check exits 3 while a configuration is below the reference, has no successful run, or has
fewer runs done than the suite's repeats (failed runs not resumed yet, or runs still queued):
verdicts need their repeats. Exit 0 otherwise, and without --check.

A suite planned from a set (`submit --set`) can instead be judged against a baseline file
(--baseline: llmb.llmbrun.suite.verdict): that verdict is then the one --check exits 3 on.
`suite baseline --save` writes such a suite's own step times as a baseline file.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from llmb.llmbrun import analyzer, report
from llmb.llmbrun.clusterconfig import ClusterConfig
from llmb.llmbrun.errors import PROG, RunError
from llmb.llmbrun.suite import baseline, record, verdict
from llmb.llmbrun.suite.plan import ConfigRowKey
from llmb.llmbrun.suite.record import Slot, Suite
from llmb.shared import values

EXIT_CHECK = 3
TOLERANCE_PCT = 5.0  # the analyzer's default: `pass` at 95 % of the reference or better
TABLE = ("WORKLOAD", "SIZE", "DTYPE", "SCALING", "GPUS", "DONE", "MEDIAN_S", "REF_S", "PCT",
         "VERDICT")


class ReportRow(ConfigRowKey):
    """One configuration of `suite report`: its runs and the analyzer's verdict."""

    repeats: int
    successful_runs: int
    failed_runs: int
    queued_runs: int
    held_runs: int
    complete: bool
    config_key: str | None
    time_median: float | None
    reference_step_time: float | None
    pct_of_reference: float | None
    verdict: str | None  # the analyzer's, or no_successful_run
    jobs: list[str]


def analyze(suite: Suite, view: list[Slot], out: Path
            ) -> tuple[analyzer.AnalyzerJson | None, str | None]:
    """The analyzer's JSON over the suite's ended jobs (None before any ended), with its HTML
    report in `out`; (JSON, why there is no report or None)."""
    present = analyzer.present_runs(record.ended_jobs(view))
    if not present:
        return None, "no run of the suite has ended with a training log yet"
    with analyzer.linked(present, f"suite-{suite.id}") as base:
        done = analyzer.analyze_with_report(base, out)
    if done.analysis is None:
        raise RunError(f"the analyzer gave no JSON: {done.error}")
    return done.analysis, done.unwritten


def configurations(suite: Suite, view: list[Slot], analysis: analyzer.RunAnalysis
                   ) -> list[ReportRow]:
    """One entry per configuration of the suite: its runs and the analyzer's verdict."""
    rows = []
    for index, c in enumerate(suite.configs):
        mine = [s for s in view if s.run.config == index]
        found = record.counts(mine)
        keys = [str(r.get("config_key")) for s in sorted(mine, key=lambda s: s.state != "done")
                for r in [analysis.result(str(s.job_id))] if s.job_id and r]
        entry = analysis.configurations.get(keys[0]) if keys else None
        done = found["done"]
        figures = entry if done and entry else None  # the analyzer's, once a run is done
        verdict = figures.get("verdict") if figures else "no_successful_run"
        rows.append(ReportRow(
            key=c.key, workload=c.workload, size=c.size, dtype=c.dtype,
            scaling=c.scaling, scale=c.scale, repeats=suite.repeats,
            successful_runs=done, failed_runs=found["failed"],
            queued_runs=found["pending"] + found["running"] + found["unknown"],
            held_runs=found["held"], complete=done >= suite.repeats,
            config_key=keys[0] if keys else None,
            time_median=figures.get("time_median") if figures else None,
            reference_step_time=entry.get("reference_step_time", c.reference) if entry
            else c.reference,
            pct_of_reference=figures.get("pct_of_reference") if figures else None,
            verdict=verdict,
            jobs=[str(a["job_id"]) for s in mine for a in s.attempts],
        ))
    return rows


def problems(rows: list[ReportRow]) -> list[str]:
    """Why the suite's check fails; empty when it passes."""
    out = []
    below = [r for r in rows if r["verdict"] == "below"]
    if below:
        worst = min(below, key=lambda r: r["pct_of_reference"] or 0.0)
        out.append(f"{len(below)} configuration(s) below {100 - TOLERANCE_PCT:g}% of the "
                   f"reference (worst: {worst['key']} at {worst['pct_of_reference']:.1f}%)")
    none = [r for r in rows if r["verdict"] == "no_successful_run"]
    if none:
        out.append(f"{len(none)} configuration(s) without a successful run (e.g. "
                   f"{none[0]['key']})")
    short = [r for r in rows if r["successful_runs"] and not r["complete"]]
    if short:
        r = short[0]
        out.append(f"{len(short)} configuration(s) with fewer runs done than the suite's "
                   f"{r['repeats']} repeats (e.g. {r['key']}: {r['successful_runs']} done)")
    if any(r["failed_runs"] for r in rows):
        out.append("failed runs: `llmb-run suite resume` submits them again")
    elif any(r["queued_runs"] or r["held_runs"] for r in rows):
        out.append("runs still queued or held: `llmb-run suite status --wait`")
    return out


def render(suite: Suite, rows: list[ReportRow]) -> str:
    def num(value: float | None, fmt: str) -> str:
        return "-" if value is None else format(value, fmt)

    table = [TABLE] + [(r["workload"], r["size"], r["dtype"], r["scaling"], str(r["scale"]),
                        f"{r['successful_runs']}/{r['repeats']}", num(r["time_median"], ".3f"),
                        num(r["reference_step_time"], "g"), num(r["pct_of_reference"], ".1f"),
                        str(r["verdict"])) for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(TABLE))]
    head = f"suite {suite.id}: {len(rows)} configuration(s), verdicts over its runs\n"
    return head + "".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True))
                          .rstrip() + "\n" for row in table)


def cmd_report(cfg: ClusterConfig, suite_id: str | None, check: bool, fmt: str,
               output: str | None, baseline_path: str | None = None) -> int:
    cfg.require_slurm("suite")
    output = report.checked_output(output)
    suite = record.load(cfg, suite_id)
    base = verdict.baseline_for(suite, baseline_path) if baseline_path else None
    out = Path(output) if output else cfg.tree.suite(suite.id) / "report"
    rows, data, missing = _analyzed(cfg, suite, out)
    found = problems(rows)
    failing = [p for p in found if not p.startswith(("failed runs", "runs still"))]
    judged = None
    if base is not None:  # upstream's rule decides, over the set's workloads
        judged = verdict.judge(suite, measured(rows), base)
        page = verdict.keep(suite, judged, base, out)
        failing = found = judged["problems"]
    where = None if missing else str(out / "index.html")
    if fmt == "json":
        print(json.dumps({"suite": suite.id, "configurations": rows,
                          "check": {"passed": not failing, "problems": found},
                          "report": where, "set_verdict": judged,
                          "summary": data["summary"] if data is not None else None}, indent=2))
    else:
        sys.stdout.write(render(suite, rows) + (verdict.render(judged) if judged else ""))
    note = sys.stderr if fmt == "json" else sys.stdout
    print(f"report: {values.shown(where)}" if where else
          f"{PROG}: no HTML report ({values.shown(missing)})", file=note)
    if judged is not None:
        print(f"set verdict page: {values.shown(page)}", file=note)
    line = verdict.summary(judged) if judged else None
    if not failing:
        if line is not None:
            print(("check: " if check else "") + line, file=note)
        else:
            print("check: passed" if check else "verdict: every configuration passes or has "
                  "no reference", file=note)
        return 0
    if check:
        print(f"{PROG}: suite {suite.id} check failed: " + (line or "; ".join(found)),
              file=sys.stderr)
        return EXIT_CHECK
    print(line or "verdict: " + "; ".join(found), file=note)
    return 0


def _analyzed(cfg: ClusterConfig, suite: Suite, out: Path
              ) -> tuple[list[ReportRow], analyzer.AnalyzerJson | None, str | None]:
    """The suite's rows, the analyzer's JSON and why there is no HTML report (None: there is
    one in `out`)."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RunError(f"--output {values.shown(out)}: cannot create it: "
                       f"{exc.strerror}") from None
    view = record.slots(cfg, suite, analyze=False)
    data, missing = analyze(suite, view, out)
    analysis = analyzer.from_json(data) if data is not None else analyzer.RunAnalysis()
    record.classify(view, analysis)
    return configurations(suite, view, analysis), data, missing


def measured(rows: list[ReportRow]) -> list[float | None]:
    """Each configuration's measured step time: the analyzer's median once a run is done."""
    return [r["time_median"] if r["successful_runs"] else None for r in rows]


def cmd_baseline(cfg: ClusterConfig, suite_id: str | None, save: str) -> int:
    """`suite baseline [ID] --save FILE`: a set suite's own figures as a baseline file."""
    cfg.require_slurm("suite")
    suite = record.load(cfg, suite_id)
    found = verdict.set_of(suite)
    if not save.strip():
        raise RunError("--save is empty; give the path of the new baseline file")
    try:
        target = Path(values.require_printable("--save", save))
    except values.BadValue as exc:
        raise RunError(str(exc)) from None
    rows, _, _ = _analyzed(cfg, suite, cfg.tree.suite(suite.id) / "report")
    figures: dict[str, dict[str, float]] = {}
    for e, step in ((e, measured(rows)[e["config"]] if e["config"] is not None else None)
                    for e in found["entries"]):
        if step is None:
            print(f"{PROG}: suite baseline: {e['workload']} {e['dtype']} has no figure (no "
                  "successful run); left out", file=sys.stderr)
            continue
        figures.setdefault(e["workload"], {})[e["dtype"]] = round(step, 6)
    if not figures:
        raise RunError(f"suite {suite.id} has no successful run of its set; nothing to save")
    data = baseline.BaselineFile(
        schema=baseline.SCHEMA, set=found["name"], release=found["source"]["release"],
        figure="step_time_s", scale=found["planned_scale"], suite=suite.id,
        source=f"llmb-run suite {suite.id} ({suite.data.get('created')})",
        baselines={found["gpu_type"]: figures})
    baseline.save(target, data)
    print(f"baseline: {values.shown(target)} ({sum(map(len, figures.values()))} figure(s) of "
          f"suite {suite.id} at {found['planned_scale']} GPUs)")
    return 0
