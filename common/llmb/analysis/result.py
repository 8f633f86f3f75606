"""One run's result: its scan (llmb.analysis.timing) and identity (llmb.analysis.identify) turned
into figures, a status and a reason.

Status: `Success` when the run reached its final iteration, `Failed` when it did not, `Invalid`
when its numbers cannot be trusted whatever it reached: a NaN/Inf loss or grad norm, a step
time that is not a positive finite number, or an MFU above 100% of the GPU's peak (a wrong GPU
type or a log that is not this configuration's; the reason says which). `reason` is null for a
clean Success, else one line: why it failed (llmb.analysis.failures), what made it invalid, what
went wrong after the last step of a run that finished (a warning), a restart.
Every figure is finite or null, so the JSON is always valid.
"""

from __future__ import annotations

import math
import os
import re
from collections import OrderedDict
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from llmb.analysis import bridgeref, crosscheck, discover, failures, timing
from llmb.analysis.formats import RESULT_FIELDS
from llmb.analysis.identify import display
from llmb.analysis.record import AnalyzedRun
from llmb.recipes import perf
from llmb.shared import redact

if TYPE_CHECKING:
    from llmb.analysis.identify import Identifier, Identity


def empty_result(rel: str, path: str) -> AnalyzedRun:
    """A result with every field in RESULT_FIELDS, null but its file, path and status."""
    result = cast(AnalyzedRun, dict.fromkeys(RESULT_FIELDS))
    result.update({"filename": display(rel), "path": display(os.path.abspath(path)),
                   "status": "Failed", "suspect_nodes": []})
    return result


def unreadable(rel: str, path: str, error: str, secrets: Collection[str] | None = None
               ) -> AnalyzedRun:
    """The result of a log that could not be read or analyzed: Failed, the error its reason
    (secrets: the environment's secret values, taken once for many logs; else read now)."""
    result = empty_result(rel, path)
    error = redact.for_people(error, values=secrets)
    result.update({"error": error, "reason": error})
    return result


def finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _round(value: float | None, places: int) -> float | None:
    """Rounded to `places` decimals, but never below 9 significant digits (0.0004402 stays);
    None for None and for anything not finite."""
    if value is None or not math.isfinite(value):
        return None
    return round(value, places) if abs(value) >= _FLOOR[places] else float(f"{value:.9g}")


_FLOOR = [10 ** (9 - places) for places in range(16)]  # _round's, by places


# A run's figure needs a step line with a plausible time for this share of the window's
# iterations it reached (up to its final iteration); below it the run is Invalid.
MIN_WINDOW_SHARE = 0.9


@dataclass(frozen=True)
class Span:
    """The part of the window a run's figure covers, and what the window rule says of it."""

    iterations: tuple[int, int] | None  # None: the window lies beyond the run
    invalid: str | None = None
    note: str | None = None


def window_span(scan: timing.LogScan, window: tuple[int, int], final: int | None) -> Span:
    """The window rule: the window ends at the run's final iteration; of its iterations up to
    the last one the run reached, at least MIN_WINDOW_SHARE need a step line with a plausible
    time."""
    first, last = window
    if final is not None and final < first:
        return Span(None, note=f"the window {first}-{last} lies beyond its final iteration "
                               f"{final}: no figure")
    end = last if final is None else min(last, final)
    note = (f"its final iteration {final} cuts the window {first}-{last} to {first}-{end}"
            if end < last else None)
    reached = scan.max_iteration
    upto = first - 1 if reached is None else min(end, reached)
    want = upto - first + 1
    if want <= 0:
        return Span((first, end), note=note)
    have = len(timing.window_values(scan.steps, (first, upto)))
    need = math.ceil(MIN_WINDOW_SHARE * want)
    invalid = None
    if have < need:
        invalid = (f"only {have} of the {want} window iterations {first}-{upto} have a step "
                   f"line with a plausible time (at least {need} needed)")
    return Span((first, end), invalid, note)


