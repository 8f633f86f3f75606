"""Analyze benchmark logs: `python -m llmb.analyze [--format=...] [--full-names] [DIR]`.

Walks DIR for `*.out` logs, skips Slurm batch output and NCCL-trace runs (without reading
them), scans each log's step lines (llmb.timing), identifies the run (its llmb_manifest.json,
else its experiment name) against the recipe catalog, derives tokens/s, MFU, time to train and
the percentage of the published reference, and prints a table, CSV or JSON (llmb.report).

Exit status: 0 when at least one run succeeded; 1 when none did, DIR does not exist or holds no
`.out` file; 2 for a bad option. Start-up stays small: the catalog (pyyaml) is imported only
when there is a log to identify, and nothing heavier ever.
"""

from __future__ import annotations

import json
import os
import re
import stat
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PROG = os.environ.get("LLMB_ANALYZE_PROG", "parse_train_timing.sh")
FORMATS = ("table", "csv", "json")
DEFAULT_DIR = "experiments"
DEFAULT_GPU = "h100"
MANIFEST = "llmb_manifest.json"
MANIFEST_LEVELS = 3  # the log's directory and up to two parents
NCCL_TAG = "_nccltrace"

USAGE = f"""\
usage: {PROG} [--format=table|csv|json] [--full-names] [--gpu-type=TYPE] [DIR]

Analyze the training logs (*.out) under DIR (default: ./{DEFAULT_DIR}): step time and
TFLOPS_per_GPU mean and population standard deviation over iterations 11-44, Success when a
run reached its final iteration, tokens/s, MFU, days to train 1T tokens, and the published
reference step time with the percentage achieved.

options:
  --format=FORMAT   table (default), csv or json
  --full-names      label table rows with the log's path relative to DIR
  --gpu-type=TYPE   GPU type of runs identified by experiment name (default {DEFAULT_GPU};
                    a run manifest's own GPU type always wins)
  -h, --help        show this help and exit

Skipped without being read: sbatch_*.out and NCCL-trace runs (_nccltrace, or manifest).
Exit status: 0 when at least one run succeeded, 1 when none did or nothing was found,
2 for a bad option.
"""


class UsageError(Exception):
    """A bad command line: one line for stderr, exit status 2."""


@dataclass
class Options:
    format: str = "table"
    full_names: bool = False
    gpu_type: str | None = None
    directory: str = DEFAULT_DIR
    help: bool = False


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
        if name in ("--format", "--gpu-type"):
            if not eq:
                if not args or args[0].startswith("-"):
                    raise UsageError(f"{name} needs a value; e.g. {name}="
                                     f"{'json' if name == '--format' else DEFAULT_GPU}")
                value = args.pop(0)
            value = value.strip().lower()
            if name == "--format":
                if value not in FORMATS:
                    raise UsageError(f"--format={value} is not allowed; allowed: "
                                     f"{', '.join(FORMATS)}")
                opts.format = value
            else:
                opts.gpu_type = value
        elif arg == "--full-names":
            opts.full_names = True
        elif arg.startswith("-") and arg != "-":
            raise UsageError(f"unknown option {name}; allowed: --format=table|csv|json, "
                             "--full-names, --gpu-type=TYPE, --help")
        else:
            positional.append(arg)
    if len(positional) > 1:
        raise UsageError(f"one directory expected, got {len(positional)}: "
                         f"{' '.join(positional)}")
    if positional:
        opts.directory = positional[0]
    return opts


# --- finding logs ---------------------------------------------------------------------------

def discover(root: str) -> tuple[list[str], list[dict[str, str]]]:
    """Every *.out under root (following directory links once), and what could not be walked."""
    files: list[str] = []
    problems: list[dict[str, str]] = []
    seen: set[tuple[int, int]] = set()

    def walk_error(exc: OSError) -> None:
        problems.append({"path": str(exc.filename), "reason": f"cannot list: {exc.strerror}"})

    for dirpath, dirnames, filenames in os.walk(root, onerror=walk_error, followlinks=True):
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


class Manifests:
    """llmb_manifest.json files near the logs, read once per directory."""

    def __init__(self) -> None:
        self._cache: dict[str, dict[str, Any] | None] = {}

    def read(self, directory: str) -> dict[str, Any] | None:
        if directory not in self._cache:
            data = None
            try:
                with open(os.path.join(directory, MANIFEST), "rb") as f:
                    data = json.load(f)
            except (OSError, ValueError):
                data = None
            self._cache[directory] = data if isinstance(data, dict) else None
        return self._cache[directory]

    def near(self, log_path: str) -> dict[str, Any] | None:
        directory = os.path.dirname(os.path.abspath(log_path))
        for _ in range(MANIFEST_LEVELS):
            if (found := self.read(directory)) is not None:
                return found
            parent = os.path.dirname(directory)
            if parent == directory:
                break
            directory = parent
        return None


