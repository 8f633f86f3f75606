"""llmb-run: one command per benchmark run, sweeps, and what became of them.

    llmb-run list
    llmb-run single -w pretrain_<recipe> -s <size> --dtype <dtype> --scale <N> [-p] [--dry-run]
    llmb-run bulk <file.yaml> [--dry-run]
    llmb-run status [--all] [--format=table|json]

Reads cluster_config.yaml (written by the installer) from the current directory or
$LLMB_INSTALL, validates every requested run against the recipe's metadata.yaml before anything
is submitted, runs the recipe's launch.sh in that workload's venv, and appends every submission
to $LLMB_INSTALL/llmb_run_history.jsonl (llmb.history). Scale rules (SPEC §7): above the largest
published scale is a warning (the run is unvalidated and launch.sh is told so through
LLMB_ALLOW_UNVALIDATED_SCALE=true); below the smallest, or between published scales, an error.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llmb import catalog, redact, slurm
from llmb.history import FILE_NAME as HISTORY_FILE
from llmb.history import History

PROG = "llmb-run"
CONFIG_FILE = "cluster_config.yaml"
TASK_KEYS = {"workload", "size", "sizes", "dtype", "dtypes", "scale", "scales", "repeats",
             "profile", "env"}
SUBMIT_RE = re.compile(r"^llmb: submitted (\S+) as job (\S+)")
EXPDIR_RE = re.compile(r"^llmb: experiment directory: (.+)$")


class RunError(Exception):
    """One line for the user."""


@dataclass(frozen=True)
class Task:
    workload: str
    size: str
    dtype: str
    scale: int
    profile: bool = False
    repeat: int = 1
    env: Mapping[str, str] = field(default_factory=dict)

    def label(self) -> str:
        return (f"{self.workload} {self.size} {self.dtype} x{self.scale}"
                + (" profile" if self.profile else "") + f" (repeat {self.repeat})")


@dataclass(frozen=True)
class ClusterConfig:
    path: Path
    data: Mapping[str, Any]

    @property
    def install(self) -> Path:
        return Path(self.data["llmb"]["install_path"])

    @property
    def repo(self) -> Path:
        return Path(self.data["llmb"]["repo"])

    @property
    def launcher(self) -> Mapping[str, Any]:
        return self.data["launcher"]

    @property
    def gpu_type(self) -> str:
        return str(self.launcher["gpu_type"])

    @property
    def workloads(self) -> Mapping[str, Mapping[str, Any]]:
        return self.data.get("workloads") or {}

    @property
    def history(self) -> History:
        return History(self.install / HISTORY_FILE)


def find_config(explicit: str | None, environ: Mapping[str, str]) -> ClusterConfig:
    candidates = [Path(explicit)] if explicit else [Path.cwd() / CONFIG_FILE]
    if not explicit and environ.get("LLMB_INSTALL"):
        candidates.append(Path(environ["LLMB_INSTALL"]) / CONFIG_FILE)
    for path in candidates:
        if path.is_file():
            data = catalog.read_yaml(path, str(path), RunError)
            for key in ("llmb", "launcher", "workloads"):
                if not isinstance(data, dict) or not isinstance(data.get(key), dict):
                    raise RunError(f"{path} has no '{key}' section; rerun the installer")
            return ClusterConfig(path, data)
    where = " or ".join(str(p) for p in candidates)
    raise RunError(f"no {CONFIG_FILE} found ({where}); cd to your install directory, set "
                   "LLMB_INSTALL, or run installer/install.sh")


# --- validation -------------------------------------------------------------------------------

def check_task(cfg: ClusterConfig, task: Task) -> tuple[list[str], list[str], bool]:
    """(errors, warnings, above_max) for one run; nothing is submitted until all pass."""
    what = task.label()
    if task.workload not in {r.workload for r in catalog.all_recipes()}:
        known = ", ".join(r.workload for r in catalog.all_recipes())
        return [f"{what}: -w {task.workload} is not a workload; known: {known}"], [], False
    if task.workload not in cfg.workloads:
        return [f"{what}: {task.workload} is not installed here (installed: "
                f"{', '.join(cfg.workloads) or 'none'}); rerun the installer with it"], [], False
    recipe = catalog.find_recipe(task.workload)
    gpu = cfg.gpu_type
    if task.size not in recipe.sizes:
        return [f"{what}: -s {task.size} is not a size of {task.workload}; allowed: "
                f"{', '.join(recipe.sizes)}"], [], False
    dtypes = sorted({c.dtype for c in recipe.rows(task.size, gpu_type=gpu)})
    if task.dtype not in dtypes:
        return [f"{what}: --dtype {task.dtype} is not published for {task.workload} "
                f"{task.size} on {gpu}; allowed: {', '.join(dtypes) or 'none'}"], [], False
    scales = recipe.scales(task.size, task.dtype, gpu)
    if not scales:
        return [f"{what}: {task.workload} {task.size} {task.dtype} publishes no weak-scaling "
                f"scale on {gpu}"], [], False
    errors: list[str] = []
    warnings: list[str] = []
    above = task.scale > max(scales)
    listed = ", ".join(map(str, scales))
    if task.scale < min(scales):
        errors.append(f"{what}: --scale {task.scale} is below the smallest published scale "
                      f"{min(scales)}; published: {listed}")
    elif not above and task.scale not in scales:
        errors.append(f"{what}: --scale {task.scale} is not a published scale; published: "
                      f"{listed}")
    else:
        try:
            recipe.resolve(task.size, task.dtype, gpu, task.scale, allow_unpublished=above)
        except catalog.CatalogError as exc:
            errors.append(f"{what}: --scale {task.scale}: {exc}")
    if above and not errors:
        warnings.append(f"{what}: --scale {task.scale} is above the largest published scale "
                        f"{max(scales)}: an unvalidated configuration, no reference applies")
    if task.repeat < 1:
        errors.append(f"{what}: repeats must be a positive integer")
    return errors, warnings, above


def _as_list(entry: Mapping[str, Any], one: str, many: str, where: str) -> list[Any]:
    if one in entry and many in entry:
        raise RunError(f"{where}: give {one} or {many}, not both")
    value = entry.get(many, entry.get(one))
    if value is None:
        raise RunError(f"{where}: {one} (or {many}) is required")
    return value if isinstance(value, list) else [value]


def tasks_from_bulk(data: Any, source: str) -> tuple[list[Task], list[str]]:
    """Expand a bulk file into tasks; every structural error is collected, not just the first."""
    errors: list[str] = []
    defaults: Mapping[str, Any] = {}
    if isinstance(data, dict):
        unknown = set(data) - {"defaults", "tasks"}
        if unknown:
            errors.append(f"{source}: unknown top-level key(s) {', '.join(sorted(unknown))}; "
                          "allowed: defaults, tasks")
        defaults = data.get("defaults") or {}
        entries = data.get("tasks")
    else:
        entries = data
    if not isinstance(entries, list) or not entries:
        return [], [*errors, f"{source}: no tasks (a list of tasks, or a mapping with 'tasks')"]
    tasks: list[Task] = []
    for i, raw in enumerate(entries, 1):
        where = f"{source}: task {i}"
        if not isinstance(raw, dict):
            errors.append(f"{where}: must be a mapping")
            continue
        entry = {**defaults, **raw}
        entry["env"] = {**(defaults.get("env") or {}), **(raw.get("env") or {})}
        unknown = set(entry) - TASK_KEYS
        if unknown:
            errors.append(f"{where}: unknown key(s) {', '.join(sorted(unknown))}; allowed: "
                          f"{', '.join(sorted(TASK_KEYS))}")
            continue
        try:
            if "workload" not in entry:
                raise RunError(f"{where}: workload is required")
            sizes = _as_list(entry, "size", "sizes", where)
            dtypes = _as_list(entry, "dtype", "dtypes", where)
            scales = _as_list(entry, "scale", "scales", where)
            repeats = entry.get("repeats", 1)
            if not isinstance(repeats, int) or isinstance(repeats, bool) or repeats < 1:
                raise RunError(f"{where}: repeats={repeats!r} must be a positive integer")
            bad = [s for s in scales if not isinstance(s, int) or isinstance(s, bool)]
            if bad:
                raise RunError(f"{where}: scales must be integers (GPUs), got {bad[0]!r}")
            if not isinstance(entry["env"], dict):
                raise RunError(f"{where}: env must be a mapping")
        except RunError as exc:
            errors.append(str(exc))
            continue
        env = {str(k): _env_value(v) for k, v in entry["env"].items()}
        for size, dtype, scale, rep in itertools.product(sizes, dtypes, scales,
                                                         range(1, repeats + 1)):
            tasks.append(Task(str(entry["workload"]), str(size).lower(), str(dtype).lower(),
                              scale, bool(entry.get("profile", False)), rep, env))
    return tasks, errors


def _env_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def validate_all(cfg: ClusterConfig, tasks: list[Task]) -> tuple[list[str], list[str], set[int]]:
    """Every error and warning of every task; `above` holds the indexes of above-max tasks."""
    errors: list[str] = []
    warnings: list[str] = []
    above: set[int] = set()
    for i, task in enumerate(tasks):
        e, w, a = check_task(cfg, task)
        errors.extend(e)
        warnings.extend(w)
        if a:
            above.add(i)
    return errors, list(dict.fromkeys(warnings)), above


# --- launching --------------------------------------------------------------------------------

def launch_env(cfg: ClusterConfig, task: Task, above_max: bool, dry_run: bool, smoke: bool,
               base: Mapping[str, str]) -> dict[str, str]:
    """The child's environment: the workload venv activated, the request, the overrides."""
    w = cfg.workloads[task.workload]
    venv = Path(w["venv"])
    env = {k: v for k, v in base.items()
           if k not in ("VIRTUAL_ENV", "CONDA_PREFIX", "PYTHONHOME", "LLMB_PYTHON")}
    env["VIRTUAL_ENV" if w.get("venv_kind", "venv") == "venv" else "CONDA_PREFIX"] = str(venv)
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{base.get('PATH', '')}"
    env["LLMB_PYTHON"] = str(venv / "bin" / "python")
    launcher = cfg.launcher
    env.update({
        "LLMB_INSTALL": str(cfg.install),
        "CLUSTER_TYPE": str(launcher.get("cluster_type", "slurm")),
        "GPU_TYPE": cfg.gpu_type,
        "JOB_TOTAL_GPUS": str(task.scale),
        "MODEL_SIZE": task.size,
        "DTYPE": task.dtype,
    })
    env.pop("LLMB_WORKLOAD", None)
    slurm_cfg = launcher.get("slurm") or {}
    if slurm_cfg:
        env["SBATCH_ACCOUNT"] = str(slurm_cfg["account"])
        env["SBATCH_PARTITION"] = str(slurm_cfg["partition"])
        if slurm_cfg.get("gres"):
            per_node = catalog.get_gpu_type(cfg.gpu_type).gpus_per_node
            env["SBATCH_GPUS_PER_NODE"] = str(per_node)
    token_file = launcher.get("hf_token_file")
    if token_file and "HF_TOKEN" not in base:
        try:
            env["HF_TOKEN"] = Path(token_file).read_text().strip()
        except OSError as exc:
            raise RunError(f"hf_token_file={token_file}: {exc.strerror}") from None
    env.update({str(k): _env_value(v) for k, v in (launcher.get("env") or {}).items()})
    if task.profile:
        env["ENABLE_PROFILE"] = "true"
    if above_max:
        env["LLMB_ALLOW_UNVALIDATED_SCALE"] = "true"
    if smoke:
        env["SMOKE_TEST"] = "true"
    env.update(task.env)
    if dry_run:
        env["DRY_RUN"] = "true"
    return env


