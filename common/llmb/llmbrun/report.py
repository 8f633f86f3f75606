"""`llmb-run report`: the analyzer's report over every run of the install (its `--report=DIR`:
index.html, report.md, plots/), with the sections that features add to it.

The seam: a feature that has something to add to the install's report (the screen: its
newest results) gives `cmd_report` a Section, a function that adds its part to the report
folder and returns the line llmb-run prints about it (or None when it had nothing to add).
The report itself knows no feature. Before any run (a new cluster's screen comes first), the
report is the analyzer's empty one with the sections that have something: written only when
one has (else "no runs yet", as without sections).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

from llmb import layout
from llmb.llmbrun import analyzer
from llmb.llmbrun.clusterconfig import ClusterConfig
from llmb.llmbrun.errors import RunError
from llmb.shared import values

# A section of the report a feature adds: (report folder, install tree) -> what to say, if any
Section = Callable[[Path, layout.Install], "str | None"]

def checked_output(output: str | None) -> str | None:
    """--output as given (None: the default), or RunError for an empty one or one with
    control characters (a newline in a file name breaks every listing of it)."""
    if output is None:
        return None
    if not output.strip():
        raise RunError("--output is empty; give a path or leave the flag out for the default")
    try:
        return values.require_printable("--output", output)
    except values.BadValue as exc:
        raise RunError(str(exc)) from None


def without_runs(out: Path, tree: layout.Install, workloads: Path,
                 sections: Sequence[Section]) -> list[str]:
    """The empty report with the sections, moved into `out` only when a section added
    something (built beside it first: a report already there stays otherwise); their notes."""
    import shutil
    import tempfile

    from llmb.shared import files

    staging = Path(tempfile.mkdtemp(prefix=".llmb-report-", dir=out))
    try:
        empty = analyzer.render(analyzer.empty(workloads), staging / "plots")
        files.atomic_write(staging / "report.md", empty.markdown)
        files.atomic_write(staging / "index.html", empty.html)
        notes = [note for section in sections if (note := section(staging, tree)) is not None]
        for made in sorted(staging.rglob("*")) if notes else []:
            if made.is_file():
                (out / made.relative_to(staging)).parent.mkdir(parents=True, exist_ok=True)
                os.replace(made, out / made.relative_to(staging))
        return notes
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def cmd_report(cfg: ClusterConfig, output: str | None, sections: Sequence[Section] = ()
               ) -> int:
    """`llmb-run report`: the analyzer's report (`--report=DIR`) over every run of the install:
    DIR/index.html (self-contained), DIR/report.md and DIR/plots/, with each section added;
    prints where, what each section said, and the analyzer's summary line. Before any run:
    the sections alone, if one has something."""
    output = checked_output(output)
    tree = cfg.workloads_dir
    out = Path(output) if output else cfg.tree.report
    index = out / "index.html"
    runs = analyzer.has_logs(tree)
    if not runs and not sections and not tree.is_dir():
        raise RunError(f"no runs yet: {tree} does not exist")
    chosen = analyzer.report_python(cfg) if runs or not sections else None
    if chosen is not None and chosen.python is None:
        raise RunError(f"cannot write the report: {chosen.missing()}")
    try:
        existed = out.is_dir()
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RunError(f"--output {values.shown(out)}: cannot create it: "
                       f"{exc.strerror}") from None
    if not runs and sections:
        notes = without_runs(out, cfg.tree, tree, sections)
        if not notes:
            if not existed:
                out.rmdir()
            raise RunError(f"no runs yet: {tree} " + ("holds no log" if tree.is_dir()
                                                       else "does not exist"))
        print(f"report: {values.shown(index)}")
        for said in notes:
            print(f"report: {said}")
        print(f"report: {values.shown(out / 'report.md')}")
        print(f"report: no runs yet under {values.shown(tree)}: the report holds its sections")
        return 0
    python = chosen.python if chosen is not None else None
    done = analyzer.analyze_with_report(tree, out, python)
    if done.unwritten is not None:
        raise RunError(f"the analyzer wrote no report into {values.shown(out)}: "
                       f"{done.unwritten}")
    notes = [note for section in sections if (note := section(out, cfg.tree)) is not None]
    print(f"report: {values.shown(index)}")
    for note in notes:
        print(f"report: {note}")
    if (out / "report.md").is_file():
        print(f"report: {values.shown(out / 'report.md')}")
    if done.analysis is not None:
        print(analyzer.summary_line(done.analysis))
    return 0
