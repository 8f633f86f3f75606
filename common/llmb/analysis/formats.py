"""Render an analysis as an aligned table, CSV or JSON.

An analysis is a plain mapping {"analysis": {...}, "results": [...], "configurations": [...],
"comparison": [...] or null, "skipped": [...], "warnings": [...], "summary": {...}} built by
llmb.analysis.cli; every result carries every field in RESULT_FIELDS (null where unknown). JSON and
CSV are written with the json and csv modules, so any file name (spaces, quotes, newlines,
non-ASCII, undecodable bytes) stays valid; a CSV text cell that a spreadsheet would read as a
formula (= + - @, a tab or a carriage return first) is prefixed with a single quote, and its
control characters but a newline and a tab are escaped (`\x1b`: a terminal acts on none). The
table
adds, after the per-run sections, one line per configuration with its verdict, the runs that
failed or need a look with their reason, the comparison with a baseline, and the summary.
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, TextIO

from llmb.analysis.record import AnalyzedRun, Comparison, Configuration
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
    out = io.StringIO()
    write(analysis, fmt, out, full_names)
    return out.getvalue()


def write(analysis: Mapping[str, Any], fmt: str, out: TextIO, full_names: bool = False) -> None:
    """Write the analysis in fmt to out, one result at a time (results may be a Spill)."""
    if fmt == "json":
        write_json(analysis, out)
    elif fmt == "csv":
        write_csv(analysis["results"], out)
    else:
        write_table(analysis, out, full_names)


# --- JSON and CSV -------------------------------------------------------------------------

def _dumps(value: object, level: int) -> str:
    """json.dumps(value, indent=2) as it reads `level` levels deep inside the document.
    ensure_ascii: valid in any locale; allow_nan=False: a NaN would not be JSON."""
    text = json.dumps(value, indent=2, ensure_ascii=True, allow_nan=False)
    return text.replace("\n", "\n" + "  " * level) if level else text


# json.dumps(text, ensure_ascii=True) for a str, without its Python layers (a call per file)
_string = json.encoder.encode_basestring_ascii


def _json_list(out: TextIO, items: Iterable[object], level: int, one_line: bool = False
               ) -> None:
    """A list written item by item, as json.dumps(indent=2) writes it, or with each item on
    one line (json's C encoder: fast)."""
    pad = "  " * (level + 1)
    texts = (_string(item) if isinstance(item, str)
             else json.dumps(item, ensure_ascii=True, allow_nan=False) if one_line
             else _dumps(item, level + 1) for item in items)
    if _joined(out, texts, pad):
        out.write("\n" + "  " * level + "]")


def _lines_list(out: TextIO, lines: Iterable[str]) -> None:
    """_json_list(one_line=True) of items already written as JSON lines."""
    if _joined(out, lines, "    "):
        out.write("\n  ]")


WRITTEN_TOGETHER = 256  # items a write call takes (one call per item is a tenth of the time)


def _joined(out: TextIO, texts: Iterable[str], pad: str) -> bool:
    """`[`, then the texts one a line after pad, comma-separated; `[]` and False for none."""
    texts = iter(texts)
    sep, opened = ",\n" + pad, "[\n" + pad
    while batch := list(itertools.islice(texts, WRITTEN_TOGETHER)):
        out.write(opened + sep.join(batch))
        opened = sep
    if opened[0] == "[":
        out.write("[]")
        return False
    return True


def write_json(analysis: Mapping[str, Any], out: TextIO) -> None:
    """The analysis as json.dumps(analysis, indent=2) would write it, except that each result
    and skipped file is one line (json indents in Python, ~20x slower than its one-line C
    encoder: 200,000 results would take half a minute); streamed: results and skipped files one
    by one, each configuration's files from the results."""
    for n, (key, value) in enumerate(analysis.items()):
        out.write(("{" if n == 0 else ",") + "\n  " + json.dumps(key) + ": ")
        if key == "results" and hasattr(value, "lines"):  # kept as JSON lines: written as such
            _lines_list(out, (line for line, _, _ in value.lines()))
        elif key in ("results", "skipped"):
            _json_list(out, value, 1, one_line=True)
        elif key == "configurations":
            _json_configs(out, value, analysis.get("results") or [])
        else:
            out.write(_dumps(value, 1))
    out.write("\n}\n" if analysis else "{}\n")


def _json_configs(out: TextIO, configs: Sequence[Configuration],
                  results: Iterable[AnalyzedRun]) -> None:
    """Configurations; one without `files` gets them from the results, in which the runs of a
    configuration follow each other in configuration order."""
    if not configs:
        out.write("[]")
        return
    lines = getattr(results, "lines", None)  # kept as JSON lines: their keys and names as kept
    runs = (((k, f) for _, k, f in lines()) if lines is not None
            else ((r["config_key"], r["filename"]) for r in results))
    pending = next(runs, None)

    def files(key: str) -> Iterator[str]:
        nonlocal pending
        while pending is not None and pending[0] != key:
            pending = next(runs, None)  # (a materialized analysis's own order)
        while pending is not None and pending[0] == key:
            yield pending[1]
            pending = next(runs, None)

    for n, config in enumerate(configs):
        out.write((",\n" if n else "[\n") + "    ")
        if "files" in config:
            out.write(_dumps(config, 2))
            continue
        head = _dumps(dict(config), 2)
        out.write(head[: head.rindex("\n")] + ',\n      "files": ')
        _json_list(out, files(str(config["config_key"])), 3)
        out.write("\n    }")
    out.write("\n  ]")


def to_json(analysis: Mapping[str, Any]) -> str:
    out = io.StringIO()
    write_json(analysis, out)
    return out.getvalue()


def write_csv(results: Iterable[AnalyzedRun], out: TextIO) -> None:
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(RESULT_FIELDS)
    for r in results:
        fields: Mapping[str, object] = r
        writer.writerow([_cell(fields.get(k)) for k in RESULT_FIELDS])


def to_csv(results: Iterable[AnalyzedRun]) -> str:
    out = io.StringIO()
    write_csv(results, out)
    return out.getvalue()


# A text cell that begins with one of these opens as a formula in a spreadsheet (an
# experiment directory named =HYPERLINK(...)): OWASP's CSV injection guidance is to prefix such a
# cell with a single quote, which spreadsheets read as "text".
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
# C0 controls but a newline and a tab, DEL and C1 controls: what a terminal acts on
_CSV_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _cell(value: object) -> object:
    """A CSV cell: a formula quoted, a text's control characters escaped (an ESC byte in a
    file name must not reach a terminal that shows the file)."""
    if value is None:
        return ""
    if isinstance(value, list):
        value = " ".join(map(str, value))
    if isinstance(value, str):
        if value.startswith(FORMULA_START):
            value = "'" + value
        return escaped(value)
    return value


def escaped(text: str) -> str:
    """Text with its control characters escaped (ESC as `\\x1b`; a newline or a tab stays,
    inside the cell's quotes) and nothing cut: what any CSV llmb writes holds."""
    return _CSV_CONTROL.sub(
        lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


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


def _job_tag(result: AnalyzedRun | Configuration) -> str:
    """The job id (and restart) from a nemo-run log name, else the run directory's stamp."""
    filename = str(result.get("filename") or "")
    if m := re.search(r"_(\d+)(?:_(\d+))?\.out$", filename):
        return "#" + m.group(1) + (f".{m.group(2)}" if m.group(2) not in (None, "0") else "")
    parts = re.split(r"[\\/]", filename)
    for part in reversed(parts[:-1]):
        if m := re.search(r"_(\d{6,})$", part):
            return "@" + m.group(1)
    return ""


def short_name(result: AnalyzedRun | Configuration) -> str:
    """recipe, size, dtype and GPUs (with the GPU type unless it is the default): `llama3.1 8b
    fp8 16gpu`, `nemotron 340b bf16 256gb200`; else the experiment name, cut in the middle."""
    if result.get("recipe") and result.get("model_size") and result.get("num_gpus"):
        gpu = result.get("gpu_type") or DEFAULT_GPU
        return (f"{result['recipe']} {result['model_size']} {result.get('dtype') or '?'} "
                f"{result['num_gpus']}{'gpu' if gpu == DEFAULT_GPU else gpu}")
    name = str(result.get("experiment") or result.get("filename") or "?")
    return _middle_cut(printable(name.removeprefix("pretrain_")), SHORT_NAME_MAX)


def _distinctions(result: AnalyzedRun) -> list[str]:
    """What may tell two runs with the same short name apart, most telling first."""
    experiment = str(result.get("experiment") or "")
    tags = " ".join(t for t in ("nsys", "profile") if f"_{t}" in experiment)
    scaling = "strong" if result.get("scaling") == "strong" else ""
    return [scaling, tags, _job_tag(result)]


def _unique(names: list[str], extras: list[list[str]]) -> list[str]:
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


def display_names(results: Sequence[AnalyzedRun], full_names: bool) -> list[str]:
    """Row labels: full relative paths, or short names that add a distinguishing part (strong
    scaling, nsys, job id, then a counter) only where two rows would otherwise read the same."""
    if full_names:
        return [printable(str(r["filename"])) for r in results]
    return _unique([short_name(r) for r in results], [_distinctions(r) for r in results])


def labels(results: Iterable[AnalyzedRun], full_names: bool) -> Iterator[str]:
    """display_names, one at a time: runs that share a short name follow each other in the
    analysis's order, so each such stretch is told apart on its own (only its labels held)."""
    if full_names:
        yield from (printable(str(r["filename"])) for r in results)
        return
    names: list[str] = []
    extras: list[list[str]] = []
    for r in results:
        name = short_name(r)
        if names and name != names[-1]:
            yield from _unique(names, extras)
            names, extras = [], []
        names.append(name)
        extras.append(_distinctions(r))
    yield from _unique(names, extras)


def _head(headings: Sequence[tuple[str, int]], label_width: int,
          label: str = "Experiment") -> list[str]:
    head = label.ljust(label_width) + "".join(
        " " + (h.ljust(w) if i == 0 else h.rjust(w))
        for i, (h, w) in enumerate(headings))
    return [head, "-" * label_width + "".join(" " + "-" * w for _, w in headings)]


def _row(headings: Sequence[tuple[str, int]], label_width: int, label: str,
         cells: Sequence[str]) -> str:
    line = label.ljust(label_width)
    for i, ((_, w), cell) in enumerate(zip(headings, cells, strict=True)):
        line += " " + (cell.ljust(w) if i == 0 else cell.rjust(w))
    return line.rstrip()


def _rows_text(headings: Sequence[tuple[str, int]], label_width: int,
               rows: Sequence[Sequence[str]], label: str = "Experiment") -> list[str]:
    return [*_head(headings, label_width, label),
            *(_row(headings, label_width, row[0], row[1:]) for row in rows)]


def _derived(r: AnalyzedRun) -> bool:
    return r.get("tokens_per_second") is not None or r.get("reference_step_time") is not None


def _main_cells(r: AnalyzedRun) -> list[str]:
    mark = "*" if r.get("tflops_source") == "computed" else ""
    return [str(r["status"]), _fixed(r["time_mean"], 3), _fixed(r["time_std_dev"], 3),
            _fixed(r["tflops_per_gpu_mean"], 2, mark),
            _fixed(r["tflops_per_gpu_std_dev"], 2, mark)]


def _derived_cells(r: AnalyzedRun) -> list[str]:
    return [str(r.get("scaling") or "-"), _fixed(r["tokens_per_second"], 0),
            _fixed(None if r["mfu"] is None else r["mfu"] * 100, 2),
            _fixed(r["time_to_train_days"], 2), _fixed(r["reference_step_time"], 3),
            _fixed(r["pct_of_reference"], 1)]


def to_table(analysis: Mapping[str, Any], full_names: bool = False) -> str:
    out = io.StringIO()
    write_table(analysis, out, full_names)
    return out.getvalue()


def write_table(analysis: Mapping[str, Any], out: TextIO, full_names: bool = False) -> None:
    """The table, a section at a time: each section is one pass over the results (which may
    be a Spill), so only the labels of one configuration's runs are ever held."""
    results = analysis["results"]

    def rows() -> Iterator[tuple[str, AnalyzedRun]]:
        return zip(labels(results, full_names), results, strict=True)

    width = dwidth = len("Experiment")
    computed = any_derived = noted = errors = False
    for name, r in rows():
        width = max(width, len(name))
        if _derived(r):
            dwidth, any_derived = max(dwidth, len(name)), True
        computed = computed or r.get("tflops_source") == "computed"
        noted = noted or bool(r.get("reason") and not r.get("error"))
        errors = errors or bool(r.get("error"))
    window = analysis["analysis"]["window"]
    title = TITLE.format(first=window["first_iteration"], last=window["last_iteration"])
    head = _head(MAIN_COLUMNS, width)
    out.write("\n".join([title, "=" * max(len(title), len(head[0])), *head]) + "\n")
    for name, r in rows():
        out.write(_row(MAIN_COLUMNS, width, name, _main_cells(r)) + "\n")
    if computed:
        out.write("* computed from the model FLOPs (not in the log, or the log's figure is "
                  "wrong for this model)\n")
    if any_derived:
        out.write("\n".join(["", DERIVED_TITLE, *_head(DERIVED_COLUMNS, dwidth)]) + "\n")
        for name, r in rows():
            if _derived(r):
                out.write(_row(DERIVED_COLUMNS, dwidth, name, _derived_cells(r)) + "\n")
    configs = analysis.get("configurations") or []
    if configs:
        tolerance = analysis["analysis"].get("tolerance_pct", 5.0)
        out.write("\n".join(["", CONFIG_TITLE.format(pct=f"{100 - tolerance:g}"),
                             *config_rows(configs)]) + "\n")
    if noted:
        out.write("\n" + REASONS_TITLE + "\n")
        for name, r in rows():
            if (reason := r.get("reason")) and not r.get("error"):
                nodes = r.get("suspect_nodes") or []
                suffix = f" [suspect nodes: {', '.join(map(printable, nodes))}]" if nodes else ""
                out.write(f"{name}: {r['status']}: {printable(reason)}{suffix}\n")
    _table_tail(analysis, out, errors)


def _table_tail(analysis: Mapping[str, Any], out: TextIO, errors: bool) -> None:
    """The comparison, unreadable files, warnings and the summary line."""
    lines = []
    if analysis.get("comparison") is not None:
        base = analysis["analysis"].get("baseline", {})
        lines += ["", COMPARE_TITLE.format(dir=printable(str(base.get("directory", "?"))))]
        lines += comparison_rows(analysis["comparison"], base)
    out.write("".join(line + "\n" for line in lines))
    if errors:
        out.write("\n")
        for r in analysis["results"]:
            if r.get("error"):
                out.write(f"unreadable: {printable(str(r['filename']))}: "
                          f"{printable(r['error'])}\n")
    warnings = analysis.get("warnings") or []
    if warnings:
        out.write("\n" + "".join(f"warning: {printable(w['path'])}: {printable(w['warning'])}\n"
                                 for w in warnings))
    out.write("\n" + summary_line(analysis["summary"]) + "\n")


def config_label(config: Configuration) -> str:
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


def config_rows(configs: Sequence[Configuration]) -> list[str]:
    labels = [config_label(c) for c in configs]
    width = max([len("Configuration"), *map(len, labels)])
    rows = []
    for label, c in zip(labels, configs, strict=True):
        span, median, low, high = None, c["time_median"], c.get("time_min"), c.get("time_max")
        if median and low is not None and high is not None:  # (a median has its min and max)
            span = (high - low) / median * 100
        rows.append([label, f"{c['successful_runs']}/{c['runs']}", _fixed(c["time_median"], 3),
                     _fixed(span, 1), _fixed(c["reference_step_time"], 3),
                     _fixed(c["pct_of_reference"], 1), str(c["verdict"])])
    return _rows_text(CONFIG_COLUMNS, width, rows, "Configuration")


def comparison_rows(compared: Sequence[Comparison], base: Mapping[str, object]) -> list[str]:
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