def submit(cfg: ClusterConfig, task: Task, env: Mapping[str, str]) -> dict[str, Any] | None:
    """Run launch.sh; echo its output; return the history record (None for a dry run)."""
    recipe_dir = catalog.find_recipe(task.workload).directory
    script = recipe_dir / "launch.sh"
    proc = subprocess.Popen(["bash", str(script)], env=dict(env), cwd=str(recipe_dir),
                            stdout=subprocess.PIPE, text=True)
    job_id = experiment = exp_dir = None
    assert proc.stdout is not None
    for line in proc.stdout:
        sys.stdout.write(line)
        if m := SUBMIT_RE.match(line):
            experiment, job_id = m.group(1), m.group(2)
        elif m := EXPDIR_RE.match(line.rstrip("\n")):
            exp_dir = m.group(1)
    rc = proc.wait()
    if rc != 0:
        raise RunError(f"{task.label()}: {script} failed (exit {rc}); see the line above")
    if env.get("DRY_RUN") == "true":
        return None
    if job_id is None:
        raise RunError(f"{task.label()}: {script} printed no job id ('llmb: submitted ... as "
                       "job N'); nothing recorded")
    return {
        "type": "submit", "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "job_id": job_id, "experiment": experiment, "experiment_dir": exp_dir,
        "workload": task.workload, "size": task.size, "dtype": task.dtype,
        "scale": task.scale, "gpu_type": cfg.gpu_type, "profile": task.profile,
        "repeat": task.repeat, "smoke": env.get("SMOKE_TEST", "").lower() == "true",
        "unvalidated": env.get("LLMB_ALLOW_UNVALIDATED_SCALE") == "true",
        "env": redact.public_env(task.env, redact.secret_values(env)),
    }


