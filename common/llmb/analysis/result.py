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
from typing import Any

from llmb import manifest
from llmb.analysis import failures, timing
from llmb.analysis.formats import RESULT_FIELDS
from llmb.analysis.identify import display
from llmb.recipes import perf


def empty_result(rel: str, path: str) -> dict[str, Any]:
    result: dict[str, Any] = dict.fromkeys(RESULT_FIELDS)
    result.update(filename=display(rel), path=display(os.path.abspath(path)), status="Failed",
                  suspect_nodes=[])
    return result


def unreadable(rel: str, path: str, error: str) -> dict[str, Any]:
    """The result of a log that could not be read or analyzed: Failed, the error its reason."""
    result = empty_result(rel, path)
    result.update(error=error, reason=error)
    return result


def finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _round(value: float | None, places: int) -> float | None:
    """Rounded to `places` decimals, but never below 9 significant digits (0.0004402 stays);
    None for None and for anything not finite."""
    value = finite(value)
    if value is None:
        return None
    return round(value, places) if abs(value) >= 10 ** (9 - places) else float(f"{value:.9g}")


def analyze_log(path: str, rel: str, scan: timing.LogScan, ident: dict[str, Any] | None,
                identifier: Any, window: tuple[int, int] = timing.WINDOW) -> dict[str, Any]:
    result = empty_result(rel, path)
    idx = timing.window_values(scan.steps, window)
    times = timing.stats(scan.steps[i].time for i in idx)
    final_hint = ident["final_index"] if ident else None
    final = scan.final_index if scan.final_index is not None else final_hint
    complete = scan.complete(final_hint)
    result.update(
        max_iteration=scan.max_iteration, final_iteration=final,
        window_steps=times.count, time_mean=_round(times.mean, 6),
        time_std_dev=_round(times.std_dev, 6),
        checkpoint_save_s=_round(scan.checkpoint_save_s, 3),
        checkpoint_load_s=_round(scan.checkpoint_load_s, 3),
    )
    flops = peak = None
    if ident is not None and identifier is not None:
        result["smoke_test"] = ident["smoke"]
        if not ident["smoke"]:
            flops = identifier.model_flops(ident)
            peak = identifier.peak_tflops(ident)
        ref = ident["reference"]
        result.update(
            experiment=ident["experiment"], identified_by=ident["by"],
            recipe=ident["recipe"].name, model_size=ident["model_size"], dtype=ident["dtype"],
            gpu_type=ident["gpu_type"], num_gpus=ident["num_gpus"],
            global_batch_size=ident["gbs"], seq_length=ident["seq_length"],
            scaling=ident["scaling"], reference_step_time=ref.step_time if ref else None,
            reference_source=ref.describe() if ref else None,
        )

    log_tflops = [scan.steps[i].tflops for i in idx]
    gbs, gpus = (ident["gbs"], ident["num_gpus"]) if ident else (None, None)
    unreliable = (ident is not None and not ident["smoke"]
                  and not ident["recipe"].logged_tflops)
    if idx and flops is not None and gbs and gpus and (unreliable or None in log_tflops):
        tflops = timing.stats(perf.tflops_per_gpu(gbs, flops, scan.steps[i].time, gpus)
                              for i in idx)
        result["tflops_source"] = "computed"
    else:
        tflops = timing.stats(t for t in log_tflops if t is not None)
        result["tflops_source"] = "log" if tflops.count else None
    result.update(tflops_per_gpu_mean=_round(tflops.mean, 4),
                  tflops_per_gpu_std_dev=_round(tflops.std_dev, 4))

    mean = times.mean
    mfu = None
    if ident is not None and mean and gbs and not ident["smoke"]:
        tokens = finite(perf.tokens_per_second(ident["seq_length"], gbs, mean))
        result["tokens_per_second"] = _round(tokens, 1)
        if tokens:
            result["time_to_train_days"] = _round(perf.days_to_train(tokens), 4)
        if flops is not None and peak and gpus:
            mfu = perf.mfu(gbs, flops, mean, gpus, peak)
            result["mfu"] = _round(mfu, 6)
        if result["reference_step_time"] is not None:
            result["pct_of_reference"] = _round(result["reference_step_time"] / mean * 100, 3)

    invalid = _invalid(scan, ident, identifier, mfu, peak)
    explained = failures.explain(scan.findings, complete=complete, last=scan.max_iteration,
                                 final=final, steps=len(scan.steps))
    primary = scan.findings.primary()
    nan_grads = primary is not None and primary[0] == "nan"  # explained says it
    notes = [*invalid, explained or "", _restarts(scan)]
    if complete and not invalid and times.count == 0:
        notes.append(f"no step inside the window {window[0]}-{window[1]}: no figure to judge")
    result["status"] = ("Invalid" if invalid or nan_grads else
                        "Success" if complete else "Failed")
    result["reason"] = "; ".join(n for n in notes if n) or None
    result["suspect_nodes"] = sorted(set(scan.findings.suspects())
                                     | set(scan.before_restart.suspects()))
    return result


