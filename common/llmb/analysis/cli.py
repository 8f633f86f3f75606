"""Analyze benchmark logs: `python -m llmb.analysis.cli [options] [DIR ...]` (see USAGE).

Walks each DIR for `*.out` logs (llmb.analysis.discover), skips Slurm batch output and
NCCL-trace runs (without reading them), and has each log read, identified and turned into a
result (llmb.analysis.perlog: llmb.analysis.timing, failures, identify, crosscheck, result), on
every core for a large tree (llmb.analysis.parallel); puts the results together in bounded
memory (llmb.analysis.assemble), groups repeats and judges each configuration against its
published reference (llmb.analysis.verdicts), compares with a baseline tree
(llmb.analysis.compare), prints a table, CSV or JSON (llmb.analysis.formats, streamed) and writes
the HTML/markdown report with plots (llmb.analysis.htmlreport, which alone imports matplotlib).

One bad log never stops the analysis: a log that cannot be read or analyzed is a Failed result
whose reason says why. Start-up stays small: the catalog (pyyaml) is imported only when there
is a log to identify, matplotlib only for --report.
"""

from __future__ import annotations

import functools
import importlib.util
import math
import os
import re
import sys
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llmb.analysis.identify import DEFAULT_GPU, Manifests, display, nccl_traced
from llmb.shared import front
from llmb.shared.errors import LlmbError, UsageError
from llmb.shared.files import path_problem
from llmb.shared.values import BadValue, require_printable, shown

if TYPE_CHECKING:
    from llmb.analysis.perlog import Task

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
    m = re.fullmatch(r"\s*([0-9]{1,9})\s*-\s*([0-9]{1,9})\s*", value)
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
    front.bare_dashes(argv)
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
        opts.gpu_type = value  # as given, until _validate has checked it
    elif name == "--tolerance":
        opts.tolerance = parse_tolerance(value)
    elif name == "--window":
        opts.window = parse_window(value)
    elif name == "--report":
        opts.report = _path_option(name, value)
    else:
        opts.baseline = _path_option(name, value)


# --- analyzing a tree -----------------------------------------------------------------------

def _tasks(roots: list[str], base: str, skips: deque[tuple[str, str]]) -> Iterator[Task]:
    """A Task for each log to read; what is skipped without reading goes to skips (this runs
    in the pool's feeding thread: a deque is safe to share)."""
    from llmb.analysis import discover
    from llmb.analysis.perlog import Task

    manifests = Manifests()
    traced_roots = {r for r in roots if NCCL_TAG in os.path.basename(os.path.abspath(r))}
    task = functools.partial(tuple.__new__, Task)  # (Task's, made in C: one per log)
    place: tuple[str, str] | None = None  # the folder (and DIR) of the logs that come now
    manifest, traced = None, False  # its manifest, and whether it says NCCL trace
    for root, path, problem in discover.walk(roots):
        if problem is not None:
            skips.append((path, problem))
            continue
        folder, _, name = path.rpartition(os.sep)
        if name.startswith("sbatch_"):
            skips.append((path, "sbatch output"))
            continue
        if (folder, root) != place:  # worked out once per folder: its logs come together
            place, manifest = (folder, root), manifests.near(path)
            traced = bool(manifest and nccl_traced(manifest[1])) or root in traced_roots
        if traced or (NCCL_TAG in path and NCCL_TAG in discover.relative(path, base)):
            skips.append((path, "NCCL trace"))
            continue
        yield task((root, path, manifest))


def analyze_tree(roots: str | list[str], gpu_type: str | None = None,
                 window: tuple[int, int] = DEFAULT_WINDOW, tolerance: float = DEFAULT_TOLERANCE
                 ) -> tuple[dict[str, Any], Any]:
    """Analyze every log under the roots: (the analysis, its Assembly, to close when done).
    Results stay on disk past a few thousand logs (llmb.analysis.assemble). Raises
    FileNotFoundError/LookupError for exit-1 cases."""
    from llmb.analysis import discover, parallel
    from llmb.analysis.assemble import Assembly
    from llmb.analysis.perlog import LogAnalyzer

    roots = [roots] if isinstance(roots, str) else list(roots)
    discover.check_roots(roots)
    assembly = Assembly(roots, gpu_type, window, tolerance)
    try:
        skips: deque[tuple[str, str]] = deque()
        analyzer = LogAnalyzer(assembly.base, gpu_type, window)
        for outcome in parallel.outcomes(analyzer, _tasks(roots, assembly.base, skips)):
            while skips:
                assembly.skip(*skips.popleft())
            assembly.add(outcome)
        while skips:
            assembly.skip(*skips.popleft())
        if not len(assembly.results) and not len(assembly.skipped):
            raise LookupError(f"no .out log files under {', '.join(display(r) for r in roots)}")
        return assembly.finish(), assembly
    except BaseException:
        assembly.close()
        raise


def analyze(roots: str | list[str], gpu_type: str | None = None,
            window: tuple[int, int] = DEFAULT_WINDOW,
            tolerance: float = DEFAULT_TOLERANCE) -> dict[str, Any]:
    """The whole analysis as plain lists (a small tree: tests, a baseline)."""
    from llmb.analysis.assemble import materialize

    analysis, assembly = analyze_tree(roots, gpu_type, window, tolerance)
    try:
        return materialize(analysis)
    finally:
        assembly.close()