def run_tasks(cfg: ClusterConfig, tasks: list[Task], dry_run: bool, smoke: bool) -> int:
    errors, warnings, above = validate_all(cfg, tasks)
    for w in warnings:
        print(f"{PROG}: warning: {w}", file=sys.stderr)
    if errors:
        for e in errors:
            print(f"{PROG}: {e}", file=sys.stderr)
        print(f"{PROG}: {len(errors)} error(s); nothing was submitted", file=sys.stderr)
        return 1
    failed = 0
    for i, task in enumerate(tasks):
        print(f"{PROG}: [{i + 1}/{len(tasks)}] {task.label()}", flush=True)
        env = launch_env(cfg, task, i in above, dry_run, smoke, os.environ)
        try:
            record = submit(cfg, task, env)
        except RunError as exc:
            print(f"{PROG}: {exc}", file=sys.stderr)
            failed += 1
            continue
        if record is not None:
            cfg.history.append(record)
    if failed:
        print(f"{PROG}: {failed} of {len(tasks)} submission(s) failed", file=sys.stderr)
        return 1
    return 0


# --- list and status --------------------------------------------------------------------------

def cmd_list(cfg: ClusterConfig) -> int:
    gpu = cfg.gpu_type
    print(f"GPU type: {gpu} (from {cfg.path})")
    for recipe in catalog.all_recipes():
        mark = "installed" if recipe.workload in cfg.workloads else "not installed"
        print(f"\n{recipe.workload} ({mark})")
        for size in recipe.sizes:
            for dtype in recipe.dtypes:
                scales = recipe.scales(size, dtype, gpu)
                if scales:
                    print(f"  -s {size:<5} --dtype {dtype:<4} --scale "
                          f"{', '.join(map(str, scales))}")
        if not any(recipe.rows(gpu_type=gpu)):
            print(f"  (nothing published for {gpu})")
    return 0