def _invalid(scan: timing.LogScan, ident: dict[str, Any] | None, identifier: Any,
             mfu: float | None, peak: float | None) -> list[str]:
    """Why the run's numbers cannot be trusted (empty when they can)."""
    out = []
    if scan.nonfinite is not None:
        iteration, name, value = scan.nonfinite
        out.append(f"{name} is {value} at iteration {iteration}")
    if scan.first_bad_time is not None:
        iteration, value = scan.first_bad_time
        out.append(f"{scan.bad_times} step time(s) are not a plausible number of seconds "
                   f"(first: {value} at iteration {iteration}; allowed: "
                   f"{timing.MIN_STEP_SECONDS:g} s to {timing.MAX_STEP_SECONDS / 86400:g} days); "
                   "they are not counted")
    if mfu is not None and ident is not None and peak and mfu > 1:
        out.append(_impossible_mfu(ident, identifier, mfu, peak))
    return out


def _impossible_mfu(ident: dict[str, Any], identifier: Any, mfu: float, peak: float) -> str:
    """MFU above 100%: a GPU type under which it would fit says wrong GPU type, else the log
    does not belong to this configuration."""
    gpu, dtype = ident["gpu_type"], ident["dtype"]
    shown_pct = f"{mfu * 100:.0f}%" if mfu < 1e4 else "far"
    text = f"MFU {shown_pct} is above 100% of the {gpu} {dtype} peak ({peak:g} TFLOPS)"
    fits = []
    for other in identifier.catalog.gpu_types():
        other_peak = identifier.peak_tflops(ident, other)
        if other != gpu and other_peak and mfu * peak / other_peak <= 1:
            fits.append((other, mfu * peak / other_peak))
    if fits:
        other, fit = fits[0]
        how = (f"pass --gpu-type={other}" if ident["by"] == "name"
               else f"its {manifest.NAME} says {gpu}")
        return f"{text}: wrong GPU type? on {other} it would be {fit * 100:.0f}% ({how})"
    return (f"{text} and of every GPU's: the log is not this configuration's (wrong log, or "
            f"wrong {'manifest' if ident['by'] == 'manifest' else 'experiment name'})")


def _restarts(scan: timing.LogScan) -> str:
    if not scan.restart_count:
        return ""
    reached, to = scan.restarts[0]
    times = "" if scan.restart_count == 1 else f" ({scan.restart_count} times)"
    text = f"training started over at iteration {to} after reaching {reached}{times}"
    if scan.before_restart:
        text += f", after {scan.before_restart.summary()}"
    return text


_JOB_LOG = re.compile(r"_(\d+)_\d+\.out$")  # nemo-run's log-<name>_<job>_<n>.out


def add_batch_output(path: str, scan: timing.LogScan) -> bool:
    """Add to a failed run's findings what its job's batch output says (sbatch_<name>_<job>.out
    next to the log): srun and slurmstepd write their own lines there, not into the tasks'
    log (`srun: error: node7: tasks 0-7: Exited with exit code 1`, `srun: error: Node failure
    on node7`), and those lines name the suspect nodes. True when anything was added."""
    found = _JOB_LOG.search(os.path.basename(path))
    if found is None:
        return False
    folder = os.path.dirname(path) or "."
    suffix = f"_{found.group(1)}.out"
    try:
        names = [n for n in os.listdir(folder) if n.startswith("sbatch_") and n.endswith(suffix)]
        batches = [timing.scan_log(os.path.join(folder, n)) for n in sorted(names)]
    except OSError:
        return False
    added = False
    for batch in batches:
        for findings in (batch.before_restart, batch.findings):
            if findings:
                scan.findings.merge(findings)
                added = True
    return added