# --- identifying runs -------------------------------------------------------------------------

_NEW_NAME = re.compile(
    r"(?P<size>\d+(?:\.\d+)?[bm])_(?P<dtype>[a-z0-9]+)_gpus(?P<gpus>\d+)_tp\d+_pp\d+_cp\d+"
    r"_vp(?:\d+|none)_mbs\d+_gbs(?P<gbs>\d+)(?P<tags>(?:_[a-z][a-z0-9]*)*)(?P<suffix>(?:_\d+)*)",
    re.I)
_OLD_NAME = re.compile(
    r"(?P<size>\d+(?:\.\d+)?[bm])_(?P<dtype>[a-z0-9]+)_(?P<gpus>\d+)"
    r"(?P<tags>(?:_[a-z][a-z0-9]*)*)(?P<suffix>(?:_\d+)*)", re.I)


@dataclass(frozen=True)
class NameInfo:
    experiment: str
    workload: str
    model_size: str
    dtype: str
    num_gpus: int
    gbs: int | None
    tags: tuple[str, ...]


def parse_name(name: str, workloads: list[str]) -> NameInfo | None:
    """Both naming styles: <workload>_<size>_<dtype>_gpus<N>_tp.._gbs<G> (new) and
    <workload>_<size>_<dtype>_<N> (old; GBS from the published row at that scale).

    A trailing _<digits> (job id, timestamp, restart) may follow; `pretraining_` is accepted for
    `pretrain_` (seed 000 writes both).
    """
    for workload in sorted(workloads, key=len, reverse=True):
        for prefix in (workload, workload.replace("pretrain_", "pretraining_", 1)):
            if not name.startswith(prefix + "_"):
                continue
            rest = name[len(prefix) + 1:]
            m = _NEW_NAME.fullmatch(rest) or _OLD_NAME.fullmatch(rest)
            if not m:
                continue
            gbs = m.groupdict().get("gbs")
            tags = tuple(t for t in m.group("tags").lower().split("_") if t)
            return NameInfo(
                experiment=name[: len(name) - len(m.group("suffix"))], workload=workload,
                model_size=m.group("size").lower(), dtype=m.group("dtype").lower(),
                num_gpus=int(m.group("gpus")), gbs=int(gbs) if gbs else None, tags=tags)
    return None


def name_candidates(rel: str, root: str) -> list[str]:
    """Where an experiment name may be: the first component under DIR, the log's parent
    directories (nearest first), DIR itself and its parent, then the log's own name."""
    parts = Path(rel).parts
    dirs = list(parts[:-1])
    out = dirs[:1] + dirs[::-1]
    root_abs = Path(os.path.abspath(root))
    out += [root_abs.name, root_abs.parent.name]
    stem = parts[-1].removesuffix(".out")
    out.append(stem.removeprefix("log-"))
    return list(dict.fromkeys(p for p in out if p))


