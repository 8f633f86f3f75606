"""Submitting validated tasks: each runs its recipe's launch.sh in the workload venv.

`launch_env` builds the child's environment (venv activated, the request, the Slurm settings
and HF token from cluster_config.yaml, the placement as LLMB_* variables, the task's checked
overrides); `submit` runs launch.sh, echoes its output and returns the history record of what
ran; `run_tasks` validates every task first, then submits them one by one. The record keeps
no secret: env entries are filtered by name and every known secret value is masked
(llmb.shared.redact), whatever field it appears in.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TypedDict, cast

from llmb.launch import overrides, placement
from llmb.llmbrun.clusterconfig import ClusterConfig
from llmb.llmbrun.errors import PROG, RunError
from llmb.llmbrun.history import SubmitRecord
from llmb.llmbrun.tasks import BOOL_ENV, LAUNCH_KNOBS, Task, smoke_of, validate_all
from llmb.recipes import catalog
from llmb.shared import clock, files, redact, values
from llmb.shared.errors import LlmbError

# Left out of the calling shell's environment: a foreign PYTHONHOME breaks the venv's Python.
INHERITED_DROP = ("PYTHONHOME",)
SUBMIT_RE = re.compile(r"^llmb: submitted (\S+) as job (\S+)")
EXPDIR_RE = re.compile(r"^llmb: experiment directory: (.+)$")


class SuiteFields(TypedDict):
    """What a suite's run adds to its submit record: the suite's id and its run number."""

    suite: str
    suite_run: int


def launch_env(cfg: ClusterConfig, task: Task, above_max: bool, dry_run: bool, smoke: bool,
               base: Mapping[str, str]) -> dict[str, str]:
    """The child's environment: the workload venv activated, the request, the overrides.

    Every variable llmb-run decides (overrides.RESERVED) is set here or removed: an
    ENABLE_PROFILE or STRONG_SCALING left in the calling shell must not change a run behind the
    history's back.
    The booleans launch.sh reads are normalised to true/false whatever their source."""
    w = cfg.workloads[task.workload]
    venv = w.venv
    env = {k: v for k, v in base.items() if k not in overrides.RESERVED
           and k not in placement.ENV_VARS and k not in INHERITED_DROP}
    env["VIRTUAL_ENV" if w.venv_kind == "venv" else "CONDA_PREFIX"] = str(venv)
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{base.get('PATH', '')}"
    env["LLMB_PYTHON"] = str(venv / "bin" / "python")
    env.update({
        "LLMB_INSTALL": str(cfg.install),
        "CLUSTER_TYPE": cfg.cluster_type,
        "GPU_TYPE": cfg.gpu_type,
        "JOB_TOTAL_GPUS": str(task.scale),
        "MODEL_SIZE": task.size,
        "DTYPE": task.dtype,
    })
    if cfg.slurm is not None:
        env["SBATCH_ACCOUNT"] = cfg.slurm.account
        env["SBATCH_PARTITION"] = cfg.slurm.partition
        if cfg.slurm.gres:
            env["SBATCH_GPUS_PER_NODE"] = str(cfg.slurm.gres)
    token_file = cfg.hf_token_file
    if token_file and "HF_TOKEN" not in base:
        try:
            env["HF_TOKEN"] = files.read_token(token_file)
        except files.FileRefused as exc:
            raise RunError(f"hf_token_file={values.shown(token_file)}: {exc.reason}") from None
    env.update(cfg.env)
    if task.profile:
        env["ENABLE_PROFILE"] = "true"
    if task.scaling == "strong":
        env["STRONG_SCALING"] = "true"
    if above_max:
        env["LLMB_ALLOW_UNVALIDATED_SCALE"] = "true"
    if smoke:
        env["SMOKE_TEST"] = "true"
    env.update(task.env)
    env.update(task.placement.to_env())
    if dry_run:
        env["DRY_RUN"] = "true"
    for name in BOOL_ENV:
        if name in env:
            where = ("--env or the bulk file" if name in task.env else
                     f"{cfg.path} launcher.env" if name in cfg.env else "the environment")
            try:
                env[name] = "true" if values.parse_bool(name, env[name]) else "false"
            except values.BadValue as exc:
                raise RunError(f"{exc} (from {where})") from None
    return env


def _masked(value: object, secrets: set[str]) -> object:
    """value with every known secret masked, in every string it holds."""
    if isinstance(value, str):
        return redact.redact(value, secrets)
    if isinstance(value, dict):
        return {k: _masked(v, secrets) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_masked(v, secrets) for v in value]
    return value


def history_record(cfg: ClusterConfig, task: Task, env: Mapping[str, str], job_id: str,
                   experiment: str | None, exp_dir: str | None,
                   rerun_of: str | None = None,
                   extra: SuiteFields | None = None) -> SubmitRecord:
    """What ran, as the history keeps it: the launch settings in effect (LAUNCH_KNOBS from
    any source, and the task's own overrides), no secret-named variable, no known secret
    value anywhere in the record. `extra`: fields of the caller's own (a suite's id and run)."""
    secrets = redact.secret_values(env)
    launched = {k: env[k] for k in LAUNCH_KNOBS if k in env}
    launched.update({k: env.get(k, v) for k, v in task.env.items()})
    record: SubmitRecord = {
        "type": "submit", "time": clock.iso(),
        "job_id": job_id, "experiment": experiment, "experiment_dir": exp_dir,
        "workload": task.workload, "size": task.size, "dtype": task.dtype,
        "scale": task.scale, "scaling": task.scaling, "gpu_type": cfg.gpu_type,
        "profile": env.get("ENABLE_PROFILE") == "true",
        "repeat": task.repeat, "smoke": smoke_of(env),
        "unvalidated": env.get("LLMB_ALLOW_UNVALIDATED_SCALE") == "true",
        "env": redact.public_env(launched, secrets),
        "placement": task.placement.record(),
    }
    if rerun_of is not None:
        record["rerun_of"] = rerun_of
    if extra is not None:
        record["suite"], record["suite_run"] = extra["suite"], extra["suite_run"]
    return cast(SubmitRecord, _masked(record, secrets))  # the same record, secrets masked


def submit(cfg: ClusterConfig, task: Task, env: Mapping[str, str],
           rerun_of: str | None = None,
           extra: SuiteFields | None = None) -> SubmitRecord | None:
    """Run launch.sh; echo its output; return the history record (None for a dry run)."""
    recipe_dir = catalog.find_recipe(task.workload).directory
    script = recipe_dir / "launch.sh"
    job_id = experiment = exp_dir = None
    with subprocess.Popen(["bash", str(script)], env=dict(env), cwd=str(recipe_dir),
                          stdout=subprocess.PIPE, text=True, errors="replace") as proc:
        assert proc.stdout is not None  # closed when the block ends, whatever ends it
        for line in proc.stdout:
            sys.stdout.write(line)
            if m := SUBMIT_RE.match(line):
                experiment, job_id = m.group(1), m.group(2)
            elif m := EXPDIR_RE.match(line.rstrip("\n")):
                exp_dir = m.group(1)
    rc = proc.returncode
    if rc != 0:
        raise RunError(f"{task.label()}: {script} failed (exit {rc}); see the line above")
    if env.get("DRY_RUN") == "true":
        return None
    if job_id is None:
        raise RunError(f"{task.label()}: {script} printed no job id ('llmb: submitted ... as "
                       "job N'); nothing recorded")
    return history_record(cfg, task, env, job_id, experiment, exp_dir, rerun_of, extra)


MAX_LISTED = 20  # errors listed one a line; a file of a million bad entries is not a million lines


def report_errors(errors: list[str]) -> None:
    """Each error on its own line, the first MAX_LISTED of them (then how many more); with more
    than one, a last line counting them."""
    for e in errors[:MAX_LISTED]:
        print(f"{PROG}: {redact.for_people(e)}", file=sys.stderr)
    if len(errors) > MAX_LISTED:
        print(f"{PROG}: ... and {len(errors) - MAX_LISTED} more error(s) not listed",
              file=sys.stderr)
    if len(errors) > 1:
        print(f"{PROG}: {len(errors)} errors; nothing was submitted", file=sys.stderr)


@contextlib.contextmanager
def _cwd(directory: Path) -> Iterator[None]:
    """Run the block in `directory` (launch.sh runs there: relative paths mean the same)."""
    before = os.getcwd()
    os.chdir(directory)
    try:
        yield
    finally:
        os.chdir(before)


def launch_problem(task: Task, env: Mapping[str, str]) -> str | None:
    """What launch.sh would refuse in this environment, by its own rules (llmb.launch.request,
    run here, in launch.sh's directory, before anything is submitted): one line, or None."""
    from llmb.launch import request

    recipe = catalog.find_recipe(task.workload)
    try:
        with _cwd(recipe.directory):
            request.from_env(recipe, env)
    except LlmbError as exc:
        return f"{task.label()}: {exc}"
    return None


def prepare(cfg: ClusterConfig, tasks: list[Task], dry_run: bool, smoke: bool
            ) -> tuple[list[dict[str, str]], list[str]]:
    """Every value of every task validated (llmb-run's rules, then launch.sh's on the very
    environment each run gets) and its launch environment built: (environments, errors);
    nothing is submitted while there is an error."""
    errors, warnings, above = validate_all(cfg, tasks, smoke)
    for task in tasks:
        if smoke and task.env.get("SMOKE_TEST") == "false":
            errors.append(f"{task.label()}: --smoke contradicts the task's SMOKE_TEST=false")
    for w in warnings:
        print(f"{PROG}: warning: {w}", file=sys.stderr)
    envs = []
    for i, task in enumerate(tasks if not errors else []):
        try:
            envs.append(launch_env(cfg, task, i in above, dry_run, smoke, os.environ))
        except RunError as exc:
            errors.append(str(exc))
            break
    if not errors:
        errors += [p for task, env in zip(tasks, envs, strict=True)
                   if (p := launch_problem(task, env)) is not None]
    return envs, errors


def dry_run_all(tasks: list[Task], envs: list[dict[str, str]]) -> int:
    """The dry runs, each on the environment launch.sh would get (prepare checked it by
    launch.sh's rules): one process of the recipe's entrypoint (`dry-runs`) prints those of a
    workload, nemo-run imported once, not one launch.sh and one nemo-run import per run (1000
    runs: seconds, not 40 minutes). 1 when any failed."""
    by_workload: dict[str, list[int]] = {}
    for i, task in enumerate(tasks):
        by_workload.setdefault(task.workload, []).append(i)
    failed = 0
    for workload, indexes in by_workload.items():
        recipe = catalog.find_recipe(workload)
        entry = recipe.directory / str(recipe.data["entrypoint"])
        env = envs[indexes[0]]  # the workload's venv: its Python, its PATH
        runs = [{"header": f"{PROG}: [{i + 1}/{len(tasks)}] {tasks[i].label()}",
                 "env": envs[i]} for i in indexes]
        with subprocess.Popen([env["LLMB_PYTHON"], str(entry), "dry-runs"], env=env,
                              cwd=str(recipe.directory), stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, errors="replace") as proc:
            assert proc.stdin is not None and proc.stdout is not None
            with contextlib.suppress(BrokenPipeError):  # it ended early: its status says why
                proc.stdin.write(json.dumps(runs))
                proc.stdin.close()
            for line in proc.stdout:
                sys.stdout.write(line)
        if proc.returncode != 0:
            print(f"{PROG}: {workload}: the dry run of {len(indexes)} run(s) failed (exit "
                  f"{proc.returncode}); see the lines above", file=sys.stderr)
            failed += min(proc.returncode, len(indexes))
    if failed:
        print(f"{PROG}: {failed} of {len(tasks)} dry run(s) failed", file=sys.stderr)
        return 1
    return 0


def run_tasks(cfg: ClusterConfig, tasks: list[Task], dry_run: bool, smoke: bool,
              rerun_of: list[str | None] | None = None,
              extra: list[SuiteFields] | None = None) -> int:
    """Validate every task (prepare), then submit each; 1 when any failed (the rest still run).
    `rerun_of` and `extra` (fields for the history record) go with the task of their index."""
    envs, errors = prepare(cfg, tasks, dry_run, smoke)
    if errors:
        report_errors(list(dict.fromkeys(errors)))
        return 1
    if dry_run:
        return dry_run_all(tasks, envs)
    failed = 0
    for i, (task, env) in enumerate(zip(tasks, envs, strict=True)):
        print(f"{PROG}: [{i + 1}/{len(tasks)}] {task.label()}", flush=True)
        try:
            record = submit(cfg, task, env, rerun_of[i] if rerun_of else None,
                            extra[i] if extra else None)
        except RunError as exc:
            print(f"{PROG}: {redact.for_people(str(exc))}", file=sys.stderr)
            failed += 1
            continue
        if record is not None:
            try:
                cfg.history.append(record)
            except OSError as exc:
                print(f"{PROG}: job {record['job_id']} was submitted but {cfg.history.path} "
                      f"cannot be written ({exc.strerror}); `status` will not list it",
                      file=sys.stderr)
                failed += 1
    if failed:
        print(f"{PROG}: {failed} of {len(tasks)} submission(s) failed", file=sys.stderr)
        return 1
    return 0
