"""Render an analysis as an aligned table, CSV or JSON.

An analysis is a plain mapping {"analysis": {...}, "results": [...], "configurations": [...],
"comparison": [...] or null, "skipped": [...], "warnings": [...], "summary": {...}} built by
llmb.analysis.cli; every result carries every field in RESULT_FIELDS (null where unknown). JSON and
CSV are written with the json and csv modules, so any file name (spaces, quotes, newlines,
non-ASCII, undecodable bytes) stays valid. The table adds, after the per-run sections, one
line per configuration with its verdict, the runs that failed or need a look with their
reason, the comparison with a baseline, and the summary.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from llmb.shared.values import shown

# The established columns of the seeds' CSV, then the additions.
ESTABLISHED_FIELDS = (
    "filename", "status", "time_mean", "time_std_dev", "tflops_per_gpu_mean",
    "tflops_per_gpu_std_dev", "max_iteration",
)
RESULT_FIELDS = (
    *ESTABLISHED_FIELDS,
    "experiment", "path", "final_iteration", "window_steps", "tflops_source", "identified_by",
    "recipe", "model_size", "dtype", "gpu_type", "num_gpus", "global_batch_size", "seq_length",
    "scaling", "tokens_per_second", "mfu", "time_to_train_days", "reference_step_time",
    "reference_source", "pct_of_reference", "checkpoint_save_s", "checkpoint_load_s",
    "smoke_test", "error", "reason", "suspect_nodes", "config_key",
)
FORMATS = ("table", "csv", "json")

TITLE = "Train Step Timing and TFLOPS Analysis (iterations {first}-{last})"
# Heading and width of each column of the main table; widths are the seeds'.
MAIN_COLUMNS = (
    ("Status", 7), ("Time Mean (s)", 13), ("Time Std (s)", 12), ("TFLOPS_per_GPU Mean", 19),
    ("TFLOPS_per_GPU Std", 18),
)
DERIVED_TITLE = "Throughput, MFU and published reference"
DERIVED_COLUMNS = (
    ("Scaling", 7), ("Tokens/s", 10), ("MFU %", 6), ("Days/1T tok", 11), ("Ref (s)", 8),
    ("% of ref", 8),
)
CONFIG_TITLE = "Configurations (repeats grouped; pass at >= {pct}% of the reference)"
CONFIG_COLUMNS = (
    ("Runs", 5), ("Median (s)", 10), ("Range %", 7), ("Ref (s)", 8), ("% of ref", 8),
    ("Verdict", 17),
)
REASONS_TITLE = "Runs that failed or need a look"
COMPARE_TITLE = "Compared with the baseline {dir} (delta: + is slower)"
COMPARE_COLUMNS = (
    ("Base (s)", 9), ("Now (s)", 9), ("Delta %", 7), ("Spread %", 8), ("Significant", 11),
)
SHORT_NAME_MAX = 30
DEFAULT_GPU = "h100"


def render(analysis: Mapping[str, Any], fmt: str, full_names: bool = False) -> str:
    if fmt == "json":
        return to_json(analysis)
    if fmt == "csv":
        return to_csv(analysis["results"])
    return to_table(analysis, full_names)


# --- JSON and CSV -------------------------------------------------------------------------

def to_json(analysis: Mapping[str, Any]) -> str:
    # ensure_ascii: valid in any locale; allow_nan=False: a NaN would not be JSON.
    return json.dumps(analysis, indent=2, ensure_ascii=True, allow_nan=False) + "\n"


def to_csv(results: Sequence[Mapping[str, Any]]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(RESULT_FIELDS)
    for r in results:
        writer.writerow([_cell(r.get(k)) for k in RESULT_FIELDS])
    return out.getvalue()


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    return " ".join(map(str, value)) if isinstance(value, list) else value


# --- table --------------------------------------------------------------------------------

def printable(text: str) -> str:
    """Control characters shown escaped (a newline in a file name must not break a row)."""
    return shown(text)


def _fixed(value: float | None, places: int, marker: str = "") -> str:
    return "-" if value is None else f"{value:.{places}f}{marker}"


def _middle_cut(text: str, width: int) -> str:
    if len(text) <= width:
        return text
    keep = width - 3
    return text[: keep - keep // 2] + "..." + text[len(text) - keep // 2:]


def _job_tag(result: Mapping[str, Any]) -> str:
    """The job id (and restart) from a nemo-run log name, else the run directory's stamp."""
    filename = str(result.get("filename") or "")
    if m := re.search(r"_(\d+)(?:_(\d+))?\.out$", filename):
        return "#" + m.group(1) + (f".{m.group(2)}" if m.group(2) not in (None, "0") else "")
    parts = re.split(r"[\\/]", filename)
    for part in reversed(parts[:-1]):
        if m := re.search(r"_(\d{6,})$", part):
            return "@" + m.group(1)
    return ""