class Identifier:
    """Turns a manifest or an experiment name into the run's catalog identity."""

    def __init__(self, gpu_type: str | None) -> None:
        from llmb import catalog  # pyyaml: only once there is a log to identify

        self.catalog = catalog
        self.gpu_type = gpu_type or DEFAULT_GPU
        try:
            self.recipes = {r.workload: r for r in catalog.all_recipes()}
        except catalog.CatalogError as exc:  # a broken metadata.yaml: analyze, do not identify
            self.recipes = {}
            self.error: str | None = str(exc)
        else:
            self.error = None
        self._by_name = {r.name: r for r in self.recipes.values()}

    def recipe(self, key: object) -> Any:
        return self.recipes.get(str(key)) or self._by_name.get(str(key))

    def from_manifest(self, m: dict[str, Any]) -> dict[str, Any] | None:
        recipe = self.recipe(m.get("workload")) or self.recipe(m.get("recipe"))
        par = m.get("parallelism") if isinstance(m.get("parallelism"), dict) else {}
        opts = m.get("options") if isinstance(m.get("options"), dict) else {}
        try:
            ident = {
                "recipe": recipe, "experiment": m.get("experiment"),
                "model_size": str(m["model_size"]), "dtype": str(m["dtype"]),
                "gpu_type": str(m.get("gpu_type") or self.gpu_type),
                "num_gpus": int(m["num_gpus"]), "gbs": int(par["gbs"]),
                "scaling": m.get("scaling"), "num_layers": par.get("num_layers"),
                "seq_length": int(m.get("seq_length") or recipe.seq_length),
                "by": "manifest",
                "final_index": int(opts["max_steps"]) - 1 if opts.get("max_steps") else None,
                # A smoke test trains a tiny stand-in model: nothing about the real model's
                # FLOPs, MFU or reference applies to its step times.
                "smoke": opts.get("smoke_test") is True,
            }
        except (KeyError, TypeError, ValueError, AttributeError):
            return None
        if recipe is None:
            return None
        ident["reference"] = None if ident["smoke"] else self._reference(recipe, ident)
        return ident

    def from_name(self, info: NameInfo) -> dict[str, Any]:
        recipe = self.recipes[info.workload]
        gpu = self.gpu_type
        weak = self._resolve(recipe, info, gpu, "weak", unpublished=True)
        gbs = info.gbs if info.gbs is not None else (weak.gbs if weak else None)
        scaling = None
        if weak is not None and gbs is not None:
            scaling = "weak" if gbs == weak.gbs else "strong"
        elif (strong := self._resolve(recipe, info, gpu, "strong", unpublished=True)) is not None:
            scaling = "strong" if strong.gbs == gbs else None
        layout = self._resolve(recipe, info, gpu, scaling or "weak", unpublished=True)
        ident = {
            "recipe": recipe, "experiment": info.experiment, "model_size": info.model_size,
            "dtype": info.dtype, "gpu_type": gpu, "num_gpus": info.num_gpus, "gbs": gbs,
            "scaling": scaling, "num_layers": layout.num_layers if layout else None,
            "seq_length": recipe.seq_length, "by": "name", "final_index": None, "smoke": False,
        }
        ident["reference"] = self._reference(recipe, ident)
        return ident

    def _resolve(self, recipe: Any, info: NameInfo, gpu: str, scaling: str,
                 unpublished: bool) -> Any:
        try:
            return recipe.resolve(info.model_size, info.dtype, gpu, info.num_gpus, scaling,
                                  allow_unpublished=unpublished)
        except self.catalog.CatalogError:
            return None

    def _reference(self, recipe: Any, ident: dict[str, Any]) -> Any:
        """The published step time, only when this run is the published row (same GBS)."""
        if ident["scaling"] not in ("weak", "strong"):
            return None
        try:
            cfg = recipe.resolve(ident["model_size"], ident["dtype"], ident["gpu_type"],
                                 ident["num_gpus"], ident["scaling"])
        except self.catalog.CatalogError:
            return None
        if cfg.gbs != ident["gbs"]:
            return None
        return recipe.reference(ident["model_size"], ident["dtype"], ident["gpu_type"],
                                ident["num_gpus"], ident["scaling"])

    def model_flops(self, ident: dict[str, Any]) -> float | None:
        recipe = ident["recipe"]
        if ident["model_size"] not in recipe.sizes:
            return None
        return recipe.model_flops(ident["model_size"], ident["num_layers"])

    def peak_tflops(self, ident: dict[str, Any]) -> float | None:
        try:
            peak = self.catalog.get_gpu_type(ident["gpu_type"]).peak_tflops
        except self.catalog.CatalogError:
            return None
        value = peak.get(ident["dtype"])
        return float(value) if value else None


# --- one log ----------------------------------------------------------------------------------

def display(path: str) -> str:
    """A path as text that any encoder accepts (undecodable bytes become U+FFFD)."""
    return path.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def empty_result(rel: str, path: str) -> dict[str, Any]:
    from llmb.report import RESULT_FIELDS

    result: dict[str, Any] = dict.fromkeys(RESULT_FIELDS)
    result.update(filename=display(rel), path=display(os.path.abspath(path)), status="Failed")
    return result


def _round(value: float | None, places: int) -> float | None:
    """Rounded to `places` decimals, but never below 9 significant digits (0.0004402 stays)."""
    if value is None:
        return None
    return round(value, places) if abs(value) >= 10 ** (9 - places) else float(f"{value:.9g}")


