"""`llmb-run rerun [--failed] [--exclude-suspect] [JOB...]`: submit recorded runs again.

Each rerun is the recorded configuration (workload, size, dtype, scale, profile, smoke, env
overrides, placement) validated again against today's metadata and cluster_config.yaml, and
recorded with `rerun_of`. Placement flags given to rerun replace the recorded ones;
`--exclude-suspect` adds to --exclude the nodes the analyzer names (`suspect_nodes`) in the
failed run's results. `--failed` picks the runs that failed (a failed Slurm state, or the
analyzer's Failed/Invalid, or a purged job without any log) and were not rerun before.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from llmb.launch import placement
from llmb.launch.placement import Placement, PlacementError
from llmb.llmbrun import analyzer
from llmb.llmbrun.clusterconfig import ClusterConfig
from llmb.llmbrun.errors import PROG, RunError
from llmb.llmbrun.history import SubmitRecord
from llmb.llmbrun.status import ACTIVE_STATES, only, selected, states
from llmb.llmbrun.submit import run_tasks
from llmb.llmbrun.tasks import Task, normalize_env
from llmb.shared import redact, slurmquery, values
from llmb.shared.errors import UsageError

FAILED_STATES = slurmquery.TERMINAL_STATES - {"COMPLETED"}


@dataclass(frozen=True)
class Rerun:
    job_id: str
    task: Task
    why: str  # what failed, for the message
    excluded: tuple[str, ...] = ()  # suspect nodes added to --exclude


def failure(info: slurmquery.JobInfo, result: analyzer.AnalyzedRun | None) -> str | None:
    """Why this run counts as failed, or None when it did not fail (or has not ended)."""
    if info.state in ACTIVE_STATES:
        return None
    status = result["status"] if result else None
    if info.state in FAILED_STATES:
        return f"{info.state}" + (f"/{status}" if status else "")
    if status in ("Failed", "Invalid"):
        return f"{info.state}/{status}"
    if info.state == slurmquery.PURGED and result is None:
        return "PURGED without a log"
    return None


def _recorded(rec: SubmitRecord, key: str) -> dict[str, Any]:
    """A mapping of the history record (env, placement): {} when absent; a hand-edited value
    of another type is refused."""
    value: Any = rec.get(key) or {}
    if not isinstance(value, dict):
        raise RunError(f"its history record's {key} is a {type(value).__name__}, not a mapping")
    return value


def task_of(rec: SubmitRecord, override: Placement) -> Task:
    """The recorded run as a Task, with the override's placement settings replacing its own."""
    job = rec["job_id"]
    try:
        recorded = placement.build(**{k: v for k, v in _recorded(rec, "placement").items()
                                      if k in ("nodelist", "exclude", "reservation", "qos",
                                               "segment", "slurm_args")})
        env = normalize_env(f"job {job}: recorded env", _recorded(rec, "env").items())
    except (PlacementError, RunError) as exc:
        raise RunError(f"job {job} cannot be rerun: {exc}") from None
    except (TypeError, AttributeError):  # a hand-edited value of the wrong type
        raise RunError(f"job {job} cannot be rerun: its history record's placement holds a "
                       "value of the wrong type") from None
    masked = sorted(k for k, v in env.items() if redact.MASK in v)
    if masked:
        raise RunError(f"job {job} cannot be rerun: the history masked the value of "
                       f"{masked[0]} (it holds a secret); submit it again with llmb-run "
                       "single or bulk")
    if rec.get("smoke"):
        env["SMOKE_TEST"] = "true"
    try:
        scale = int(rec["scale"])
        return Task(str(rec["workload"]), str(rec["size"]), str(rec["dtype"]), scale,
                    bool(rec.get("profile")), int(rec.get("repeat") or 1), env,
                    recorded.merged(override), str(rec.get("scaling") or "weak"))
    except (KeyError, TypeError, ValueError):
        raise RunError(f"job {job} cannot be rerun: its history record lacks workload, size, "
                       "dtype or scale") from None