def analyze_log(path: str, rel: str, scan: timing.LogScan, ident: Identity | None,
                identifier: Identifier | None, window: tuple[int, int] = timing.WINDOW,
                secrets: Collection[str] | None = None) -> AnalyzedRun:
    """The log's result (secrets: the environment's secret values, masked in the reason, taken
    once for many logs; else read now)."""
    result = empty_result(rel, path)
    checked = crosscheck.log_facts(scan, ident, identifier)
    ident, no_reference = _bridge_reference(checked.ident, path)
    if ident is not None and ident["seq_length"] is None and scan.seq_length:
        ident = {**ident, "seq_length": scan.seq_length}  # a model the catalog does not know
    final_hint = ident["final_index"] if ident else None
    final = scan.final_index if scan.final_index is not None else final_hint
    complete = scan.complete(final_hint)
    span = window_span(scan, window, final)
    idx = timing.window_values(scan.steps, span.iterations) if span.iterations else []
    times = timing.stats([scan.steps[i].time for i in idx])
    result.update({
        "max_iteration": scan.max_iteration, "final_iteration": final,
        "window_steps": times.count, "time_mean": _round(times.mean, 6),
        "time_std_dev": _round(times.std_dev, 6),
        "checkpoint_save_s": _round(scan.checkpoint_save_s, 3),
        "checkpoint_load_s": _round(scan.checkpoint_load_s, 3)})
    flops = peak = None
    if ident is not None and identifier is not None:
        flops, peak = _identity(result, ident, identifier)
        result["reference_source"] = result["reference_source"] or no_reference
    _tflops(result, scan, ident, idx, flops)
    mfu = _derived(result, ident, times.mean, flops, peak)

    invalid = checked.invalid + _invalid(scan, ident, identifier, mfu, peak)
    if span.invalid:
        invalid.append(span.invalid)
    # (the peak and MFU checks take the identity as a plain dict)
    above = crosscheck.tflops_above_peak(scan, cast("dict[str, Any] | None", ident), identifier)
    if above is not None:
        invalid.append(above)
    elif ident is not None and not checked.invalid \
            and (wrong := crosscheck.model_check(scan, ident, idx, flops)):
        # (a figure above the peak, or a GPU count or GBS not the log's, says more)
        invalid.append(wrong)
    explained = failures.explain(scan.findings, complete=complete, last=scan.max_iteration,
                                 final=final, steps=len(scan.steps), first=scan.label(0))
    primary = scan.findings.primary()
    nan_grads = primary is not None and primary[0] == "nan"  # explained says it
    notes = [*invalid, explained or "", _restarts(scan), _skipped(scan), *checked.notes]
    if complete and not invalid:
        if span.note:
            notes.append(span.note)
        elif times.count == 0:
            notes.append(f"no step inside the window {window[0]}-{window[1]}: no figure to "
                         "judge")
    result["status"] = ("Invalid" if invalid or nan_grads else
                        "Success" if complete else "Failed")
    # (a log's error line may quote a secret: HF_TOKEN's value, a credential-shaped string)
    reason = "; ".join(n for n in notes if n)
    result["reason"] = redact.for_people(reason, values=secrets) if reason else None
    result["suspect_nodes"] = sorted(set(scan.findings.suspects())
                                     | set(scan.before_restart.suspects()))
    return result


def _bridge_reference(ident: Identity | None, path: str) -> tuple[Identity | None, str | None]:
    """A Megatron-Bridge run's reference, from the layout its log states (llmb.analysis.
    bridgeref), and why it has none; other runs as they are."""
    if ident is None or ident["smoke"] or not bridgeref.applies(ident["recipe"]):
        return ident, None
    return bridgeref.with_reference(ident, Path(path))


