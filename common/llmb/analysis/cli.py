"""Analyze benchmark logs: `python -m llmb.analysis.cli [options] [DIR ...]` (see USAGE).

Walks each DIR for `*.out` logs, skips Slurm batch output and NCCL-trace runs (without reading
them), scans each log (llmb.analysis.timing, llmb.analysis.failures), identifies the run
(llmb.analysis.identify), turns it into a result with a status and a reason (llmb.analysis.result),
groups repeats and judges each configuration against its published reference
(llmb.analysis.verdicts), compares with a baseline tree (llmb.analysis.compare), prints a table, CSV
or JSON (llmb.analysis.formats) and writes the HTML/markdown report with plots
(llmb.analysis.htmlreport, which alone imports matplotlib).

One bad log never stops the analysis: a log that cannot be read or analyzed is a Failed result
whose reason says why. Start-up stays small: the catalog (pyyaml) is imported only when there
is a log to identify, matplotlib only for --report.
"""

from __future__ import annotations

import contextlib
import importlib.util
import math
import os
import re
import stat
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llmb.analysis.identify import DEFAULT_GPU, Identifier, Manifests, display, nccl_traced
from llmb.shared.errors import UsageError
from llmb.shared.files import path_problem, walk
from llmb.shared.values import BadValue, require_printable, shown

PROG = os.environ.get("LLMB_ANALYZE_PROG", "parse_train_timing.sh")
FORMATS = ("table", "csv", "json")
DEFAULT_DIR = "experiments"
DEFAULT_WINDOW = (11, 44)
DEFAULT_TOLERANCE = 5.0
NCCL_TAG = "_nccltrace"
EXIT_OK, EXIT_NONE, EXIT_USAGE, EXIT_CHECK, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
VALUE_OPTIONS = ("--format", "--gpu-type", "--tolerance", "--window", "--report", "--baseline")
ALLOWED = ("--format=table|csv|json, --full-names, --gpu-type=TYPE, --tolerance=PCT, --check, "
           "--window=A-B, --report=DIR, --baseline=DIR, --help")

USAGE = f"""\
usage: {PROG} [--format=table|csv|json] [--full-names] [--gpu-type=TYPE]
       [--tolerance=PCT] [--check] [--window=A-B] [--report=DIR] [--baseline=DIR] [DIR ...]

Analyze the training logs (*.out) under each DIR (default: ./{DEFAULT_DIR}; a run directory,
an experiments directory, or a whole install: $LLMB_INSTALL/workloads/*/experiments or
$LLMB_INSTALL/workloads): per run, step time and TFLOPS_per_GPU mean and population standard
deviation over the window, status (Success, Failed, Invalid) with the reason, tokens/s, MFU,
days to train 1T tokens, the published reference step time and the percentage achieved; per
configuration (repeats grouped), the median, spread and a verdict against the reference.

options:
  --format=FORMAT   table (default), csv or json
  --full-names      label table rows with the log's path relative to DIR
  --gpu-type=TYPE   GPU type of runs identified by experiment name (default {DEFAULT_GPU};
                    a run manifest's own GPU type always wins)
  --tolerance=PCT   a configuration passes at >= 100-PCT % of the reference (default
                    {DEFAULT_TOLERANCE:g}); verdicts: pass, below, no_reference, no_successful_run
  --check           exit 3 when a configuration is below or has no successful run, or a run
                    is Invalid (for scripts and CI)
  --window=A-B      iterations (0-based, inclusive) the statistics cover (default
                    {DEFAULT_WINDOW[0]}-{DEFAULT_WINDOW[1]}, the published window)
  --report=DIR      also write DIR/index.html (self-contained, plots embedded), DIR/report.md
                    and the plots (DIR/plots/*.png); needs matplotlib
  --baseline=DIR    compare each configuration with the same one in an earlier run tree
  -h, --help        show this help and exit

Skipped as runs: sbatch_*.out (a failed run's reason and suspect nodes also take what srun
wrote into its job's sbatch output) and NCCL-trace runs (_nccltrace, or manifest).
Exit status: 0 when at least one run succeeded; 1 when none did, a DIR does not exist or holds
no log, or the report cannot be written; 2 for a bad option; 3 when --check fails;
130 when interrupted.
"""


@dataclass
class Options:
    format: str = "table"
    full_names: bool = False
    gpu_type: str | None = None
    tolerance: float = DEFAULT_TOLERANCE
    check: bool = False
    window: tuple[int, int] = DEFAULT_WINDOW
    report: str | None = None
    baseline: str | None = None
    directories: list[str] = field(default_factory=lambda: [DEFAULT_DIR])
    help: bool = False


