"""Repeats and verdicts: runs of one configuration grouped, judged against the reference.

A configuration is recipe, model size, dtype, GPU type, GPU count, scaling and global batch
size (and whether it was a smoke test); `config_key` names it. Its figure is the median of its
successful runs' window means (a Success run with steps inside the window; the only runs that
can be judged). `pct_of_reference` is reference / median x 100 (above 100: faster than
published) and the verdict, at a tolerance of PCT percent, is:

    pass               pct_of_reference >= 100 - PCT
    below              pct_of_reference <  100 - PCT
    no_reference       no published step time for this configuration (or a smoke test)
    no_successful_run  no run of it succeeded with a figure
    window_outside_runs  runs of it succeeded, but all end before the window's first iteration
                       (--window beyond the runs): no figure to judge
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast

from llmb.analysis import timing
from llmb.analysis.record import AnalyzedRun, Configuration

DEFAULT_TOLERANCE = 5.0
VERDICTS = ("pass", "below", "no_reference", "no_successful_run", "window_outside_runs")
IDENTITY_FIELDS = ("recipe", "model_size", "dtype", "gpu_type", "num_gpus", "scaling",
                   "global_batch_size", "seq_length", "smoke_test")
# A configuration's own spread: each run's step-time jitter counts twice (two sigma).
JITTER_SIGMAS = 2.0


def config_key(result: AnalyzedRun) -> str:
    """`llama3.1/8b/fp8/h100/16gpu/weak/gbs256` (`/smoke` for a smoke test); a run that
    could not be identified is its own configuration: `unidentified/<experiment>`."""
    if result.get("recipe"):
        gbs = result.get("global_batch_size")
        parts = [result["recipe"], result.get("model_size"), result.get("dtype"),
                 result.get("gpu_type"), f"{result.get('num_gpus')}gpu",
                 result.get("scaling") or "-", f"gbs{gbs if gbs else '?'}"]
        if result.get("smoke_test"):
            parts.append("smoke")
        return "/".join(str(p) for p in parts)
    return f"unidentified/{result.get('experiment') or result.get('filename')}"


def _identity(r: AnalyzedRun) -> dict[str, object]:
    """The configuration's identity, as its run states it (IDENTITY_FIELDS)."""
    fields: Mapping[str, object] = r
    return {k: fields.get(k) for k in IDENTITY_FIELDS}


def _median(values: Sequence[float]) -> float | None:
    return timing.median(values) if values else None


def _r(value: float | None, places: int) -> float | None:
    return None if value is None else round(value, places)


def judge(pct: float | None, has_figure: bool, tolerance: float) -> str:
    if not has_figure:
        return "no_successful_run"
    if pct is None:
        return "no_reference"
    return "pass" if pct >= 100 - tolerance else "below"


class Group:
    """What the runs of one configuration add up to, kept as they come: counts and each
    successful run's figures (a few numbers per run, never the run itself)."""

    def __init__(self, first: AnalyzedRun, keep_files: bool, place: Any) -> None:
        self.identity = _identity(first)
        self.key, self.experiment = first["config_key"] or "", first.get("experiment")
        self.first = place  # the place of its first run, when runs come in any order
        self.runs = self.failed = self.invalid = 0
        self.times: list[float] = []
        self.jitter: list[float] = []
        self.mfu: list[float] = []
        self.tokens: list[float] = []
        self.reference: float | None = None
        self.source: str | None = None
        self.files: list[str] | None = [] if keep_files else None
        self.ended_before = False  # a successful run ended before the window began

    def add(self, r: AnalyzedRun, window: tuple[int, int] | None) -> None:
        self.runs += 1
        self.failed += r["status"] == "Failed"
        self.invalid += r["status"] == "Invalid"
        if self.reference is None:
            self.reference = r.get("reference_step_time")
        self.source = self.source or r.get("reference_source")
        if self.files is not None:
            self.files.append(r["filename"])
        if r["status"] != "Success":
            return
        final, mean = r.get("final_iteration"), r["time_mean"]
        if mean is None:
            if window is not None and final is not None and final < window[0]:
                self.ended_before = True
            return
        self.times.append(mean)
        if (std_dev := r.get("time_std_dev")) is not None and mean:
            self.jitter.append(std_dev / mean * 100)
        if (mfu := r.get("mfu")) is not None:
            self.mfu.append(mfu)
        if tokens := r.get("tokens_per_second"):
            self.tokens.append(tokens)

    def entry(self, tolerance: float) -> Configuration:
        times = self.times
        median = _median(times)
        spread = timing.stats(times)
        cv = (spread.std_dev / spread.mean
              if len(times) > 1 and spread.mean and spread.std_dev is not None else None)
        pct = self.reference / median * 100 if self.reference is not None and median else None
        verdict = judge(pct, bool(times), tolerance)
        if verdict == "no_successful_run" and self.ended_before:
            verdict = "window_outside_runs"
        entry = cast(Configuration, dict(self.identity))
        entry.update({
            "config_key": self.key, "experiment": self.experiment,
            "runs": self.runs, "successful_runs": len(times),
            "failed_runs": self.failed, "invalid_runs": self.invalid,
            "time_median": _r(median, 6), "time_min": _r(min(times, default=None), 6),
            "time_max": _r(max(times, default=None), 6), "time_cv": _r(cv, 6),
            "step_jitter_pct": _r(_median(self.jitter), 4),
            "reference_step_time": self.reference, "reference_source": self.source,
            "pct_of_reference": _r(pct, 3), "verdict": verdict,
            "mfu_median": _r(_median(self.mfu), 6),
            "tokens_per_second_median": _r(_median(self.tokens), 1),
        })
        if self.files is not None:
            entry["files"] = self.files
        return entry