def analyze(exp_dir: str | None) -> dict[str, Any] | None:
    """The analyzer's JSON result for one run directory (None when it has no result)."""
    if not exp_dir or not Path(exp_dir).is_dir():
        return None
    proc = subprocess.run([sys.executable, "-m", "llmb.analyze", "--format=json", exp_dir],
                          capture_output=True, text=True, check=False,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])})
    try:
        results = json.loads(proc.stdout).get("results") or []
    except (json.JSONDecodeError, AttributeError):
        return None
    return results[0] if results else None


def status_rows(cfg: ClusterConfig, show_all: bool) -> list[dict[str, Any]]:
    history = cfg.history
    subs = history.submissions()
    if not show_all:
        subs = subs[-20:]
    known = history.final_states()
    rows = []
    for rec in subs:
        job = str(rec["job_id"])
        state = known.get(job)
        if state is None:
            state = slurm.job_state(job)
            if state is not None and state.split()[0] in slurm.TERMINAL_STATES:
                history.append({"type": "state", "job_id": job, "state": state})
        # UNKNOWN: Slurm no longer knows the job (no accounting, or the controller lost its
        # state); the logs still tell whether it succeeded.
        state = state or "UNKNOWN"
        done = state.split()[0] in slurm.TERMINAL_STATES or state == "UNKNOWN"
        result = analyze(rec.get("experiment_dir")) if done else None
        rows.append({
            "job_id": job, "state": state,
            "result": result.get("status") if result else None,
            "time_mean": result.get("time_mean") if result else None,
            "workload": rec.get("workload"), "size": rec.get("size"), "dtype": rec.get("dtype"),
            "scale": rec.get("scale"), "repeat": rec.get("repeat"),
            "experiment_dir": rec.get("experiment_dir"), "submitted": rec.get("time"),
        })
    return rows