def _bad(name: str, value: str, allowed: str) -> UsageError:
    return UsageError(f"{name}={shown(value)} is not allowed; {allowed}")


def parse_tolerance(value: str) -> float:
    text = value.strip().removesuffix("%").strip()
    try:
        pct = float(text) if re.fullmatch(r"[0-9]*\.?[0-9]+", text) else math.nan
    except ValueError:
        pct = math.nan
    if not 0 <= pct < 100:
        raise _bad("--tolerance", value, "give a percentage from 0 up to (not including) 100, "
                   "e.g. --tolerance=5")
    return pct


def parse_window(value: str) -> tuple[int, int]:
    m = re.fullmatch(r"\s*(\d{1,9})\s*-\s*(\d{1,9})\s*", value)
    if not m or int(m.group(1)) > int(m.group(2)):
        raise _bad("--window", value, "give FIRST-LAST iterations (0-based, inclusive, FIRST <= "
                   "LAST), e.g. --window=11-44 or --window=35-44")
    return int(m.group(1)), int(m.group(2))


def _path_option(name: str, value: str) -> str:
    if not value.strip():
        raise UsageError(f"{name} needs a directory; e.g. {name}=/path/to/dir")
    try:
        require_printable(name, value)
    except BadValue as exc:
        raise UsageError(str(exc)) from None
    return value


def check_report_dir(value: str) -> None:
    """The report directory can be created or written; nothing is created here."""
    path = Path(os.path.abspath(value))
    problem = path_problem(path)  # never raises: a name too long, no permission to look, ...
    if problem == "is a file, not a directory":
        raise _bad("--report", value, "it exists and is not a directory")
    if problem not in (None, "does not exist"):
        raise _bad("--report", value, f"it {problem}")
    probe = path
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        raise _bad("--report", value, f"{display(str(probe))} is not a directory")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise _bad("--report", value, f"{display(str(probe))} is not writable")


def parse_args(argv: list[str]) -> Options:
    """Hand-written so every mistake is one line naming the option and what is allowed."""
    opts = Options()
    positional: list[str] = []
    args = list(argv)
    while args:
        arg = args.pop(0)
        if arg == "--":
            positional.extend(args)
            break
        if arg in ("-h", "--help"):
            opts.help = True
            return opts
        name, eq, value = arg.partition("=")
        if name in VALUE_OPTIONS:
            if not eq:
                if not args or args[0].startswith("-"):
                    raise UsageError(f"{name} needs a value; e.g. {name}={_EXAMPLES[name]}")
                value = args.pop(0)
            _set_value(opts, name, value)
        elif name in ("--full-names", "--check"):
            if eq:
                raise UsageError(f"{name} takes no value (got {name}={shown(value)}); "
                                 f"write {name} alone")
            setattr(opts, name[2:].replace("-", "_"), True)
        elif arg.startswith("-") and arg != "-":
            raise UsageError(f"unknown option {shown(name)}; allowed: {ALLOWED}")
        else:
            positional.append(arg)
    if positional:
        opts.directories = positional
    return opts


_EXAMPLES = {"--format": "json", "--gpu-type": DEFAULT_GPU, "--tolerance": "5",
             "--window": "11-44", "--report": "report", "--baseline": "old/experiments"}


def _set_value(opts: Options, name: str, value: str) -> None:
    if name == "--format":
        fmt = value.strip().lower()
        if fmt not in FORMATS:
            raise _bad("--format", value, f"allowed: {', '.join(FORMATS)}")
        opts.format = fmt
    elif name == "--gpu-type":
        opts.gpu_type = value.strip().lower()
    elif name == "--tolerance":
        opts.tolerance = parse_tolerance(value)
    elif name == "--window":
        opts.window = parse_window(value)
    elif name == "--report":
        opts.report = _path_option(name, value)
    else:
        opts.baseline = _path_option(name, value)


# --- finding logs ---------------------------------------------------------------------------