class Groups:
    """The configurations of runs that come in any order, each run with its place in the
    analysis' order (`place`): a configuration takes its identity from its first run in that
    order, and the configurations are listed in the order of their first runs. (A run's
    reference is its configuration's, the same for every run of it.) Memory: one Group per
    configuration, a few numbers per run."""

    def __init__(self, window: tuple[int, int] | None, files: bool = False) -> None:
        self.window, self.files = window, files
        self.groups: dict[str, Group] = {}

    def add(self, place: Any, r: AnalyzedRun) -> None:
        key = r["config_key"] or ""
        group = self.groups.get(key)
        if group is None:
            group = self.groups[key] = Group(r, self.files, place)
        elif place < group.first:
            group.first = place
            group.identity = _identity(r)
            group.experiment = r.get("experiment")
        group.add(r, self.window)

    def entries(self, tolerance: float) -> list[Configuration]:
        ordered = sorted(self.groups.values(), key=lambda g: g.first)
        return [g.entry(tolerance) for g in ordered]


def configurations(results: Iterable[AnalyzedRun],
                   tolerance: float = DEFAULT_TOLERANCE, window: tuple[int, int] | None = None,
                   files: bool = True) -> list[Configuration]:
    """One entry per configuration, in the order its first run appears. files=False leaves the
    list of each configuration's files out (the JSON writer streams it from the results)."""
    groups = Groups(window, files)
    for n, r in enumerate(results):
        groups.add(n, r)
    return groups.entries(tolerance)


def spread_pct(config: Configuration) -> float:
    """How far a configuration's own runs scatter, in percent of its median: the range of its
    runs' means, and at least JITTER_SIGMAS times its runs' step-time jitter."""
    median, low, high = config.get("time_median"), config.get("time_min"), config.get("time_max")
    if not median or low is None or high is None:  # (a median comes with its min and max)
        return 0.0
    span = (high - low) / median * 100
    return max(span, JITTER_SIGMAS * (config.get("step_jitter_pct") or 0.0))


def check_problems(results: Iterable[AnalyzedRun],
                   configs: Sequence[Configuration], tolerance: float,
                   window: tuple[int, int] = timing.WINDOW) -> list[str]:
    """What makes `--check` fail: configurations below the tolerance or without a successful
    run, configurations whose runs all end before the window, and Invalid runs. Empty when the
    check passes."""
    problems = []
    below = [c for c in configs if c["verdict"] == "below"]
    if below:
        worst = min(below, key=lambda c: c.get("pct_of_reference") or 0.0)  # (each has one)
        problems.append(f"{len(below)} configuration(s) below {100 - tolerance:g}% of the "
                        f"reference (worst: {worst['config_key']} at "
                        f"{worst['pct_of_reference']:.1f}%)")
    outside = [c for c in configs if c["verdict"] == "window_outside_runs"]
    none = [c for c in configs if c["verdict"] == "no_successful_run"]
    if none:
        problems.append(f"{len(none)} configuration(s) without a successful run (e.g. "
                        f"{none[0]['config_key']})")
    invalid, example, ended = 0, None, None
    for r in results:
        if r["status"] == "Invalid":
            invalid += 1
            example = example or r["filename"]
        elif outside and ended is None and r["config_key"] == outside[0]["config_key"] \
                and r["status"] == "Success" and r["time_mean"] is None:
            ended = r.get("final_iteration")
    if outside:
        problems.insert(len(problems) - bool(none),
                        f"the window {window[0]}-{window[1]} lies outside the runs of "
                        f"{len(outside)} configuration(s) (e.g. {outside[0]['config_key']}, whose "
                        f"runs end at iteration {ended}): give a window inside the runs, e.g. "
                        "--window=11-44")
    if invalid:
        problems.append(f"{invalid} Invalid run(s) (e.g. {example})")
    return problems
