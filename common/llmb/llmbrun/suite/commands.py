"""`llmb-run suite submit | status | resume`: accept a cluster in one pass.

    suite submit [--max-scale N] [--min-scale N] [-w W ...] [--dtype D ...] [--repeats R]
                 [--set NAME [--scale N]] [--max-jobs K] [--smoke] [--dry-run] [--yes]
                 [PLACEMENT] [--exclude-suspect]
    suite status [ID] [--wait [--timeout S]] [--format=table|json]
    suite resume [ID] [--exclude-suspect] [--dry-run]

`submit` plans (llmb.llmbrun.suite.plan; with --set, an acceptance set's workloads at its
scale: llmb.llmbrun.suite.sets), validates every run as `bulk` does (metadata, scale,
placement, launch environment) before the first submission, prints the plan with its
GPU-hours, asks on a terminal (not with --yes), records the suite (llmb.llmbrun.suite.record) and
submits its runs largest first, at most --max-jobs of them. `status` counts per configuration
the runs done, running, pending, held and failed; --wait releases held runs as room appears.
`resume` submits again the runs whose latest job failed (cancelled, failed, timed out,
Failed/Invalid, purged without a log) and held ones, nothing else: a configuration with all its
repeats done gets nothing. --exclude-suspect leaves out the nodes the newest `llmb-run screen`
named (llmb.llmbrun.screen), through --exclude: recorded in the manifest and the history.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TypedDict

from llmb.launch.placement import Placement
from llmb.llmbrun import rerun, screen, submit
from llmb.llmbrun.clusterconfig import ClusterConfig
from llmb.llmbrun.errors import PROG, RunError
from llmb.llmbrun.suite import plan, record, sets
from llmb.llmbrun.suite.plan import Selection
from llmb.llmbrun.suite.record import Slot, Suite
from llmb.shared import values
from llmb.shared.errors import UsageError
from llmb.shared.progress import Progress

POLL_S = 5.0
DEFAULT_REPEATS = 3


def _suspect_nodes(cfg: ClusterConfig) -> tuple[tuple[str, ...], Path]:
    """The nodes the newest screen named, and its screen.json (RunError when none ran)."""
    nodes = screen.for_exclude(cfg.tree)
    newest = screen.newest_screen(cfg.tree)
    assert newest is not None
    if not nodes:
        print(f"{PROG}: --exclude-suspect: the newest screen ({newest.path}) names no suspect "
              "node", file=sys.stderr)
    return nodes, newest.path


# --- submit -----------------------------------------------------------------------------------

def _confirm(question: str, ask: Callable[[str], str]) -> bool:
    try:
        answer = ask(f"{question} [y/N] ")
    except EOFError:
        return False
    return answer.strip().lower() in ("y", "yes")


def cmd_submit(cfg: ClusterConfig, sel: Selection, repeats: int | None, max_jobs: int | None,
               smoke: bool, dry_run: bool, yes: bool, place: Placement,
               exclude_suspect: bool, ask: Callable[[str], str] = input,
               set_name: str | None = None, scale: int | None = None) -> int:
    cfg.require_slurm("suite")
    extra = record.SuiteSettings(repeats=DEFAULT_REPEATS)
    if exclude_suspect:
        nodes, screen_json = _suspect_nodes(cfg)
        place, new = rerun.excluding(place, nodes, "--exclude-suspect")
        extra["excluded_suspects"], extra["screen"] = list(new), str(screen_json)
    configs, sel, origin = _planned(cfg, sel, repeats, set_name, scale, extra, smoke)
    repeats = extra["repeats"]
    runs = plan.order_runs(configs, repeats)
    steps = plan.steps_per_run(cfg, os.environ)
    extra.update({"max_jobs": max_jobs, "smoke": smoke, "steps": steps,
                  "gpu_type": cfg.gpu_type,
                  "partition": cfg.slurm.partition if cfg.slurm else None,
                  "placement": place.record(),
                  "selection": {"workloads": list(sel.workloads), "dtypes": list(sel.dtypes),
                                "min_scale": sel.min_scale, "max_scale": sel.max_scale,
                                "max_scale_from": origin}})
    draft = record.parse("00000000-000000", Path("-"),
                         record.plan_data("00000000-000000", configs, runs, extra))
    _, errors = submit.prepare(cfg, record.tasks_of(draft, [Slot(r) for r in runs]), False,
                               False)
    if errors:
        submit.report_errors(errors)
        return 1
    print_plan(cfg, draft, origin, steps)
    if dry_run:
        print(f"{PROG}: dry run: nothing was submitted or recorded")
        return 0
    hours = plan.total_gpu_hours(configs, repeats, steps)
    if not yes and sys.stdin.isatty() and not _confirm(
            f"Submit {len(runs)} run(s), about {hours:.1f} GPU-hours?", ask):
        print(f"{PROG}: not submitted; nothing was recorded", file=sys.stderr)
        return 1
    suite = record.create(cfg, record.plan_data("00000000-000000", configs, runs, extra))
    print(f"{PROG}: suite {suite.id}: recorded in {suite.path}", flush=True)
    with record.locked(suite):
        view = [Slot(r) for r in suite.runs]
        now, later = record.to_submit(suite, view, resume=False)
        rc = record.submit_slots(cfg, suite, now)
    _after_submit(suite, len(now), later, rc)
    return rc


def _planned(cfg: ClusterConfig, sel: Selection, repeats: int | None, set_name: str | None,
             scale: int | None, extra: record.SuiteSettings, smoke: bool = False
             ) -> tuple[list[plan.SuiteConfig], Selection, str]:
    """The configurations to run, the selection as recorded and where its largest scale comes
    from; sets extra's repeats (and, with a set, its record; a smoke suite plans a set's rows
    at scales they do not publish too)."""
    if set_name is None:
        if scale is not None:
            raise UsageError(f"--scale {scale} applies with --set only; give --max-scale and "
                             "--min-scale for the published configurations")
        extra["repeats"] = DEFAULT_REPEATS if repeats is None else repeats
        plan.check_selection(cfg, sel)
        if sel.max_scale is not None:
            return plan.published(cfg, sel), sel, "--max-scale"
        gpus, origin = plan.partition_gpus(cfg)
        sel = replace(sel, max_scale=gpus)
        return plan.published(cfg, sel), sel, origin
    if sel != Selection():
        raise UsageError(f"--set {set_name} plans the set's workloads, dtypes and scale; drop "
                         "-w, --dtype, --min-scale and --max-scale (--scale N rehearses at N "
                         "GPUs)")
    the_set = sets.load(set_name)
    if repeats is not None and repeats != the_set.repeats:
        raise UsageError(f"--repeats {repeats}: the {the_set.name} set runs each workload "
                         f"{the_set.repeats} time(s); drop --repeats")
    configs, found = sets.plan_set(cfg, the_set, the_set.scale if scale is None else scale,
                                   os.environ, smoke)
    extra["repeats"], extra["set"] = the_set.repeats, found
    n = found["planned_scale"]
    origin = (f"the {the_set.name} set" if n == the_set.scale else
              f"--scale {n}, a rehearsal of the {the_set.name} set's {the_set.scale}")
    return configs, Selection(min_scale=n, max_scale=n), origin


def set_lines(suite: Suite) -> list[str]:
    """What a suite planned from a set says of it: the set, a rehearsal, what is missing."""
    found = suite.data.get("set")
    if found is None:
        return []
    src = found["source"]
    planned = sum(e["config"] is not None for e in found["entries"])
    lines = [f"Set {found['name']} ({src['repository']} {src['release']}, {src['path']}) on "
             f"{found['gpu_type']}: {planned} of {len(found['entries'])} workload x dtype "
             f"planned at {found['planned_scale']} GPUs"]
    if found["planned_scale"] != found["scale"]:
        lines.append(f"Rehearsal: {found['planned_scale']} GPUs, not the set's "
                     f"{found['scale']}: its verdict accepts nothing")
    return lines + [f"  {line}" for line in sets.missing_lines(found)]


def print_plan(cfg: ClusterConfig, suite: Suite, origin: str, steps: int) -> None:
    configs = suite.configs
    workloads = list(dict.fromkeys(c.workload for c in configs))
    scales = sorted({c.scale for c in configs})
    print(f"Suite plan: {len(configs)} configuration(s) x {suite.repeats} repeat(s) = "
          f"{len(suite.runs)} run(s) of {', '.join(workloads)} on {cfg.gpu_type}, "
          f"{scales[0]} to {scales[-1]} GPUs (at most {suite.data['selection']['max_scale']}: "
          f"{origin})")
    sys.stdout.write(plan.render_plan(configs, suite.repeats, steps))
    for line in set_lines(suite):
        print(line)
    print(plan.estimate_line(configs, suite.repeats, steps))
    if suite.smoke:
        print("Smoke: every job runs the tiny test workload (SMOKE_TEST), not NeMo; the "
              "GPU-hours are what the benchmark would use")
    queue = (f"at most {suite.max_jobs} job(s) of the suite in the queue at once; the others "
             "are held and released, largest first, by `llmb-run suite status --wait` or "
             "`llmb-run suite resume`" if suite.max_jobs else "every job at once")
    print(f"Queue: {queue}; largest scales first")
    placed = suite.placement.record()
    if placed:
        print(f"Placement: {json.dumps(placed)}"
              + (f" (suspects of {suite.data['screen']}: "
                 f"{','.join(suite.data['excluded_suspects']) or 'none'})"
                 if "screen" in suite.data else ""))


def _after_submit(suite: Suite, submitted: int, held: int, rc: int) -> None:
    line = f"{PROG}: suite {suite.id}: {submitted} run(s) submitted"
    if held:
        line += (f", {held} held (at most {suite.max_jobs} in the queue): `llmb-run suite "
                 f"status {suite.id} --wait` releases them as jobs end")
    print(line)
    if rc:
        print(f"{PROG}: suite {suite.id}: a submission failed (above); the run stays held: "
              f"fix the cause and run `llmb-run suite resume {suite.id}`", file=sys.stderr)
    print(f"Next: llmb-run suite status {suite.id} --wait; llmb-run suite report {suite.id} "
          "--check")


# --- status -----------------------------------------------------------------------------------

TABLE = ("WORKLOAD", "SIZE", "DTYPE", "SCALING", "GPUS", "DONE", "RUNNING", "PENDING", "HELD",
         "FAILED", "JOBS")


class RunRow(TypedDict):
    """One run in `suite status --format=json`."""

    run: int
    repeat: int
    state: str
    job_id: str | None
    nodes: str | None
    detail: str | None
    jobs: list[str]


class ConfigRow(plan.ConfigRowKey):
    """One configuration in `suite status --format=json`: its runs by state (record.STATES),
    and each run."""

    done: int
    running: int
    pending: int
    held: int
    failed: int
    unknown: int
    runs: list[RunRow]


def config_rows(suite: Suite, view: list[Slot]) -> list[ConfigRow]:
    """Per configuration: its runs by state, and each run."""
    rows = []
    for index, c in enumerate(suite.configs):
        mine = [s for s in view if s.run.config == index]
        found = record.counts(mine)
        rows.append(ConfigRow(
            key=c.key, workload=c.workload, size=c.size, dtype=c.dtype, scaling=c.scaling,
            scale=c.scale, done=found["done"], running=found["running"],
            pending=found["pending"], held=found["held"], failed=found["failed"],
            unknown=found["unknown"],
            runs=[RunRow(run=s.run.number, repeat=s.run.repeat, state=s.state, job_id=s.job_id,
                         nodes=s.info.nodes if s.info else None, detail=s.why,
                         jobs=[str(a["job_id"]) for a in s.attempts]) for s in mine]))
    return rows


def render_status(suite: Suite, view: list[Slot]) -> str:
    rows = config_rows(suite, view)
    table = [TABLE] + [(r["workload"], r["size"], r["dtype"], r["scaling"], str(r["scale"]),
                        str(r["done"]), str(r["running"] + r["unknown"]), str(r["pending"]),
                        str(r["held"]), str(r["failed"]),
                        ",".join(j for run in r["runs"] for j in ([run["job_id"]]
                                                                 if run["job_id"] else []))
                        or "-") for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(TABLE))]
    created = values.shown(suite.data.get("created"))
    head = (f"suite {suite.id} ({created}): {len(suite.configs)} "
            f"configuration(s) x {suite.repeats} repeat(s)"
            + (", smoke" if suite.smoke else "")
            + (f", at most {suite.max_jobs} job(s) in the queue" if suite.max_jobs else "")
            + "\n")
    body = "".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
                   + "\n" for row in table)
    notes = [f"  run {s.run.number} ({suite.config_of(s.run).label()}, repeat {s.run.repeat}): "
             f"{s.state}, job {s.job_id}: {values.shown(s.why)}"
             for s in view if s.state in ("failed", "unknown")]
    tail = f"{len(view)} run(s): {record.summary(view)}\n"
    if any(s.state == "failed" for s in view):
        tail += f"`llmb-run suite resume {suite.id}` submits the failed runs again\n"
    return head + body + "".join(n + "\n" for n in notes) + tail


def cmd_status(cfg: ClusterConfig, suite_id: str | None, wait: bool, timeout_s: int | None,
               fmt: str) -> int:
    cfg.require_slurm("suite")
    suite = record.load(cfg, suite_id)
    if wait:
        wait_for(cfg, suite, timeout_s)
    view = record.slots(cfg, suite)
    if fmt == "json":
        print(json.dumps({"suite": suite.id, "created": suite.data.get("created"),
                          "repeats": suite.repeats, "max_jobs": suite.max_jobs,
                          "smoke": suite.smoke, "totals": record.counts(view),
                          "configurations": config_rows(suite, view)}, indent=2))
    else:
        sys.stdout.write(render_status(suite, view))
    return 0


def wait_for(cfg: ClusterConfig, suite: Suite, timeout_s: int | None,
             poll_s: float = POLL_S) -> None:
    """Until no run of the suite is queued or held, releasing held runs as room appears."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    with Progress(f"{PROG}: suite {suite.id}") as progress:
        while True:
            with record.locked(suite):
                view = record.slots(cfg, suite, analyze=False)
                now, _ = record.to_submit(suite, view, resume=False)
                rc = record.submit_slots(cfg, suite, now)
            if rc:
                progress.finish("a release failed")
                raise RunError(f"suite {suite.id}: a held run could not be submitted (above); "
                               f"fix the cause and run llmb-run suite resume {suite.id}")
            if now:
                continue
            active = [s for s in view if s.state in ("pending", "running")]
            if not active:
                held = sum(s.state == "held" for s in view)
                progress.finish(record.summary(view))
                if held:
                    print(f"{PROG}: suite {suite.id}: {held} run(s) still held: Slurm could "
                          "not be asked about the jobs in the queue", file=sys.stderr)
                return
            progress.update(record.summary(view))
            if deadline is not None and time.monotonic() > deadline:
                progress.finish("timed out")
                raise RunError(f"suite {suite.id}: {len(active)} job(s) still queued after "
                               f"{timeout_s} s: " + ", ".join(
                                   f"{s.job_id} {s.info.state if s.info else '?'}"
                                   for s in active[:5]))
            time.sleep(poll_s)