def discover(root: str, seen: set[tuple[int, int]] | None = None
             ) -> tuple[list[str], list[dict[str, str]]]:
    """Every *.out under root (following directory links once), and what could not be walked."""
    files: list[str] = []
    problems: list[dict[str, str]] = []
    seen = set() if seen is None else seen

    def walk_error(exc: OSError) -> None:
        problems.append({"path": display(str(exc.filename)),
                         "reason": f"cannot list: {exc.strerror}"})

    # files.walk: no recursion (a deep tree), no link into /proc, /sys or /dev
    for dirpath, dirnames, filenames in walk(root, onerror=walk_error, followlinks=True):
        try:
            st = os.stat(dirpath)
        except OSError:
            dirnames[:] = []
            continue
        if (st.st_dev, st.st_ino) in seen:  # a directory link back into the tree
            dirnames[:] = []
            continue
        seen.add((st.st_dev, st.st_ino))
        dirnames.sort()
        files.extend(os.path.join(dirpath, f) for f in sorted(filenames) if f.endswith(".out"))
        problems.extend({"path": os.path.join(dirpath, d), "reason": "directory"}
                        for d in dirnames if d.endswith(".out"))
    return files, problems


def _base(roots: list[str]) -> str:
    """What file names are relative to: the one DIR, or the directory all DIRs share."""
    if len(roots) == 1:
        return roots[0]
    return os.path.commonpath([os.path.abspath(r) for r in roots])


def _experiment(rel: str, base: str) -> str:
    """The experiment of an unidentified log: the folder under `experiments` when the path has
    one (an install tree), else the first folder under DIR, else DIR's own name."""
    parts = Path(rel).parts[:-1]
    if "experiments" in parts[:-1]:
        return parts[parts.index("experiments") + 1]
    return parts[0] if parts else Path(os.path.abspath(base)).name


def _order(result: dict[str, Any]) -> tuple[Any, ...]:
    """Runs of one configuration together: recipe, size (as a number), dtype, GPU type, scale;
    runs that could not be identified last; then by path."""
    size = re.match(r"\d+(?:\.\d+)?", str(result["model_size"] or ""))
    return (result["recipe"] is None, result["recipe"] or "", float(size.group()) if size else 0.0,
            result["dtype"] or "", result["gpu_type"] or "", result["num_gpus"] or 0,
            str(result["scaling"] or ""), result["filename"])


def _find_logs(roots: list[str]) -> tuple[list[tuple[str, str]], list[dict[str, str]]]:
    """(root, log path) for every `*.out` under the roots, and what could not be walked."""
    for root in roots:
        if not os.path.isdir(root):
            what = "is not a directory" if os.path.exists(root) else "does not exist"
            raise FileNotFoundError(f"{display(root)} {what}; pass the experiments directory, "
                                    "e.g. $LLMB_WORKLOAD/experiments")
    files: list[tuple[str, str]] = []
    problems: list[dict[str, str]] = []
    seen: set[tuple[int, int]] = set()
    for root in roots:
        found, trouble = discover(root, seen)
        files += [(root, f) for f in found]
        problems += trouble
    if not files and not problems:
        raise LookupError(f"no .out log files under {', '.join(display(r) for r in roots)}")
    return files, problems


class _Run:
    """What analyzing the logs of one tree keeps between logs: the manifests read, the
    identifier (built on the first log that needs it), the warnings given once."""

    def __init__(self, base: str, gpu_type: str | None, window: tuple[int, int]) -> None:
        self.base, self.gpu_type, self.window = base, gpu_type, window
        self.manifests = Manifests()
        self.identifier: Identifier | None = None
        self.warnings: list[dict[str, str]] = []
        self.warned: set[str] = set()

    def log(self, root: str, path: str) -> tuple[dict[str, Any] | None, str | None]:
        """(the log's result, None) or (None, why it is skipped)."""
        from llmb.analysis import result as runs
        from llmb.analysis import timing

        rel = os.path.relpath(path, self.base)
        name = os.path.basename(path)
        if name.startswith("sbatch_"):
            return None, "sbatch output"
        manifest = self.manifests.near(path)
        if nccl_traced(manifest[1] if manifest else None) or NCCL_TAG in rel \
                or NCCL_TAG in os.path.basename(os.path.abspath(root)):
            return None, "NCCL trace"
        try:
            st = os.stat(path)
            if not stat.S_ISREG(st.st_mode):
                raise OSError(0, "not a regular file")
            scan = timing.scan_log(path)
        except OSError as exc:
            reason = exc.strerror or str(exc)
            if os.path.islink(path) and not os.path.exists(path):  # a loop is not dangling
                reason = str(path_problem(path, "file")).removeprefix("is a ")
            return runs.unreadable(rel, path, f"cannot read: {reason}"), None
        if not scan.steps and not scan.reached and not scan.looks_like_log \
                and not name.startswith("log-"):
            return None, "no training output"
        try:
            return self._identified(root, path, rel, scan, manifest), None
        except ModuleNotFoundError:
            raise
        except Exception as exc:  # one bad log must never stop the report
            return runs.unreadable(rel, path, f"cannot analyze: {type(exc).__name__}: "
                                   f"{shown(exc)[:200]}"), None

    def _identified(self, root: str, path: str, rel: str, scan: Any,
                    manifest: tuple[str, dict[str, Any] | str] | None) -> dict[str, Any]:
        from llmb.analysis import result as runs

        if self.identifier is None:
            self.identifier = Identifier(self.gpu_type)
        ident, warning = self.identifier.identify(manifest, rel, root)
        if warning and manifest and manifest[0] not in self.warned:  # once per manifest
            self.warned.add(manifest[0])
            self.warnings.append({"path": display(os.path.relpath(manifest[0], self.base)),
                                  "warning": warning})
        result = runs.analyze_log(path, rel, scan, ident, self.identifier, self.window)
        if result["status"] == "Failed" and runs.add_batch_output(path, scan):
            result = runs.analyze_log(path, rel, scan, ident, self.identifier, self.window)
        return result