def analyze_log(path: str, rel: str, scan: Any, ident: dict[str, Any] | None,
                identifier: Identifier | None) -> dict[str, Any]:
    from llmb import perf, timing

    result = empty_result(rel, path)
    idx = timing.window_values(scan.steps)
    times = timing.stats(scan.steps[i].time for i in idx)
    final_hint = ident["final_index"] if ident else None
    result.update(
        status="Success" if scan.complete(final_hint) else "Failed",
        max_iteration=scan.max_iteration,
        final_iteration=scan.final_index if scan.final_index is not None else final_hint,
        window_steps=times.count, time_mean=_round(times.mean, 6),
        time_std_dev=_round(times.std_dev, 6),
        checkpoint_save_s=scan.checkpoint_save_s, checkpoint_load_s=scan.checkpoint_load_s,
    )
    flops = peak = None
    if ident is not None and identifier is not None:
        recipe = ident["recipe"]
        result["smoke_test"] = ident["smoke"]
        if not ident["smoke"]:
            flops = identifier.model_flops(ident)
            peak = identifier.peak_tflops(ident)
        ref = ident["reference"]
        result.update(
            experiment=ident["experiment"], identified_by=ident["by"], recipe=recipe.name,
            model_size=ident["model_size"], dtype=ident["dtype"], gpu_type=ident["gpu_type"],
            num_gpus=ident["num_gpus"], global_batch_size=ident["gbs"],
            seq_length=ident["seq_length"], scaling=ident["scaling"],
            reference_step_time=ref.step_time if ref else None,
            reference_source=f"seed {ref.source}" if ref else None,
        )

    log_tflops = [scan.steps[i].tflops for i in idx]
    gbs, gpus = (ident["gbs"], ident["num_gpus"]) if ident else (None, None)
    can_compute = bool(idx) and flops is not None and gbs and gpus
    unreliable = (ident is not None and not ident["smoke"]
                  and not ident["recipe"].logged_tflops)
    if can_compute and (unreliable or None in log_tflops):
        tflops = timing.stats(perf.tflops_per_gpu(gbs, flops, scan.steps[i].time, gpus)
                              for i in idx)
        result["tflops_source"] = "computed"
    else:
        tflops = timing.stats(t for t in log_tflops if t is not None)
        result["tflops_source"] = "log" if tflops.count else None
    result.update(tflops_per_gpu_mean=_round(tflops.mean, 4),
                  tflops_per_gpu_std_dev=_round(tflops.std_dev, 4))

    mean = times.mean
    if ident is not None and mean and gbs and not ident["smoke"]:
        tokens = perf.tokens_per_second(ident["seq_length"], gbs, mean)
        result.update(tokens_per_second=round(tokens, 1),
                      time_to_train_days=round(perf.days_to_train(tokens), 4))
        if flops is not None and peak and gpus:
            result["mfu"] = round(perf.mfu(gbs, flops, mean, gpus, peak), 6)
        if result["reference_step_time"] is not None:
            result["pct_of_reference"] = round(result["reference_step_time"] / mean * 100, 3)
    return result


# --- the whole directory ----------------------------------------------------------------------

def _order(result: dict[str, Any]) -> tuple[Any, ...]:
    """Runs of one configuration together: recipe, size (as a number), dtype, GPU type, scale;
    runs that could not be identified last; then by path."""
    size = re.match(r"\d+(?:\.\d+)?", str(result["model_size"] or ""))
    return (result["recipe"] is None, result["recipe"] or "", float(size.group()) if size else 0.0,
            result["dtype"] or "", result["gpu_type"] or "", result["num_gpus"] or 0,
            result["filename"])