def cmd_status(cfg: ClusterConfig, show_all: bool, fmt: str) -> int:
    rows = status_rows(cfg, show_all)
    if fmt == "json":
        print(json.dumps({"jobs": rows}, indent=2))
        return 0
    if not rows:
        print(f"no submissions recorded in {cfg.history.path}")
        return 0
    head = ("JOB", "STATE", "RESULT", "STEP_S", "WORKLOAD", "SIZE", "DTYPE", "GPUS", "REP",
            "EXPERIMENT_DIR")
    table = [head] + [(
        r["job_id"], r["state"], r["result"] or "-",
        f"{r['time_mean']:.3f}" if isinstance(r["time_mean"], (int, float)) else "-",
        r["workload"], r["size"], r["dtype"], str(r["scale"]), str(r["repeat"]),
        r["experiment_dir"] or "-") for r in rows]
    widths = [max(len(str(row[i])) for row in table) for i in range(len(head) - 1)]
    for row in table:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=False))
              + "  " + str(row[-1]))
    return 0


# --- command line -----------------------------------------------------------------------------

def parse_env_overrides(items: list[str]) -> dict[str, str]:
    env = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            raise RunError(f"--env {item} is not NAME=VALUE")
        env[key] = value
    return env


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="Run llmb benchmarks on this install.")
    p.add_argument("--config", help=f"path of {CONFIG_FILE} (default: ./ then $LLMB_INSTALL)")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="workloads, sizes, dtypes and published scales")
    s = sub.add_parser("single", help="submit one run")
    s.add_argument("-w", "--workload", required=True)
    s.add_argument("-s", "--size", required=True)
    s.add_argument("--dtype", required=True)
    s.add_argument("--scale", type=int, required=True, help="total GPUs")
    s.add_argument("-p", "--profile", action="store_true", help="nsys profile (ENABLE_PROFILE)")
    s.add_argument("--repeats", type=int, default=1)
    s.add_argument("--env", action="append", default=[], metavar="NAME=VALUE")
    b = sub.add_parser("bulk", help="submit the sweep in a YAML file")
    b.add_argument("file")
    for q in (s, b):
        q.add_argument("--dry-run", action="store_true", help="DRY_RUN=true: submit nothing")
        q.add_argument("--smoke", action="store_true",
                       help="SMOKE_TEST=true: a tiny real torch job instead of NeMo")
    st = sub.add_parser("status", help="state and result of the submitted jobs")
    st.add_argument("--all", action="store_true", help="every recorded job, not the last 20")
    st.add_argument("--format", choices=("table", "json"), default="table")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        cfg = find_config(args.config, os.environ)
        if args.command == "list":
            return cmd_list(cfg)
        if args.command == "status":
            return cmd_status(cfg, args.all, args.format)
        if args.command == "single":
            tasks = [Task(args.workload, args.size.lower(), args.dtype.lower(), args.scale,
                          args.profile, rep, parse_env_overrides(args.env))
                     for rep in range(1, max(args.repeats, 1) + 1)]
            if args.repeats < 1:
                raise RunError(f"--repeats {args.repeats} must be a positive integer")
        else:
            path = Path(args.file)
            data = catalog.read_yaml(path, f"bulk file {path}", RunError)
            tasks, errors = tasks_from_bulk(data, str(path))
            if errors:
                more, _, _ = validate_all(cfg, tasks)
                for e in errors + more:
                    print(f"{PROG}: {e}", file=sys.stderr)
                print(f"{PROG}: {len(errors) + len(more)} error(s); nothing was submitted",
                      file=sys.stderr)
                return 1
        return run_tasks(cfg, tasks, args.dry_run, args.smoke)
    except RunError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # `llmb-run list | head`
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