def analyze(roots: str | list[str], gpu_type: str | None = None,
            window: tuple[int, int] = DEFAULT_WINDOW,
            tolerance: float = DEFAULT_TOLERANCE) -> dict[str, Any]:
    """Analyze every log under the roots; raises FileNotFoundError/LookupError for exit-1
    cases."""
    from llmb.analysis import verdicts

    roots = [roots] if isinstance(roots, str) else list(roots)
    files, problems = _find_logs(roots)
    base = _base(roots)
    run = _Run(base, gpu_type, window)
    results: list[dict[str, Any]] = []
    skipped = [{"path": display(os.path.relpath(p["path"], base)), "reason": p["reason"]}
               for p in problems]
    for root, path in files:
        result, why = run.log(root, path)
        if result is None:
            skipped.append({"path": display(os.path.relpath(path, base)), "reason": str(why)})
            continue
        if result["experiment"] is None:
            result["experiment"] = display(_experiment(os.path.relpath(path, base), base))
        result["config_key"] = verdicts.config_key(result)
        results.append(result)
    if not results and not skipped:
        raise LookupError(f"no .out log files under {', '.join(display(r) for r in roots)}")
    results.sort(key=_order)
    configs = verdicts.configurations(results, tolerance)
    return {"analysis": _settings(roots, base, gpu_type, window, tolerance, run.identifier),
            "results": results, "configurations": configs, "comparison": None,
            "skipped": skipped, "warnings": run.warnings,
            "summary": _summary(results, configs, skipped)}


def _settings(roots: list[str], base: str, gpu_type: str | None, window: tuple[int, int],
              tolerance: float, identifier: Identifier | None) -> dict[str, Any]:
    """The JSON's `analysis`: what was analyzed, and how."""
    return {
        "directory": display(os.path.abspath(base)),
        "directories": [display(os.path.abspath(r)) for r in roots],
        "window": {"first_iteration": window[0], "last_iteration": window[1]},
        "tolerance_pct": tolerance,
        "std_dev": "population",
        "iterations": "0-based; Success when the last iteration printed is the final one",
        "default_gpu_type": gpu_type or DEFAULT_GPU,
        "time_to_train_tokens": 1e12,
        "catalog_error": identifier.error if identifier else None,
    }


def _summary(results: list[dict[str, Any]], configs: list[dict[str, Any]],
             skipped: list[dict[str, str]]) -> dict[str, Any]:
    from llmb.analysis import verdicts

    status = Counter(r["status"] for r in results)
    reasons = Counter(s["reason"] for s in skipped)
    return {
        "logs": len(results), "success": status["Success"], "failed": status["Failed"],
        "invalid": status["Invalid"], "unreadable": sum(1 for r in results if r["error"]),
        "skipped": len(skipped), "skipped_by_reason": dict(sorted(reasons.items())),
        "configurations": len(configs),
        "verdicts": {v: sum(c["verdict"] == v for c in configs) for v in verdicts.VERDICTS},
    }


