"""`llmb-run archive`: an install's results packed for sharing (checked by
llmb.llmbrun.archive.verify).

An archive (`.tar.gz`, everything under `llmb-archive/`) holds:
    runs/<workload>/experiments/<exp>/<run>/   each run's llmb_manifest.json, its job script
                                              (<exp>_sbatch.sh) and the .out files of its job
                                              dir (training logs, batch output): an
                                              allow-list, nothing else
    analysis.json                             the analyzer's JSON over runs/
    report/                                   its HTML report, report.md and plots (when the
                                              analyzer can write one: it needs matplotlib)
    history.jsonl, preflight.json             llmb-run's history; the newest preflight report
    suite.json                                with --suite ID: the suite's record (then runs/
                                              and history.jsonl hold that suite's alone)
    verdict.json, baseline.yaml               a set suite's newest verdict (`suite report
                                              --baseline`) and the baseline it was judged
                                              against, when it has one
    screen/                                   the newest screen: screen.json, the install's
                                              baseline it was held to (baseline.json), and
                                              its job's output (its section is in the report
                                              too): llmb.llmbrun.archive.screenpart
    system.json                               sinfo/scontrol facts, GPU and driver facts where
                                              visible (nvidia-smi here; what the newest
                                              preflight job saw on the compute nodes),
                                              versions of llmb, nemo-run, the image
    ARCHIVE.json                              the index: every file with its size and sha256,
                                              the runs, what was left out and why
Never in it: images, checkpoints, nsys reports, nemo-run's own state files (they hold a
serialized executor, environment and all), NeMo's working directory, links. Every text that
goes in is redacted (llmb.shared.redact.redact_text): the values of the install's secrets (the HF
token file, secret-named variables of the environment and of cluster_config.yaml's env),
credential-shaped strings and the value of every secret-named assignment.

The archive is staged next to the output file (login nodes' /tmp is often small) and renamed
into place only when complete.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sys
import tarfile
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from llmb import manifest
from llmb.llmbrun import analyzer, report
from llmb.llmbrun.archive import facts, screenpart, staging
from llmb.llmbrun.archive.format import (
    FORMAT,
    INDEX,
    ROOT,
    ArchiveIndex,
    LeftOut,
    ReportNote,
    RunEntry,
    Staged,
    list_files,
    pieces,
)
from llmb.llmbrun.clusterconfig import ClusterConfig
from llmb.llmbrun.errors import PROG, RunError
from llmb.shared import clock, files, redact, values
from llmb.shared.progress import Progress

if TYPE_CHECKING:
    from llmb.llmbrun.preflight import PreflightReport

LEFT_OUT = {
    "nsys_reports": "nsys profiles (large, and not needed to check the numbers)",
    "checkpoints": "model checkpoints (large)",
    "nemo_run_state": "nemo-run's own state (a serialized executor with its environment)",
    "working_dir": "NeMo's working directory (code/: its own copies of the logs)",
    "links": "symbolic links (they could point anywhere)",
    "other": "files outside the allow-list",
    "secret_in_name": "runs and files whose name holds a secret (names are not redacted)",
}
EXAMPLES = 10  # paths of "other" files named in the index


# --- what goes in -----------------------------------------------------------------------------

def named_with_secret(name: str, secrets: set[str]) -> bool:
    """Whether a path's name holds a secret (a token used as a folder's or a log's name): names
    travel unredacted (a member's name, the index, the analysis, the report), so such a path
    is left out whole."""
    return redact.redact(name, secrets) != name or redact.looks_like_token(name)


def counted(left: dict[str, LeftOut], kind: str) -> LeftOut:
    """The count of what was left out of this kind, one more file in it."""
    info = left.setdefault(kind, LeftOut(files=0, bytes=0, examples=[]))
    info["files"] += 1
    return info


def _left_for_its_name(left: dict[str, LeftOut], name: str, what: str,
                       secrets: set[str]) -> None:
    counted(left, "secret_in_name")
    print(f"{PROG}: archive: warning: a {what} whose name holds a secret is left out: "
          f"{values.shown(redact.for_people(redact.redact(name, secrets)))}", file=sys.stderr)


def known_secrets(cfg: ClusterConfig) -> set[str]:
    """Values to mask wherever they appear: the HF token file's content and the values of
    secret-named variables of cluster_config.yaml's env and of this environment."""
    extra: list[str | None] = []
    token_file = cfg.hf_token_file
    if token_file:
        with contextlib.suppress(files.FileRefused):
            extra.append(files.read_token(token_file))
    return redact.secret_values({**os.environ, **cfg.env}, extra)


def copy_redacted(src: Path, dst: Path, secrets: set[str]) -> None:
    """Copy piece by piece (logs can be gigabytes, and a line too), masking secrets; bytes
    that are not UTF-8 pass through unchanged. Only a regular file is read."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    with files.open_regular_file(src) as fin, dst.open("wb") as fout:
        for raw in pieces(fin):
            line = raw.decode("utf-8", "surrogateescape")
            fout.write(redact.redact_text(line, secrets).encode("utf-8", "surrogateescape"))


def find_runs(workloads: Path) -> list[Path]:
    """Run directories of every workload: those with a run manifest or a job log, none
    reached through a link (a workload, experiment or run directory that is one)."""
    found = {p.parent for p in workloads.glob(f"*/experiments/*/*/{manifest.NAME}")}
    found |= {p.parent.parent for p in workloads.glob("*/experiments/*/*/*/log-*.out")}
    return sorted(d for d in found if d.is_dir() and files.link_under(d, workloads) is None)


def linked(cfg: ClusterConfig, path: Path, what: str, left: dict[str, LeftOut]) -> bool:
    """Whether `path` of the install is a link or lies under one: then it is left out (the
    archive follows no link), counted with the links and said in one line."""
    link = files.link_under(path, cfg.install) if path.is_relative_to(cfg.install) else \
        (str(path) if path.is_symlink() else None)
    if link is None:
        return False
    info = counted(left, "links")
    if len(info["examples"]) < EXAMPLES:
        info["examples"].append(values.shown(path))
    print(f"{PROG}: archive: warning: {what} is left out: {values.shown(link)} is a symbolic "
          "link (the archive follows no link)", file=sys.stderr)
    return True


def classify(run_dir: Path, path: Path) -> str | None:
    """None for a file that goes in, else the LEFT_OUT category it falls under."""
    rel = path.relative_to(run_dir)
    parts = rel.parts
    if path.is_symlink():
        return "links"
    if "nsys_profile" in parts or path.suffix in (".nsys-rep", ".qdrep", ".sqlite", ".qdstrm"):
        return "nsys_reports"
    if "checkpoints" in parts or path.suffix == ".distcp":
        return "checkpoints"
    if len(parts) > 2 and parts[1] == "code":
        return "working_dir"
    if len(parts) == 1 and (rel.name == manifest.NAME or rel.name.endswith("_sbatch.sh")):
        return None
    if len(parts) == 2 and rel.suffix == ".out":
        return None
    if len(parts) == 1:
        return "nemo_run_state"
    return "other"


def _files_under(run_dir: Path) -> list[Path]:
    """Every file and link under a run directory (links to directories included, never
    followed), sorted; without recursion: a tree of any depth."""
    found = []
    for dirpath, dirnames, filenames in files.walk(run_dir):
        found += [Path(dirpath, n) for n in filenames]
        found += [Path(dirpath, n) for n in dirnames if os.path.islink(os.path.join(dirpath, n))]
    return sorted(p for p in found if p.is_symlink() or p.is_file())


def stage_runs(cfg: ClusterConfig, root: Path, secrets: set[str], progress: Progress,
               only: set[Path] | None = None
               ) -> tuple[list[RunEntry], dict[str, LeftOut]]:
    """Copy each run's allow-listed files (redacted) under root/runs; the runs for the index
    and what was left out, by category. `only`: these run directories (resolved), no other."""
    workloads = cfg.workloads_dir
    runs: list[RunEntry] = []
    left: dict[str, LeftOut] = {}
    found = find_runs(workloads) if workloads.is_dir() else []
    if only is not None:
        found = [d for d in found if d.resolve() in only]
    for number, run_dir in enumerate(found, 1):
        rel = run_dir.relative_to(workloads)
        if named_with_secret(rel.as_posix(), secrets):
            _left_for_its_name(left, rel.as_posix(), "run", secrets)
            continue
        progress.update(f"run {number}/{len(found)}: {rel.parts[0]} {run_dir.name}")
        entry = RunEntry(run=f"runs/{rel.as_posix()}",
                         manifest=manifest.path_in(run_dir).is_file(), logs=[], job_script=None)
        for path in _files_under(run_dir):
            if named_with_secret(path.relative_to(run_dir).as_posix(), secrets):
                _left_for_its_name(left, path.relative_to(workloads).as_posix(), "file",
                                   secrets)
                continue
            kind = classify(run_dir, path)
            if kind is not None:
                info = counted(left, kind)
                with contextlib.suppress(OSError):
                    info["bytes"] += path.lstat().st_size
                if kind == "other" and len(info["examples"]) < EXAMPLES:
                    info["examples"].append(path.relative_to(workloads).as_posix())
                continue
            target = root / "runs" / rel / path.relative_to(run_dir)
            try:
                copy_redacted(path, target, secrets)
            except files.FileRefused:  # turned into a FIFO or a device since it was listed
                counted(left, "other")
                continue
            name = target.relative_to(root).as_posix()
            if path.name.startswith("log-") and path.suffix == ".out":
                entry["logs"].append(name)
            elif path.name.endswith("_sbatch.sh"):
                entry["job_script"] = name
        runs.append(entry)
    (root / "runs").mkdir(parents=True, exist_ok=True)
    return runs, left


class Analysis(TypedDict):
    """The index's notes on analysis.json and on the report."""

    analysis_error: str | None
    report: ReportNote


def stage_analysis(root: Path, chosen: analyzer.ReportPython) -> Analysis:
    """analysis.json and report/ from the analyzer over the staged runs (one call, by a
    Python with matplotlib, when one can write the report); the index's note on each."""
    state = Analysis(analysis_error=None, report={"status": "written", "detail": None})
    if chosen.python is None:
        state["report"] = {"status": "unavailable", "detail": chosen.missing()}
        try:
            done = analyzer.Analyzed(analyzer.analyze([root / "runs"]))
        except analyzer.AnalyzerError as exc:
            done = analyzer.Analyzed(None, str(exc))
    else:
        done = analyzer.analyze_with_report(root / "runs", root / "report", chosen.python)
        if done.unwritten is not None:
            shutil.rmtree(root / "report", ignore_errors=True)
            state["report"] = {"status": "unavailable", "detail": done.unwritten}
    data = done.analysis
    if data is None:
        state["analysis_error"] = done.error
        return state
    # the staging directory means nothing to a reader (and is no business of theirs): name
    # it as the archive does, in the JSON and in the report drawn from it
    data["analysis"].update(directory="runs", directories=["runs"])
    files.atomic_write(root / "analysis.json", json.dumps(data, indent=2) + "\n")
    if state["report"]["status"] == "written":
        page = analyzer.render(data, root / "report" / "plots")
        files.atomic_write(root / "report" / "report.md", page.markdown)
        files.atomic_write(root / "report" / "index.html", page.html)
    return state


@dataclass(frozen=True)
class SuiteScope:
    """What an archive of one suite holds: its record, its runs, its history lines."""

    suite_id: str
    record: Path  # suite.json
    run_dirs: set[Path]  # resolved
    jobs: set[str]
    kept: tuple[Path, ...] = ()  # a set suite's verdict and its baseline, beside its record


def suite_scope(cfg: ClusterConfig, suite_id: str) -> SuiteScope:
    from llmb.llmbrun import suite

    found = suite.load(cfg, suite_id)
    recs = [r for attempts in suite.submissions(cfg, found).values() for r in attempts]
    dirs = {Path(str(r["experiment_dir"])).resolve() for r in recs if r.get("experiment_dir")}
    kept = tuple(found.path.parent / name for name in (suite.VERDICT_FILE, suite.BASELINE_FILE))
    return SuiteScope(found.id, found.path, dirs, {str(r["job_id"]) for r in recs}, kept)


def copy_history(cfg: ClusterConfig, target: Path, secrets: set[str],
                 scope: SuiteScope | None) -> None:
    """history.jsonl, redacted; for a suite only its own records (submissions, states)."""
    if scope is None:
        copy_redacted(cfg.history.path, target, secrets)
        return
    lines = [json.dumps(r, sort_keys=True) for r in cfg.history.records()
             if (r.get("type") == "submit" and r.get("suite") == scope.suite_id)
             or (r.get("type") == "state" and str(r.get("job_id")) in scope.jobs)]
    files.atomic_write(target, redact.redact_text("".join(f"{ln}\n" for ln in lines),
                                                  secrets))


def stage(cfg: ClusterConfig, root: Path, progress: Progress,
          scope: SuiteScope | None = None) -> Staged:
    """Lay the archive out under root; return the index (without its file list)."""
    secrets = known_secrets(cfg)
    runs, left = stage_runs(cfg, root, secrets, progress, scope.run_dirs if scope else None)
    if os.path.lexists(cfg.history.path) and not linked(cfg, cfg.history.path, "the history",
                                                         left):
        try:
            copy_history(cfg, root / "history.jsonl", secrets, scope)
        except files.FileRefused as exc:  # a FIFO, a device, a directory at its name
            print(f"{PROG}: archive: warning: the history is left out: {exc}", file=sys.stderr)
    if scope is not None and not linked(cfg, scope.record, "the suite's record", left):
        copy_redacted(scope.record, root / "suite.json", secrets)
    for path in scope.kept if scope is not None else ():
        if os.path.lexists(path) and not linked(cfg, path, f"the suite's {path.name}", left):
            copy_redacted(path, root / path.name, secrets)
    latest = stage_preflight(cfg, root, secrets, left)
    progress.update("system facts (sinfo, scontrol, nvidia-smi)")
    files.atomic_write(root / "system.json", redact.redact_text(
        json.dumps(facts.system_facts(cfg, latest), indent=2) + "\n", secrets))
    progress.update("analyzing the logs and writing the report")
    state = stage_analysis(root, analyzer.report_python(cfg))
    noted = screenpart.stage_screen(cfg, root, secrets, state["report"]["status"] == "written",
                                    left)
    index = Staged(format=FORMAT, created=clock.iso(), made_by=f"{PROG} archive",
                   install=str(cfg.install))
    if scope:
        index["suite"] = scope.suite_id
    index.update({"runs": runs, **state, "screen": noted,
                  "left_out": {k: {**v, "why": LEFT_OUT[k]} for k, v in left.items()}})
    return index


def stage_preflight(cfg: ClusterConfig, root: Path, secrets: set[str],
                    left: dict[str, LeftOut]) -> PreflightReport | None:
    """preflight.json: the newest preflight report (redacted), unless it is a link or not a
    report (then left out, said in one line); the report, for the system facts."""
    from llmb.llmbrun import preflight

    if linked(cfg, cfg.tree.preflight / preflight.LATEST_FILE, "the preflight report", left):
        return None
    try:
        latest = preflight.latest(cfg)
    except RunError as exc:
        print(f"{PROG}: archive: warning: the preflight report is left out: {exc}",
              file=sys.stderr)
        return None
    if latest is not None:
        files.atomic_write(root / "preflight.json", redact.redact_text(
            json.dumps(latest, indent=2) + "\n", secrets))
    return latest


def output_path(cfg: ClusterConfig, output: str | None) -> Path:
    output = report.checked_output(output)
    out = Path(output) if output else cfg.tree.archive(clock.stamp())
    problem = files.path_problem(out, "file")  # never raises: a name too long, a loop, ...
    if problem == "is a directory, not a file":
        raise RunError(f"--output {values.shown(out)} is a directory; name the archive file, "
                       f"e.g. {values.shown(out / 'results.tar.gz')}")
    if problem not in (None, "does not exist"):
        raise RunError(f"--output {values.shown(out)} {problem}")
    if not out.parent.is_dir():
        raise RunError(f"--output {values.shown(out)}: {values.shown(out.parent)} is not a "
                       "directory")
    if not os.access(out.parent, os.W_OK):
        raise RunError(f"--output {values.shown(out)}: {values.shown(out.parent)} is not "
                       "writable")
    staging.refuse_own(cfg, out)
    return out


def cmd_archive(cfg: ClusterConfig, output: str | None, suite_id: str | None = None) -> int:
    """The install's runs, or with `suite_id` that suite's alone (its suite.json added)."""
    out = output_path(cfg, output)
    scope = suite_scope(cfg, suite_id) if suite_id else None
    for place in dict.fromkeys([out.parent.resolve(), cfg.install.resolve()]):
        for note in staging.sweep(place):
            print(f"{PROG}: archive: {note}", file=sys.stderr)
    written: list[Path] = []  # out, once renamed into place whole
    try:
        with staging.stoppable():
            tmp = Path(tempfile.mkdtemp(prefix=staging.prefix(), dir=out.parent))
            try:
                with Progress(f"{PROG}: archive") as progress:
                    index = _build(cfg, tmp, out, progress, scope, written)
            finally:  # whole, whatever stops it: a signal now waits until it is done
                with _signals_held():
                    shutil.rmtree(tmp, ignore_errors=True)
    except staging.Stopped as exc:  # say what is true: the archive may be whole by now
        stopped = str(exc).partition(";")[0]  # "stopped by SIGTERM"
        if written:
            raise staging.Stopped(f"{stopped} after the archive {values.shown(out)} was written "
                                  "whole; its staging copy was removed", status=exc.status
                                  ) from None
        raise
    except OSError as exc:  # a full disk while staging, compressing or writing
        where = f" ({values.shown(exc.filename)})" if exc.filename else ""
        raise RunError(f"cannot write the archive: {exc.strerror or exc}{where}; nothing was "
                       f"written to {values.shown(out)}") from None
    summarize(out, index)
    return 0


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """SIGTERM and SIGHUP held back while in it, raised again when it ends (a signal mask would
    not do: the progress line's thread would take the signal)."""
    pending: list[int] = []
    saved = {s: signal.signal(s, lambda signum, _frame: pending.append(signum))
             for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)
        for signum in dict.fromkeys(pending):
            signal.raise_signal(signum)


def _build(cfg: ClusterConfig, tmp: Path, out: Path, progress: Progress,
           scope: SuiteScope | None, written: list[Path]) -> ArchiveIndex:
    """Stage, index and compress under tmp; rename into out only when whole (then `written`
    holds it)."""
    root = tmp / ROOT
    root.mkdir()
    index: ArchiveIndex = {**stage(cfg, root, progress, scope), "files": list_files(root)}
    files.atomic_write(root / INDEX, json.dumps(index, indent=2) + "\n")
    progress.update(f"compressing {len(index['files'])} file(s) "
                    f"({sum(f['bytes'] for f in index['files'].values()) / 1e6:.1f} MB)")
    partial = tmp / "archive.tar.gz"
    with tarfile.open(partial, "w:gz", compresslevel=6) as tar:
        tar.add(root, arcname=ROOT, filter=_normalized)
    with _signals_held():  # renamed and known to be: a signal's message tells which
        os.replace(partial, out)
        written.append(out)
    progress.finish(f"{out.stat().st_size / 1e6:.1f} MB written")
    return index


def summarize(out: Path, index: ArchiveIndex) -> None:
    runs = index["runs"]
    logs = sum(len(r["logs"]) for r in runs)
    missing = " and ".join(what for what, gone in (
        ("no analysis", index["analysis_error"]),
        ("no HTML report", index["report"]["status"] != "written")) if gone)
    print(f"archive: {values.shown(out)} ({len(runs)} run(s), {logs} log(s), "
          f"{len(index['files'])} file(s)" + (f"; {missing}" if missing else "") + ")")
    for kind, info in index["left_out"].items():
        print(f"  left out: {info['files']} file(s), {info['bytes'] / 1e6:.1f} MB of "
              f"{LEFT_OUT[kind]}")
    for run in runs:
        if run["manifest"] and not run["logs"]:
            print(f"  warning: {values.shown(run['run'])} has no training log (a job that "
                  "has not started, or a failed submission); verify-archive reports it")
        if not run["manifest"]:
            print(f"  note: {values.shown(run['run'])} has no {manifest.NAME} (a run made "
                  "without llmb's launch)")
    if "verdict.json" in index["files"]:
        print("  set verdict: verdict.json, judged against baseline.yaml")
    if noted := index.get("screen"):
        named = ",".join(noted["suspects"] or []) or "none"
        print(f"  screen {noted['stamp']}: suspects {named}")
    if index["analysis_error"]:
        print(f"  no analysis.json: {index['analysis_error']}")
    if index["report"]["status"] != "written":
        print(f"  no HTML report: {index['report']['detail']}")


def _normalized(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mode = 0o755 if info.isdir() else 0o644
    return info