def _identity(result: AnalyzedRun, ident: Identity, identifier: Identifier
              ) -> tuple[float | None, float | None]:
    """The identity's fields into the result; (model FLOPs per sample, peak TFLOPS)."""
    result["smoke_test"] = ident["smoke"]
    flops = peak = None
    if not ident["smoke"]:
        flops = identifier.model_flops(ident)
        peak = identifier.peak_tflops(cast("dict[str, Any]", ident))
    ref = ident["reference"]
    result.update({
        "experiment": ident["experiment"], "identified_by": ident["by"],
        "recipe": ident["recipe"].name, "model_size": ident["model_size"],
        "dtype": ident["dtype"],
        "gpu_type": ident["gpu_type"], "num_gpus": ident["num_gpus"],
        "global_batch_size": ident["gbs"], "seq_length": ident["seq_length"],
        "scaling": ident["scaling"], "reference_step_time": ref.step_time if ref else None,
        "reference_source": ref.describe() if ref else None})
    return flops, peak


def _tflops(result: AnalyzedRun, scan: timing.LogScan, ident: Identity | None,
            idx: list[int], flops: float | None) -> None:
    """TFLOPS per GPU over the window: the log's, or computed from the model FLOPs when the
    log has none for a step or the recipe's logged figure is wrong."""
    log_tflops = [scan.steps[i].tflops for i in idx]
    gbs: int | None = ident["gbs"] if ident else None
    gpus: int | None = ident["num_gpus"] if ident else None
    unreliable = (ident is not None and not ident["smoke"]
                  and not ident["recipe"].logged_tflops)
    if idx and flops is not None and gbs and gpus and (unreliable or None in log_tflops):
        tflops = timing.stats(perf.tflops_per_gpu(gbs, flops, scan.steps[i].time, gpus)
                              for i in idx)
        result["tflops_source"] = "computed"
    else:
        tflops = timing.stats([t for t in log_tflops if t is not None])
        result["tflops_source"] = "log" if tflops.count else None
    result.update({"tflops_per_gpu_mean": _round(tflops.mean, 4),
                   "tflops_per_gpu_std_dev": _round(tflops.std_dev, 4)})


def _derived(result: AnalyzedRun, ident: Identity | None, mean: float | None,
             flops: float | None, peak: float | None) -> float | None:
    """Tokens/s, days to train, MFU and % of the reference; the MFU (None when unknown)."""
    if ident is None or not mean or not ident["gbs"] or ident["smoke"]:
        return None
    gbs, gpus = ident["gbs"], ident["num_gpus"]
    tokens = (finite(perf.tokens_per_second(ident["seq_length"], gbs, mean))
              if ident["seq_length"] else None)
    result["tokens_per_second"] = _round(tokens, 1)
    if tokens:
        result["time_to_train_days"] = _round(perf.days_to_train(tokens), 4)
    mfu = None
    if flops is not None and peak and gpus:
        mfu = perf.mfu(gbs, flops, mean, gpus, peak)
        result["mfu"] = _round(mfu, 6)
    if result["reference_step_time"] is not None:
        result["pct_of_reference"] = _round(result["reference_step_time"] / mean * 100, 3)
    return mfu


def _invalid(scan: timing.LogScan, ident: Identity | None,
             identifier: Identifier | None, mfu: float | None, peak: float | None) -> list[str]:
    """Why the run's numbers cannot be trusted (empty when they can)."""
    out = []
    at = scan.label  # an iteration as the log numbers it
    if scan.nonfinite is not None:
        iteration, name, value = scan.nonfinite
        out.append(f"{name} is {value} at iteration {at(iteration)}")
    if scan.nan_iterations is not None:
        iteration, count = scan.nan_iterations
        out.append(f"number of nan iterations is {count} at iteration {at(iteration)}")
    if scan.first_bad_time is not None:
        iteration, value = scan.first_bad_time
        out.append(f"{scan.bad_times} step time(s) are not a plausible number of seconds "
                   f"(first: {value} at iteration {at(iteration)}; allowed: "
                   f"{timing.MIN_STEP_SECONDS:g} s to {timing.MAX_STEP_SECONDS / 86400:g} days); "
                   "they are not counted")
    if scan.refused is not None:
        iteration, name, value = scan.refused
        out.append(f"{scan.refused_count} step line value(s) are not numbers (first: {name} "
                   f"{value!r} at iteration {at(iteration)})")
    if scan.final_change is not None:
        iteration, before, after = scan.final_change
        out.append(f"the final iteration changes within the log ({at(before)}, then "
                   f"{at(after)} at iteration {at(iteration)}): two runs in one log")
    if scan.beyond_final is not None:
        iteration, final = scan.beyond_final
        out.append(f"iteration {at(iteration)} is beyond its final iteration {at(final)}")
    if mfu is not None and ident is not None and peak and mfu > 1:
        out.append(crosscheck.impossible_mfu(cast("dict[str, Any]", ident), identifier, mfu,
                                             peak))
    return out