def with_baseline(result: dict[str, Any], baseline_dir: str, gpu_type: str | None,
                  window: tuple[int, int], tolerance: float) -> None:
    from llmb.analysis import compare

    try:
        before = analyze(baseline_dir, gpu_type, window, tolerance)
    except (FileNotFoundError, LookupError) as exc:
        raise LookupError(f"--baseline={display(baseline_dir)}: {exc}") from None
    compared = compare.compare(result["configurations"], before["configurations"])
    result["comparison"] = compared
    result["analysis"]["baseline"] = {
        "directory": before["analysis"]["directory"],
        "configurations": len(before["configurations"]),
        "significant": sum(c["significant"] for c in compared),
        **compare.unmatched(result["configurations"], before["configurations"], compared),
    }


# --- the command ------------------------------------------------------------------------------

def _fail(message: str, code: int) -> int:
    """One line on stderr, whatever the names in it hold (a newline in a path is shown as \\n)."""
    print(f"{PROG}: {shown(message)}", file=sys.stderr)
    return code


def _validate(opts: Options) -> int | None:
    """Checks that need the environment; an exit status when one fails, before any work."""
    if opts.gpu_type is not None:
        try:
            from llmb.recipes import catalog
            known: list[str] | None = list(catalog.gpu_types())
        except ModuleNotFoundError:
            known = None  # reported later, with the fix
        if known is not None and opts.gpu_type not in known:
            return _fail(f"--gpu-type={shown(opts.gpu_type)} is not allowed; allowed: "
                         f"{', '.join(known)}", EXIT_USAGE)
    if opts.baseline is not None and not os.path.isdir(opts.baseline):
        what = "is not a directory" if os.path.exists(opts.baseline) else "does not exist"
        return _fail(f"--baseline={shown(opts.baseline)} {what}; give an earlier run tree, "
                     "e.g. --baseline=old/experiments", EXIT_USAGE)
    if opts.report is not None:
        try:
            check_report_dir(opts.report)
        except UsageError as exc:
            return _fail(str(exc), EXIT_USAGE)
        if importlib.util.find_spec("matplotlib") is None:
            return _fail(f"--report needs matplotlib, which {sys.executable} cannot import; "
                         "activate the workload venv or run: "
                         f"{sys.executable} -m pip install matplotlib", EXIT_NONE)
    return None


def run(argv: list[str]) -> int:
    try:
        opts = parse_args(argv)
    except UsageError as exc:
        return _fail(str(exc), EXIT_USAGE)
    if opts.help:
        sys.stdout.write(USAGE)
        return EXIT_OK
    if (code := _validate(opts)) is not None:
        return code
    try:
        result = analyze(opts.directories, opts.gpu_type, opts.window, opts.tolerance)
        if opts.baseline is not None:
            with_baseline(result, opts.baseline, opts.gpu_type, opts.window, opts.tolerance)
    except (FileNotFoundError, LookupError) as exc:
        return _fail(str(exc), EXIT_NONE)
    except ModuleNotFoundError as exc:
        if exc.name != "yaml":
            raise
        return _fail(f"{sys.executable} cannot import yaml (pyyaml); activate the workload venv "
                     "(source $LLMB_INSTALL/venvs/<workload>/bin/activate), set LLMB_PYTHON to a "
                     f"python that has it, or run: {sys.executable} -m pip install pyyaml",
                     EXIT_NONE)
    from llmb.analysis import formats, verdicts

    if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(errors="backslashreplace")
    sys.stdout.write(formats.render(result, opts.format, opts.full_names))
    sys.stdout.flush()
    if opts.report is not None:
        from llmb.analysis import htmlreport

        try:
            index = htmlreport.write(result, opts.report)
        except OSError as exc:
            return _fail(f"--report={shown(opts.report)}: cannot write: "
                         f"{exc.strerror or exc}", EXIT_NONE)
        print(f"{PROG}: report written to {shown(display(index))}", file=sys.stderr)
    summary = result["summary"]
    where = ", ".join(display(d) for d in opts.directories)
    if opts.check:
        problems = verdicts.check_problems(result["results"], result["configurations"],
                                           opts.tolerance)
        if problems:
            return _fail("check failed: " + "; ".join(problems), EXIT_CHECK)
    if summary["success"] == 0:
        if summary["logs"] == 0:
            why = f"no training log under {where} ({summary['skipped']} .out file(s) skipped)"
        else:
            why = f"no successful run among {summary['logs']} log(s) under {where}"
        return _fail(why, EXIT_NONE)
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    try:
        return run(sys.argv[1:] if argv is None else argv)
    except KeyboardInterrupt:
        return _fail("interrupted", EXIT_INTERRUPTED)
    except BrokenPipeError:  # the reader went away (| head): nothing more to say
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    sys.exit(main())
