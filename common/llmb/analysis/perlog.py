"""One log, start to finish: read it, identify it, make its result (what a worker process does).

`LogAnalyzer` keeps only what is worth keeping between logs, bounded however many logs a tree
has: the identifier (the catalog, loaded on the first log that needs it, and the identities of
the last few manifests). A log's outcome is plain data (a result dict, or why it is
skipped) that a worker sends back to the process assembling the analysis.
"""

from __future__ import annotations

import functools
import json
import os
import re
import stat
from collections.abc import Mapping
from typing import NamedTuple, cast

from llmb.analysis import discover, timing, verdicts
from llmb.analysis.identify import Found, Identifier, display
from llmb.analysis.record import AnalyzedRun
from llmb.analysis.result import add_batch_output, analyze_log, batch_jobs, unreadable
from llmb.shared.files import path_problem
from llmb.shared.redact import secret_values
from llmb.shared.values import shown


class Task(NamedTuple):
    """A log to analyze: its DIR, its path, and the manifest next to it ((path, data or the
    problem reading it), or None). (Tuples: they cross between processes, many times over.)"""

    root: str
    path: str
    manifest: Found | None = None


# What of a result the process putting the analysis together needs besides its JSON line:
# its place in the order, its configuration's grouping and verdict, the summary's counts.
BRIEF_FIELDS = ("recipe", "model_size", "dtype", "gpu_type", "num_gpus", "scaling",
                "global_batch_size", "seq_length", "smoke_test", "config_key", "experiment",
                "filename", "status", "error", "reference_step_time", "reference_source",
                "final_iteration", "time_mean", "time_std_dev", "mfu", "tokens_per_second")


# json.dumps(value, ensure_ascii=True, allow_nan=False), its encoder made once (not per log)
encode = json.JSONEncoder(ensure_ascii=True, allow_nan=False).encode


class Outcome(NamedTuple):
    """A log's result (with a warning about its manifest, if any), or why it is skipped. A
    worker sends the result packed (`packed`): as its JSON line and its brief."""

    path: str
    result: AnalyzedRun | None = None
    skipped: str | None = None
    warning: str | None = None  # about the manifest at this path
    manifest: str | None = None
    catalog_error: str | None = None
    line: str | None = None  # the result as one JSON line (packed)
    brief: AnalyzedRun | None = None  # the result's BRIEF_FIELDS (packed)

    def packed(self) -> Outcome:
        """The result as its JSON line and brief: what crosses between processes, in a
        fraction of the time the whole result takes, and what the output is written from."""
        if self.result is None:
            return self
        fields: Mapping[str, object] = self.result  # (every one of RESULT_FIELDS is there)
        return self._replace(result=None, line=encode(self.result),
                             brief=cast(AnalyzedRun, {k: fields[k] for k in BRIEF_FIELDS}))

    def full(self) -> AnalyzedRun | None:
        """The whole result, packed or not."""
        return json.loads(self.line) if self.result is None and self.line else self.result