# --- resume -----------------------------------------------------------------------------------

def cmd_resume(cfg: ClusterConfig, suite_id: str | None, exclude_suspect: bool,
               dry_run: bool) -> int:
    cfg.require_slurm("suite")
    suite = record.load(cfg, suite_id)
    with record.locked(suite):
        view = record.slots(cfg, suite)
        unknown = [s for s in view if s.state == "unknown" and s.why
                   and s.why.startswith("the analyzer failed")]
        if unknown:
            raise RunError(f"suite {suite.id}: {unknown[0].why}; cannot tell which runs "
                           "succeeded")
        updated = suite
        if exclude_suspect:
            nodes, screen_json = _suspect_nodes(cfg)
            updated = record.with_exclusion(suite, nodes, screen_json)
        now, later = record.to_submit(updated, view, resume=True)
        if not now and not later:
            print(f"{PROG}: suite {suite.id}: nothing to resume ({record.summary(view)})")
            return 0
        for s in now:
            what = (f"job {s.job_id} {s.why}" if s.state == "failed" else "not submitted yet")
            print(f"{PROG}: suite {suite.id}: run {s.run.number} "
                  f"({suite.config_of(s.run).label()}, repeat {s.run.repeat}): {what}",
                  file=sys.stderr)
        if later:
            print(f"{PROG}: suite {suite.id}: {later} more wait for room (at most "
                  f"{suite.max_jobs} in the queue); `llmb-run suite status {suite.id} --wait` "
                  "releases them", file=sys.stderr)
        _, errors = submit.prepare(cfg, record.tasks_of(updated, now), dry_run, False)
        if errors:
            submit.report_errors(errors)
            return 1
        if dry_run:
            print(f"{PROG}: dry run: {len(now)} run(s) would be submitted; nothing was")
            return 0
        if updated is not suite:
            updated = record.save(suite, updated.data)
            print(f"{PROG}: suite {suite.id}: now excluding "
                  f"{updated.placement.exclude} (recorded in {suite.path})", file=sys.stderr)
        rc = record.submit_slots(cfg, updated, now)
    print(f"{PROG}: suite {suite.id}: {len(now)} run(s) submitted again"
          + ("; a submission failed (above)" if rc else ""))
    return rc