def excluding(current: Placement, suspects: Sequence[str], what: str
              ) -> tuple[Placement, tuple[str, ...]]:
    """The placement with the suspect nodes added to its --exclude, and those that were not
    excluded already; RunError (prefixed with `what`) when one is in its --nodelist."""
    if current.nodelist:
        required = set(placement.expand_hostlist("--nodelist", current.nodelist))
        clash = [n for n in suspects if n in required]
        if clash:
            raise RunError(f"{what}: suspect node {clash[0]} is in its --nodelist "
                           f"{current.nodelist}; give --nodelist with other nodes")
    try:
        return current.with_excluded(suspects)
    except PlacementError as exc:
        raise RunError(f"{what}: {exc}") from None


def with_suspects(job: str, task: Task, suspects: list[str]) -> tuple[Task, tuple[str, ...]]:
    """The task with the suspect nodes added to its --exclude."""
    place, new = excluding(task.placement, suspects, f"job {job}")
    return (replace(task, placement=place), new) if new else (task, ())


def _prepare(rec: SubmitRecord, cfg_gpu: str, override: Placement,
             suspects: list[str] | None) -> tuple[Task, tuple[str, ...]]:
    """The task that reruns this record, and the suspect nodes added to its --exclude
    (`suspects` None: --exclude-suspect not given)."""
    job = rec["job_id"]
    ran_on = rec.get("gpu_type")
    if ran_on is not None and str(ran_on) != cfg_gpu:
        raise RunError(f"job {job} ran on {values.shown(ran_on)}; this install's gpu_type is "
                       f"{cfg_gpu}: rerun it from the install it came from")
    task = task_of(rec, override)
    if suspects is None:
        return task, ()
    return with_suspects(job, task, suspects)


def plan(subs: list[SubmitRecord], infos: dict[str, slurmquery.JobInfo],
         found: analyzer.RunAnalysis, all_subs: list[SubmitRecord], job_ids: list[str],
         failed_only: bool, exclude_suspect: bool, override: Placement,
         cfg_gpu: str) -> list[Rerun]:
    """Which runs to submit again, and how. Pure: tests give it analyzer JSON of their own."""
    rerun_before = {str(r.get("rerun_of")) for r in all_subs if r.get("rerun_of")}
    out = []
    for rec in subs:
        job = rec["job_id"]
        info = infos[job]
        if info.state in ACTIVE_STATES:
            if job_ids:
                raise RunError(f"job {job} is still {info.state}; rerun it when it has ended "
                               "(or scancel it first)")
            continue
        why = failure(info, found.result(job))
        if failed_only and (why is None or (not job_ids and job in rerun_before)):
            continue
        try:
            task, excluded = _prepare(rec, cfg_gpu, override,
                                      found.suspect_nodes(job) if exclude_suspect else None)
        except RunError as exc:
            if job_ids:
                raise
            print(f"{PROG}: warning: skipped {exc}", file=sys.stderr)  # the others still run
            continue
        out.append(Rerun(job, task, why or info.state, excluded))
    return out


def cmd_rerun(cfg: ClusterConfig, job_ids: list[str], failed_only: bool,
              exclude_suspect: bool, override: Placement, dry_run: bool) -> int:
    if not job_ids and not failed_only:
        raise UsageError("rerun needs JOB ids or --failed (every failed run not rerun yet)")
    all_subs = selected(cfg, True)
    subs = only(cfg, all_subs, job_ids) if job_ids else all_subs
    subs = list({r["job_id"]: r for r in subs}.values())  # a reused job id: its latest run
    infos = states(cfg, subs)
    done = {r["job_id"]: str(r.get("experiment_dir") or "") for r in subs
            if infos[r["job_id"]].state not in ACTIVE_STATES}
    found = analyzer.analyze_runs(done)
    if found.error and (failed_only or exclude_suspect):
        raise RunError(f"the analyzer failed ({found.error}); cannot tell which runs failed")
    reruns = plan(subs, infos, found, all_subs, job_ids, failed_only, exclude_suspect,
                  override, cfg.gpu_type)
    if not reruns:
        print(f"{PROG}: nothing to rerun" + (" (no failed run that was not rerun already)"
                                               if failed_only else ""))
        return 0
    for r in reruns:
        note = f"; excluding suspect node(s) {','.join(r.excluded)}" if r.excluded else ""
        if exclude_suspect and not r.excluded:
            note = "; the analyzer names no suspect node"
        print(f"{PROG}: rerun of job {r.job_id} ({values.shown(r.why)}): {r.task.label()}{note}",
              file=sys.stderr)
    return run_tasks(cfg, [r.task for r in reruns], dry_run, False,
                     [r.job_id for r in reruns])