def short_name(result: Mapping[str, Any]) -> str:
    """recipe, size, dtype and GPUs (with the GPU type unless it is the default): `llama3.1 8b
    fp8 16gpu`, `nemotron 340b bf16 256gb200`; else the experiment name, cut in the middle."""
    if result.get("recipe") and result.get("model_size") and result.get("num_gpus"):
        gpu = result.get("gpu_type") or DEFAULT_GPU
        return (f"{result['recipe']} {result['model_size']} {result.get('dtype') or '?'} "
                f"{result['num_gpus']}{'gpu' if gpu == DEFAULT_GPU else gpu}")
    name = str(result.get("experiment") or result.get("filename") or "?")
    return _middle_cut(printable(name.removeprefix("pretrain_")), SHORT_NAME_MAX)


def _distinctions(result: Mapping[str, Any]) -> list[str]:
    """What may tell two runs with the same short name apart, most telling first."""
    experiment = str(result.get("experiment") or "")
    tags = " ".join(t for t in ("nsys", "profile") if f"_{t}" in experiment)
    scaling = "strong" if result.get("scaling") == "strong" else ""
    return [scaling, tags, _job_tag(result)]


def display_names(results: Sequence[Mapping[str, Any]], full_names: bool) -> list[str]:
    """Row labels: full relative paths, or short names that add a distinguishing part (strong
    scaling, nsys, job id, then a counter) only where two rows would otherwise read the same."""
    if full_names:
        return [printable(str(r["filename"])) for r in results]
    names = [short_name(r) for r in results]
    extras = [_distinctions(r) for r in results]
    for level in range(3):
        counts = Counter(names)
        names = [f"{n} {extra[level]}".rstrip() if counts[n] > 1 else n
                 for n, extra in zip(names, extras, strict=True)]
    seen: Counter[str] = Counter()
    unique = []
    for n in names:
        seen[n] += 1
        unique.append(n if seen[n] == 1 else f"{n} ({seen[n]})")
    return unique


def _rows_text(headings: Sequence[tuple[str, int]], label_width: int,
               rows: Sequence[Sequence[str]], label: str = "Experiment") -> list[str]:
    head = label.ljust(label_width) + "".join(
        " " + (h.ljust(w) if i == 0 else h.rjust(w))
        for i, (h, w) in enumerate(headings))
    rule = "-" * label_width + "".join(" " + "-" * w for _, w in headings)
    lines = [head, rule]
    for label, *cells in rows:
        line = label.ljust(label_width)
        for i, ((_, w), cell) in enumerate(zip(headings, cells, strict=True)):
            line += " " + (cell.ljust(w) if i == 0 else cell.rjust(w))
        lines.append(line.rstrip())
    return lines