class LogAnalyzer:
    """Turns Tasks into Outcomes; one per process."""

    def __init__(self, base: str, gpu_type: str | None, window: tuple[int, int]) -> None:
        self.base, self.gpu_type, self.window = base, gpu_type, window
        self.identifier: Identifier | None = None
        # what a reason masks: the environment's secret values, taken once (the environment
        # does not change while a tree is analyzed; going through it per log cost more than
        # reading a small log)
        self.secrets = frozenset(secret_values(os.environ))
        self._empties: dict[tuple[str, str, str, str | None], _Empty] = {}
        # folder -> (jobs with a batch output, what a log's path and file name show before
        # its name)
        self._folders: dict[str, tuple[set[str], str, str]] = {}

    def prepare(self) -> None:
        """Load the catalog now: worker processes forked after this share it instead of each
        loading their own. (What analyzing a log needs is imported with this module, not per
        log: an import statement run per log costs as much as a small step of the analysis.)"""
        if self.identifier is None:
            self.identifier = Identifier(self.gpu_type)

    def __call__(self, task: Task) -> Outcome:
        """The task's outcome (an empty log's packed: see `empty`)."""
        try:
            st: os.stat_result | None = os.stat(task.path)
        except OSError:
            st = None
        if st is not None and stat.S_ISREG(st.st_mode) and st.st_size == 0 \
                and (outcome := self.empty(task)) is not None:
            return outcome
        return self.analyze(task, st)

    def analyze(self, task: Task, st: os.stat_result | None = None) -> Outcome:
        """The task's outcome: its log read, identified and judged (st: its stat, if taken)."""
        path = task.path
        rel = discover.relative(path, self.base)
        try:
            st = st or os.stat(path)
            if not stat.S_ISREG(st.st_mode):
                raise OSError(0, "not a regular file")
            scan = timing.scan_log(path)
        except OSError as exc:
            reason = exc.strerror or str(exc)
            if os.path.islink(path) and not os.path.exists(path):  # a loop is not dangling
                reason = str(path_problem(path, "file")).removeprefix("is a ")
            return self._done(task, unreadable(rel, path, f"cannot read: {reason}",
                                               self.secrets), rel)
        if scan.step_lines == 0 and scan.foreign and not scan.training:
            return Outcome(path, skipped=f"not a training log: {scan.foreign}")
        if not scan.steps and not scan.reached and not scan.looks_like_log \
                and not os.path.basename(path).startswith("log-"):
            return Outcome(path, skipped="no training output")
        try:
            result, warning = self._identified(task, rel, scan)
        except ModuleNotFoundError:
            raise
        except Exception as exc:  # one bad log must never stop the report
            result, warning = unreadable(rel, path, f"cannot analyze: {type(exc).__name__}"
                                              f": {shown(exc)[:200]}", self.secrets), None
        return self._done(task, result, rel, warning)

    def empty(self, task: Task) -> Outcome | None:
        """The outcome of an empty log, packed, without analyzing it again: the first empty log
        of a folder (with its name, manifest and DIR) is analyzed, the others take its result
        with their own file name and path. None where it must be analyzed: its job left a batch
        output, or it cannot be read (the caller found it an empty regular file)."""
        path = task.path
        folder, _, name = path.rpartition(os.sep)  # os.path.split's cut, without its cost
        if not folder or folder.endswith(os.sep):  # (/x.out, x.out, a//x.out: as it cuts them)
            folder, name = os.path.split(path)
        job = _JOB.match(name)
        if job is None or not os.access(path, os.R_OK):
            return None
        known = self._folders.get(folder)
        if known is None:
            if len(self._folders) >= FOLDERS_KEPT:
                self._folders.clear()
            jobs = discover.batch_jobs(folder)  # as the walk found them, else listed now
            known = self._folders[folder] = (batch_jobs(folder) if jobs is None else jobs,
                                             *self._prefixes(folder))
        if job.group(2) in known[0]:
            return None
        key = (folder, job.group(1), task.root, task.manifest[0] if task.manifest else None)
        kept = self._empties.get(key)
        if kept is None:
            outcome = self.analyze(task)
            rel = discover.relative(path, self.base)
            if outcome.result is None or outcome.result["filename"] != display(rel):
                return outcome.packed()
            if len(self._empties) >= FOLDERS_KEPT:
                self._empties.clear()
            self._empties[key] = _Empty(outcome)
            return outcome.packed()
        shown = display(name)  # shown as relative() and os.path.abspath show it: folder, name
        return kept.like(path, known[2] + shown, known[1] + shown)

    def _prefixes(self, folder: str) -> tuple[str, str]:
        """What a log's path shows before its name in a result: as os.path.abspath shows it,
        and as discover.relative (the file name) does."""
        where = display(os.path.abspath(folder or "."))
        rel = display(discover.relative(folder or ".", self.base))
        return (where if where == os.sep else where + os.sep,
                "" if rel == os.curdir else rel + os.sep)

    def _done(self, task: Task, result: AnalyzedRun, rel: str, warning: str | None = None
              ) -> Outcome:
        if result["experiment"] is None:
            result["experiment"] = display(discover.experiment_of(rel, self.base))
        result["config_key"] = verdicts.config_key(result)
        error = self.identifier.error if self.identifier else None
        return Outcome(task.path, result, warning=warning,
                       manifest=task.manifest[0] if task.manifest else None, catalog_error=error)

    def _identified(self, task: Task, rel: str, scan: timing.LogScan
                    ) -> tuple[AnalyzedRun, str | None]:
        if self.identifier is None:
            self.identifier = Identifier(self.gpu_type)
        ident, warning = self.identifier.identify(task.manifest, rel, task.root)
        result = analyze_log(task.path, rel, scan, ident, self.identifier, self.window,
                             self.secrets)
        if result["status"] == "Failed" and add_batch_output(task.path, scan):
            result = analyze_log(task.path, rel, scan, ident, self.identifier, self.window,
                                 self.secrets)
        return result, warning


# json.dumps(text, ensure_ascii=True) for a str, without its Python layers (a call per log)
_string = json.encoder.encode_basestring_ascii
_JOB = re.compile(r"(.*)_(\d+)_\d+\.out$")  # nemo-run's log-<name>_<job>_<n>.out
_MARK = ("\x00filename\x00", "\x00path\x00")  # stand-ins a result's JSON holds once each
outcome_of = functools.partial(tuple.__new__, Outcome)  # Outcome's, made in C (a log each)
FOLDERS_KEPT = 4096  # folders (and empty-log templates) remembered: forgotten all at once


class _Empty:
    """An empty log's result, as a template: its JSON line cut where the file name and the
    path go, and its brief."""

    def __init__(self, outcome: Outcome) -> None:
        assert outcome.result is not None
        self.outcome = outcome.packed()
        marked = json.dumps({**outcome.result, "filename": _MARK[0], "path": _MARK[1]},
                            ensure_ascii=True, allow_nan=False)
        head, rest = marked.split(json.dumps(_MARK[0]))
        self.parts = (head, *rest.split(json.dumps(_MARK[1])))

    def like(self, raw: str, filename: str, path: str) -> Outcome:
        """The outcome of the log at raw, shown as filename (relative) and path."""
        head, middle, tail = self.parts
        line = "".join((head, _string(filename), middle, _string(path), tail))
        kept = self.outcome
        assert kept.brief is not None
        return outcome_of((raw, None, None, kept.warning, kept.manifest, kept.catalog_error, line,
                         {**kept.brief, "filename": filename}))