def analyze(root: str, gpu_type: str | None = None) -> dict[str, Any]:
    """Analyze every log under root; raises FileNotFoundError/LookupError for exit-1 cases."""
    from llmb import timing

    if not os.path.isdir(root):
        what = "is not a directory" if os.path.exists(root) else "does not exist"
        raise FileNotFoundError(f"{display(root)} {what}; pass the experiments directory, "
                                "e.g. $LLMB_WORKLOAD/experiments")
    files, problems = discover(root)
    if not files and not problems:
        raise LookupError(f"no .out log files under {display(root)}")
    manifests = Manifests()
    identifier: Identifier | None = None
    results: list[dict[str, Any]] = []
    skipped = [{"path": display(os.path.relpath(p["path"], root)), "reason": p["reason"]}
               for p in problems]
    for path in files:
        rel = os.path.relpath(path, root)
        name = os.path.basename(path)
        if name.startswith("sbatch_"):
            skipped.append({"path": display(rel), "reason": "sbatch output"})
            continue
        manifest = manifests.near(path)
        options = (manifest or {}).get("options")
        traced = isinstance(options, dict) and options.get("nccl_trace") is True
        if traced or NCCL_TAG in rel or NCCL_TAG in os.path.basename(os.path.abspath(root)):
            skipped.append({"path": display(rel), "reason": "NCCL trace"})
            continue
        try:
            st = os.stat(path)
            if not stat.S_ISREG(st.st_mode):
                raise OSError(0, "not a regular file")
            scan = timing.scan_log(path)
        except OSError as exc:
            result = empty_result(rel, path)
            reason = exc.strerror or str(exc)
            if os.path.islink(path) and not os.path.exists(path):  # a loop is not dangling
                from llmb.files import path_problem
                reason = str(path_problem(path, "file")).removeprefix("is a ")
            result["error"] = f"cannot read: {reason}"
            results.append(result)
            continue
        if not scan.steps and not scan.looks_like_log and not name.startswith("log-"):
            skipped.append({"path": display(rel), "reason": "no training output"})
            continue
        if identifier is None:
            identifier = Identifier(gpu_type)
        ident = identifier.from_manifest(manifest) if manifest else None
        if ident is None and identifier.recipes:
            for candidate in name_candidates(rel, root):
                info = parse_name(candidate, list(identifier.recipes))
                if info is not None:
                    ident = identifier.from_name(info)
                    break
        result = analyze_log(path, rel, scan, ident, identifier)
        if result["experiment"] is None:
            parts = Path(rel).parts
            result["experiment"] = display(parts[0] if len(parts) > 1 else
                                           Path(os.path.abspath(root)).name)
        results.append(result)
    if not results and not skipped:
        raise LookupError(f"no .out log files under {display(root)}")

    results.sort(key=_order)
    status = Counter(r["status"] for r in results)
    reasons = Counter(s["reason"] for s in skipped)
    analysis = {
        "directory": display(os.path.abspath(root)),
        "window": {"first_iteration": timing.WINDOW[0], "last_iteration": timing.WINDOW[1]},
        "std_dev": "population",
        "iterations": "0-based; Success when the last iteration printed is the final one",
        "default_gpu_type": gpu_type or DEFAULT_GPU,
        "time_to_train_tokens": 1e12,
        "catalog_error": identifier.error if identifier else None,
    }
    summary = {
        "logs": len(results), "success": status["Success"], "failed": status["Failed"],
        "unreadable": sum(1 for r in results if r["error"]),
        "skipped": len(skipped), "skipped_by_reason": dict(sorted(reasons.items())),
    }
    return {"analysis": analysis, "results": results, "skipped": skipped, "summary": summary}


def main(argv: list[str] | None = None) -> int:
    try:
        opts = parse_args(sys.argv[1:] if argv is None else argv)
    except UsageError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    if opts.help:
        sys.stdout.write(USAGE)
        return 0
    if opts.gpu_type is not None:
        try:
            from llmb import catalog
        except ModuleNotFoundError:
            catalog = None  # reported below, with the fix
        if catalog is not None and opts.gpu_type not in catalog.gpu_types():
            print(f"{PROG}: --gpu-type={opts.gpu_type} is not allowed; allowed: "
                  f"{', '.join(catalog.gpu_types())}", file=sys.stderr)
            return 2
    try:
        result = analyze(opts.directory, opts.gpu_type)
    except (FileNotFoundError, LookupError) as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 1
    except ModuleNotFoundError as exc:
        if exc.name != "yaml":
            raise
        print(f"{PROG}: {sys.executable} cannot import yaml (pyyaml); activate the workload venv "
              "(source $LLMB_INSTALL/venvs/<workload>/bin/activate), set LLMB_PYTHON to a python "
              f"that has it, or run: {sys.executable} -m pip install pyyaml", file=sys.stderr)
        return 1
    from llmb import report

    if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(errors="backslashreplace")
    sys.stdout.write(report.render(result, opts.format, opts.full_names))
    sys.stdout.flush()
    summary = result["summary"]
    if summary["success"] == 0:
        if summary["logs"] == 0:
            why = (f"no training log under {display(opts.directory)} "
                   f"({summary['skipped']} .out file(s) skipped)")
        else:
            why = (f"no successful run among {summary['logs']} log(s) under "
                   f"{display(opts.directory)}")
        print(f"{PROG}: {why}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