def _restarts(scan: timing.LogScan) -> str:
    if not scan.restart_count:
        return ""
    reached, to = scan.restarts[0]
    times = "" if scan.restart_count == 1 else f" ({scan.restart_count} times)"
    text = (f"training started over at iteration {scan.label(to)} after reaching "
            f"{scan.label(reached)}{times}")
    if scan.before_restart:
        text += f", after {scan.before_restart.summary()}"
    return text


def _skipped(scan: timing.LogScan) -> str:
    """Megatron's skipped iterations (an optimizer step it left out: the run goes on)."""
    if scan.skipped_iterations is None:
        return ""
    first, total = scan.skipped_iterations
    return (f"number of skipped iterations: {total} in all, the first at iteration "
            f"{scan.label(first)}")


_JOB_LOG = re.compile(r"_(\d+)_\d+\.out$")  # nemo-run's log-<name>_<job>_<n>.out
_BATCH = discover.BATCH  # and its batch output, sbatch_<name>_<job>.out
BATCH_FOLDERS_KEPT = 8
# folder -> (its mtime, job id -> the batch output names of that job): a folder is listed once,
# not once per failed log (a folder of 20,000 logs was listed 20,000 times: quadratic)
_batch_folders: OrderedDict[str, tuple[int, dict[str, list[str]]]] = OrderedDict()


def _batch_names(folder: str, job: str) -> list[str]:
    """The batch outputs of a job in folder, in name order (OSError when it cannot be listed)."""
    mtime = os.stat(folder).st_mtime_ns
    kept = _batch_folders.get(folder)
    if kept is None or kept[0] != mtime:
        jobs: dict[str, list[str]] = {}
        with os.scandir(folder) as entries:
            for entry in entries:
                if entry.name.startswith("sbatch_") and (m := _BATCH.match(entry.name)):
                    jobs.setdefault(m.group(1), []).append(entry.name)
        kept = _batch_folders[folder] = (mtime, jobs)
        while len(_batch_folders) > BATCH_FOLDERS_KEPT:
            _batch_folders.popitem(last=False)
    _batch_folders.move_to_end(folder)
    return sorted(kept[1].get(job, ()))


def batch_jobs(folder: str) -> set[str]:
    """The jobs that left a batch output in folder (none when it cannot be listed)."""
    try:
        _batch_names(folder, "")
    except OSError:
        return set()
    return set(_batch_folders[folder][1])


def add_batch_output(path: str, scan: timing.LogScan) -> bool:
    """Add to a failed run's findings what its job's batch output says (sbatch_<name>_<job>.out
    next to the log): srun and slurmstepd write their own lines there, not into the tasks'
    log (`srun: error: node7: tasks 0-7: Exited with exit code 1`, `srun: error: Node failure
    on node7`), and those lines name the suspect nodes. True when anything was added."""
    found = _JOB_LOG.search(os.path.basename(path))
    if found is None:
        return False
    folder = os.path.dirname(path) or "."
    try:
        batches = [timing.scan_log(os.path.join(folder, n))
                   for n in _batch_names(folder, found.group(1))]
    except OSError:
        return False
    added = False
    for batch in batches:
        for findings in (batch.before_restart, batch.findings):
            if findings:
                scan.findings.merge(findings)
                added = True
    return added
