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
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from llmb.analysis import timing

DEFAULT_TOLERANCE = 5.0
VERDICTS = ("pass", "below", "no_reference", "no_successful_run")
IDENTITY_FIELDS = ("recipe", "model_size", "dtype", "gpu_type", "num_gpus", "scaling",
                   "global_batch_size", "seq_length", "smoke_test")
# A configuration's own spread: each run's step-time jitter counts twice (two sigma).
JITTER_SIGMAS = 2.0


def config_key(result: Mapping[str, Any]) -> str:
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


def _median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def _r(value: float | None, places: int) -> float | None:
    return None if value is None else round(value, places)


def judge(pct: float | None, has_figure: bool, tolerance: float) -> str:
    if not has_figure:
        return "no_successful_run"
    if pct is None:
        return "no_reference"
    return "pass" if pct >= 100 - tolerance else "below"


def configurations(results: Iterable[Mapping[str, Any]],
                   tolerance: float = DEFAULT_TOLERANCE) -> list[dict[str, Any]]:
    """One entry per configuration, in the order its first run appears."""
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for r in results:
        groups.setdefault(r["config_key"], []).append(r)
    out = []
    for key, runs in groups.items():
        ok = [r for r in runs if r["status"] == "Success" and r["time_mean"] is not None]
        times = [r["time_mean"] for r in ok]
        median = _median(times)
        spread = timing.stats(times)
        cv = (spread.std_dev / spread.mean
              if len(times) > 1 and spread.mean and spread.std_dev is not None else None)
        ref = next((r["reference_step_time"] for r in runs
                    if r.get("reference_step_time") is not None), None)
        pct = ref / median * 100 if ref is not None and median else None
        first = runs[0]
        jitter = [r["time_std_dev"] / r["time_mean"] * 100 for r in ok
                  if r.get("time_std_dev") is not None and r["time_mean"]]
        mfu = [r["mfu"] for r in ok if r.get("mfu") is not None]
        entry: dict[str, Any] = {k: first.get(k) for k in IDENTITY_FIELDS}
        entry.update(
            config_key=key,
            experiment=first.get("experiment"),
            runs=len(runs), successful_runs=len(ok),
            failed_runs=sum(r["status"] == "Failed" for r in runs),
            invalid_runs=sum(r["status"] == "Invalid" for r in runs),
            time_median=_r(median, 6), time_min=_r(min(times, default=None), 6),
            time_max=_r(max(times, default=None), 6), time_cv=_r(cv, 6),
            step_jitter_pct=_r(_median(jitter), 4),
            reference_step_time=ref,
            reference_source=next((r["reference_source"] for r in runs
                                   if r.get("reference_source")), None),
            pct_of_reference=_r(pct, 3),
            verdict=judge(pct, bool(ok), tolerance),
            mfu_median=_r(_median(mfu), 6),
            tokens_per_second_median=_r(_median(
                [r["tokens_per_second"] for r in ok if r.get("tokens_per_second")]), 1),
            files=[r["filename"] for r in runs],
        )
        out.append(entry)
    return out


def spread_pct(config: Mapping[str, Any]) -> float:
    """How far a configuration's own runs scatter, in percent of its median: the range of its
    runs' means, and at least JITTER_SIGMAS times its runs' step-time jitter."""
    median = config.get("time_median")
    if not median:
        return 0.0
    span = (config["time_max"] - config["time_min"]) / median * 100
    return max(span, JITTER_SIGMAS * (config.get("step_jitter_pct") or 0.0))


def check_problems(results: Sequence[Mapping[str, Any]],
                   configs: Sequence[Mapping[str, Any]], tolerance: float) -> list[str]:
    """What makes `--check` fail: configurations below the tolerance or without a successful
    run, and Invalid runs. Empty when the check passes."""
    problems = []
    below = [c for c in configs if c["verdict"] == "below"]
    if below:
        worst = min(below, key=lambda c: c["pct_of_reference"])
        problems.append(f"{len(below)} configuration(s) below {100 - tolerance:g}% of the "
                        f"reference (worst: {worst['config_key']} at "
                        f"{worst['pct_of_reference']:.1f}%)")
    none = [c for c in configs if c["verdict"] == "no_successful_run"]
    if none:
        problems.append(f"{len(none)} configuration(s) without a successful run (e.g. "
                        f"{none[0]['config_key']})")
    invalid = [r for r in results if r["status"] == "Invalid"]
    if invalid:
        problems.append(f"{len(invalid)} Invalid run(s) (e.g. {invalid[0]['filename']})")
    return problems