def to_table(analysis: Mapping[str, Any], full_names: bool = False) -> str:
    results = analysis["results"]
    window = analysis["analysis"]["window"]
    names = display_names(results, full_names)
    label_width = max([len("Experiment"), *map(len, names)])
    computed = False
    main_rows = []
    for name, r in zip(names, results, strict=True):
        mark = ""
        if r.get("tflops_source") == "computed":
            mark, computed = "*", True
        main_rows.append([
            name, str(r["status"]), _fixed(r["time_mean"], 3), _fixed(r["time_std_dev"], 3),
            _fixed(r["tflops_per_gpu_mean"], 2, mark), _fixed(r["tflops_per_gpu_std_dev"], 2, mark),
        ])
    main = _rows_text(MAIN_COLUMNS, label_width, main_rows)
    title = TITLE.format(first=window["first_iteration"], last=window["last_iteration"])
    lines = [title, "=" * max(len(title), len(main[0])), *main]
    if computed:
        lines.append("* computed from the model FLOPs (not in the log, or the log's figure is "
                     "wrong for this model)")

    derived = [
        (name, r) for name, r in zip(names, results, strict=True)
        if r.get("tokens_per_second") is not None or r.get("reference_step_time") is not None
    ]
    if derived:
        dwidth = max([len("Experiment"), *(len(n) for n, _ in derived)])
        rows = [[
            name, str(r.get("scaling") or "-"), _fixed(r["tokens_per_second"], 0),
            _fixed(None if r["mfu"] is None else r["mfu"] * 100, 2),
            _fixed(r["time_to_train_days"], 2), _fixed(r["reference_step_time"], 3),
            _fixed(r["pct_of_reference"], 1),
        ] for name, r in derived]
        lines += ["", DERIVED_TITLE, *_rows_text(DERIVED_COLUMNS, dwidth, rows)]

    configs = analysis.get("configurations") or []
    if configs:
        tolerance = analysis["analysis"].get("tolerance_pct", 5.0)
        lines += ["", CONFIG_TITLE.format(pct=f"{100 - tolerance:g}"),
                  *config_rows(configs)]
    noted = [(n, r) for n, r in zip(names, results, strict=True)
             if r.get("reason") and not r.get("error")]
    if noted:
        lines += ["", REASONS_TITLE]
        for name, r in noted:
            nodes = r.get("suspect_nodes") or []
            suffix = f" [suspect nodes: {', '.join(map(printable, nodes))}]" if nodes else ""
            lines.append(f"{name}: {r['status']}: {printable(r['reason'])}{suffix}")
    if analysis.get("comparison") is not None:
        base = analysis["analysis"].get("baseline", {})
        lines += ["", COMPARE_TITLE.format(dir=printable(str(base.get("directory", "?"))))]
        lines += comparison_rows(analysis["comparison"], base)
    errors = [(n, r) for n, r in zip(names, results, strict=True) if r.get("error")]
    if errors:
        lines.append("")
        lines += [f"unreadable: {printable(str(r['filename']))}: {printable(r['error'])}"
                  for _, r in errors]
    warnings = analysis.get("warnings") or []
    if warnings:
        lines.append("")
        lines += [f"warning: {printable(w['path'])}: {printable(w['warning'])}" for w in warnings]
    lines += ["", summary_line(analysis["summary"])]
    return "\n".join(lines) + "\n"


def config_label(config: Mapping[str, Any]) -> str:
    """The short name of a configuration: `llama3.1 8b fp8 16gpu` (+ strong, smoke, GBS)."""
    label = short_name(config)
    if config.get("recipe"):
        if config.get("scaling") == "strong":
            label += " strong"
        elif config.get("scaling") is None and config.get("global_batch_size"):
            label += f" gbs{config['global_batch_size']}"
        if config.get("smoke_test"):
            label += " smoke"
    return label


def config_rows(configs: Sequence[Mapping[str, Any]]) -> list[str]:
    labels = [config_label(c) for c in configs]
    width = max([len("Configuration"), *map(len, labels)])
    rows = []
    for label, c in zip(labels, configs, strict=True):
        span = None
        if c["time_median"]:
            span = (c["time_max"] - c["time_min"]) / c["time_median"] * 100
        rows.append([label, f"{c['successful_runs']}/{c['runs']}", _fixed(c["time_median"], 3),
                     _fixed(span, 1), _fixed(c["reference_step_time"], 3),
                     _fixed(c["pct_of_reference"], 1), str(c["verdict"])])
    return _rows_text(CONFIG_COLUMNS, width, rows, "Configuration")


def comparison_rows(compared: Sequence[Mapping[str, Any]], base: Mapping[str, Any]
                    ) -> list[str]:
    lines: list[str] = []
    if compared:
        labels = [config_label(c) for c in compared]
        width = max([len("Configuration"), *map(len, labels)])
        rows = [[label, _fixed(c["baseline_time_median"], 3), _fixed(c["time_median"], 3),
                 f"{c['delta_pct']:+.1f}", _fixed(c["spread_pct"], 1),
                 "yes" if c["significant"] else "no"]
                for label, c in zip(labels, compared, strict=True)]
        lines += _rows_text(COMPARE_COLUMNS, width, rows, "Configuration")
    else:
        lines.append("no configuration has a figure in both trees")
    if base.get("only_current") or base.get("only_baseline"):
        lines.append(f"({base.get('only_current', 0)} configuration(s) only here, "
                     f"{base.get('only_baseline', 0)} only in the baseline)")
    return lines


def summary_line(summary: Mapping[str, Any]) -> str:
    text = (f"Summary: {summary['logs']} log(s): {summary['success']} Success, "
            f"{summary['failed']} Failed")
    if summary.get("invalid"):
        text += f", {summary['invalid']} Invalid"
    if summary.get("unreadable"):
        text += f" ({summary['unreadable']} unreadable)"
    skipped = summary.get("skipped_by_reason") or {}
    if skipped:
        text += "; skipped " + ", ".join(f"{n} {reason}" for reason, n in skipped.items())
    verdicts = {v: n for v, n in (summary.get("verdicts") or {}).items() if n}
    if verdicts:
        text += "; configurations: " + ", ".join(f"{n} {v}" for v, n in verdicts.items())
    return text
