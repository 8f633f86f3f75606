"""The analysis of a tree put together from its logs' outcomes, in memory bounded by the tree's
shape, not by the number of its logs.

Results and skipped files go into a `Spill` (sorted, on disk past a few thousand) as they come;
what is kept per log otherwise is a few numbers of each configuration's successful runs (the
median needs them). Results are ordered so that the runs of one configuration follow each
other (recipe, size, dtype, GPU type, GPU count, scaling, configuration, then path;
unidentified runs last): configurations, the table and the JSON are written from one pass each
over that order.

The analysis is a mapping {"analysis": {...}, "results": [...], "configurations": [...],
"comparison": ... , "skipped": [...], "warnings": [...], "summary": {...}} whose results and
skipped are re-iterable (a Spill) and whose configurations carry no `files` (the JSON writer
takes them from the results); `materialize` turns it into plain lists (tests, --baseline).
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from collections.abc import Iterator
from typing import Any

from llmb.analysis import verdicts
from llmb.analysis.discover import base_of
from llmb.analysis.identify import DEFAULT_GPU, display
from llmb.analysis.perlog import Outcome
from llmb.analysis.record import AnalyzedRun, Configuration
from llmb.analysis.spill import Spill

# A result's place in the analysis: its configuration's (all but the last), then its file's.
Order = tuple[bool, str, float, str, str, int, str, str, str]


def order(result: AnalyzedRun) -> Order:
    """Runs of one configuration together: recipe, size (as a number), dtype, GPU type, scale,
    configuration; runs that could not be identified last; then by path."""
    size = re.match(r"\d+(?:\.\d+)?", str(result["model_size"] or ""))
    return (result["recipe"] is None, result["recipe"] or "", float(size.group()) if size else 0.0,
            result["dtype"] or "", result["gpu_type"] or "", result["num_gpus"] or 0,
            str(result["scaling"] or ""), result["config_key"] or "", result["filename"])


class Results(Spill):
    """The results in their order, kept as their JSON lines (with each one's configuration and
    file name): iterated as dicts; `lines` gives (line, config_key, filename) as kept, which the
    JSON writer writes as they are."""

    def __iter__(self) -> Iterator[AnalyzedRun]:
        return (json.loads(line) for line, _, _ in super().__iter__())

    def lines(self) -> Iterator[tuple[str, str, str]]:
        return super().__iter__()


class Assembly:
    """Takes outcomes and skipped files in any order; `finish` gives the analysis."""

    def __init__(self, roots: list[str], gpu_type: str | None, window: tuple[int, int],
                 tolerance: float) -> None:
        self.roots, self.gpu_type, self.window, self.tolerance = roots, gpu_type, window, tolerance
        self.base = base_of(roots)
        self.results = Results()
        self.groups = verdicts.Groups(window)
        self._orders: dict[str, tuple[bool, str, float, str, str, int, str, str]] = {}
        # (config_key -> its order but the file)
        self.skipped = Spill()
        self.warnings: dict[str, str] = {}  # manifest (shown relative) -> warning
        self.status: Counter[str] = Counter()
        self.reasons: Counter[str] = Counter()
        self.unreadable = 0
        self.catalog_error: str | None = None

    def skip(self, path: str, reason: str) -> None:
        shown_path = display(os.path.relpath(path, self.base))
        self.skipped.add(shown_path, {"path": shown_path, "reason": reason})
        self.reasons[reason] += 1

    def add(self, outcome: Outcome) -> None:
        """A log's outcome, packed by a worker or not."""
        if outcome.result is not None:
            outcome = outcome.packed()
        path, _, skipped, warning, manifest, catalog_error, line, brief = outcome
        if skipped is not None or line is None or brief is None:
            self.skip(path, skipped or "no result")
            return
        self.catalog_error = self.catalog_error or catalog_error
        if warning and manifest is not None:
            self.warnings.setdefault(display(os.path.relpath(manifest, self.base)), warning)
        self.status[brief["status"]] += 1
        self.unreadable += bool(brief["error"])
        key, filename = brief["config_key"] or "", brief["filename"]
        config = self._orders.get(key)
        if config is None:  # the configuration's part of the order, once per configuration
            config = self._orders[key] = order(brief)[:-1]
        place = (*config, filename)
        self.results.add(place, (line, key, filename))
        self.groups.add(place, brief)

    def finish(self) -> dict[str, Any]:
        configs = self.groups.entries(self.tolerance)
        return {"analysis": self.settings(), "results": self.results,
                "configurations": configs, "comparison": None, "skipped": self.skipped,
                "warnings": [{"path": p, "warning": w} for p, w in sorted(self.warnings.items())],
                "summary": self.summary(configs)}

    def settings(self) -> dict[str, Any]:
        """The JSON's `analysis`: what was analyzed, and how."""
        return {
            "directory": display(os.path.abspath(self.base)),
            "directories": [display(os.path.abspath(r)) for r in self.roots],
            "window": {"first_iteration": self.window[0], "last_iteration": self.window[1]},
            "tolerance_pct": self.tolerance,
            "std_dev": "population",
            "iterations": "0-based; Success when the last iteration printed is the final one",
            "default_gpu_type": self.gpu_type or DEFAULT_GPU,
            "time_to_train_tokens": 1e12,
            "catalog_error": self.catalog_error,
        }

    def summary(self, configs: list[Configuration]) -> dict[str, Any]:
        return {
            "logs": len(self.results), "success": self.status["Success"],
            "failed": self.status["Failed"], "invalid": self.status["Invalid"],
            "unreadable": self.unreadable, "skipped": len(self.skipped),
            "skipped_by_reason": dict(sorted(self.reasons.items())),
            "configurations": len(configs),
            "verdicts": {v: sum(c["verdict"] == v for c in configs) for v in verdicts.VERDICTS},
        }

    def close(self) -> None:
        self.results.close()
        self.skipped.close()


def materialize(analysis: dict[str, Any]) -> dict[str, Any]:
    """The analysis with plain lists, each configuration with its files."""
    results = list(analysis["results"])
    files: dict[str, list[str]] = {}
    for r in results:
        files.setdefault(r["config_key"], []).append(r["filename"])
    configs = [{**c, "files": files.get(c["config_key"], [])}
               for c in analysis["configurations"]]
    return {**analysis, "results": results, "configurations": configs,
            "skipped": list(analysis["skipped"])}