def with_baseline(result: dict[str, Any], baseline_dir: str, gpu_type: str | None,
                  window: tuple[int, int], tolerance: float) -> None:
    from llmb.analysis import compare

    try:
        before, assembly = analyze_tree(baseline_dir, gpu_type, window, tolerance)
    except (FileNotFoundError, LookupError) as exc:
        raise LookupError(f"--baseline={display(baseline_dir)}: {exc}") from None
    assembly.close()  # its configurations are all a comparison needs
    compared = compare.compare(result["configurations"], before["configurations"])
    result["comparison"] = compared
    result["analysis"]["baseline"] = {
        "directory": before["analysis"]["directory"],
        "configurations": len(before["configurations"]),
        "significant": sum(c["significant"] for c in compared),
        **compare.unmatched(result["configurations"], before["configurations"], compared),
    }


# --- the command ------------------------------------------------------------------------------

class NoRunError(LlmbError):
    """No run succeeded, a DIR is missing or holds no log, or the report cannot be written:
    exit 1 (the output, when there is one, was printed first)."""

    status = EXIT_NONE


class CheckFailed(LlmbError):
    """--check found a configuration below its reference or without a successful run, or an
    Invalid run: exit 3."""

    status = EXIT_CHECK


def _validate(opts: Options) -> None:
    """Checks that need the environment, before any work; UsageError or NoRunError."""
    if opts.gpu_type is not None:
        given, opts.gpu_type = opts.gpu_type, opts.gpu_type.strip().lower()
        try:
            from llmb.recipes import catalog, catalogcache
            catalogcache.prime()  # gpus.yaml as an earlier run loaded it, when unchanged
            known: list[str] | None = list(catalog.gpu_types())
        except ModuleNotFoundError:
            known = None  # reported later, with the fix
        if known is not None and opts.gpu_type not in known:
            raise UsageError(f"--gpu-type={shown(given)} is not allowed; allowed: "
                             f"{', '.join(known)}")
    if opts.baseline is not None and not os.path.isdir(opts.baseline):
        what = "is not a directory" if os.path.exists(opts.baseline) else "does not exist"
        raise UsageError(f"--baseline={shown(opts.baseline)} {what}; give an earlier run tree, "
                         "e.g. --baseline=old/experiments")
    if opts.report is not None:
        check_report_dir(opts.report)
        if importlib.util.find_spec("matplotlib") is None:
            raise NoRunError(f"--report needs matplotlib, which {sys.executable} cannot import; "
                             "activate the workload venv or run: "
                             f"{sys.executable} -m pip install matplotlib")


def run(argv: list[str]) -> int:
    """The analyzer's work: its exit status, or an LlmbError that carries it."""
    opts = parse_args(argv)
    if opts.help:
        sys.stdout.write(USAGE)
        return EXIT_OK
    _validate(opts)
    assembly = None
    try:
        result, assembly = analyze_tree(opts.directories, opts.gpu_type, opts.window,
                                        opts.tolerance)
        if opts.baseline is not None:
            with_baseline(result, opts.baseline, opts.gpu_type, opts.window, opts.tolerance)
        return _output(opts, result)
    except (FileNotFoundError, LookupError) as exc:
        raise NoRunError(str(exc)) from None
    except ModuleNotFoundError as exc:
        if exc.name != "yaml":
            raise
        raise NoRunError(f"{sys.executable} cannot import yaml (pyyaml); activate the workload "
                         "venv (source $LLMB_INSTALL/venvs/<workload>/bin/activate), set "
                         f"LLMB_PYTHON to a python that has it, or run: {sys.executable} -m pip "
                         "install pyyaml") from None
    finally:
        if assembly is not None:
            assembly.close()


def _output(opts: Options, result: dict[str, Any]) -> int:
    """Print the analysis, write the report; the exit status (an error for 1 and 3)."""
    from llmb.analysis import formats, verdicts

    if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(errors="backslashreplace")
    formats.write(result, opts.format, sys.stdout, opts.full_names)
    sys.stdout.flush()
    if opts.report is not None:
        from llmb.analysis import htmlreport

        try:
            index = htmlreport.write(result, opts.report)
        except OSError as exc:
            raise NoRunError(f"--report={shown(opts.report)}: cannot write: "
                             f"{exc.strerror or exc}") from None
        print(f"{PROG}: report written to {shown(display(index))}", file=sys.stderr)
    summary = result["summary"]
    where = ", ".join(display(d) for d in opts.directories)
    if opts.check:
        problems = verdicts.check_problems(result["results"], result["configurations"],
                                           opts.tolerance, opts.window)
        if problems:
            raise CheckFailed("check failed: " + "; ".join(problems))
    if summary["success"] == 0:
        if summary["logs"] == 0:
            raise NoRunError(f"no training log under {where} ({summary['skipped']} .out file(s) "
                             "skipped)")
        raise NoRunError(f"no successful run among {summary['logs']} log(s) under {where}")
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    return front.run(PROG, lambda: run(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    front.leave(main())
