"""A suite: the published configurations of an install run `repeats` times, recorded under an
id, so that its state, its verdicts and what is missing can be asked of one name.

The record is $LLMB_INSTALL/suites/<id>/suite.json (0600), written once before the first
submission: the plan (configurations, runs in submission order, repeats, --max-jobs, smoke,
placement). What was submitted is not kept there but in the history, the one record of every
submission: each submit record of a suite's run carries `"suite": <id>` and `"suite_run": <n>`.
A run's latest submission is the one that counts; a run with none is *held*. The id is the UTC
time of `suite submit` (YYYYmmdd-HHMMSS, `-2`, `-3`, ... when two start in one second); the
newest is the default wherever an id is optional.

A run's state comes from its latest job: Slurm's state (llmb.llmbrun.status, remembered in the
history once final) and, once the job ended, the analyzer's result (llmb.llmbrun.report):

    held     not submitted yet (waiting for room under --max-jobs, or a failed submission)
    pending  in Slurm's queue, not started        running  started, not ended
    done     ended, and the analyzer says Success (its step times count)
    failed   ended otherwise: cancelled, failed, timed out, Failed/Invalid, no log, purged
    unknown  Slurm (or the analyzer) could not be asked

--max-jobs K keeps at most K of the suite's jobs in Slurm's queue (pending, running, or
unknown, which counts as queued). The others stay held in the suite, and `suite status --wait`
and `suite resume` release them, largest first, as earlier jobs end. This is chosen over Slurm
job dependencies because a dependent job is still a job in the queue: on a shared partition it
shows in everyone's squeue, counts against per-user submit limits, and a dependency on a job
Slurm has already forgotten (MinJobAge) is refused by sbatch. Held runs are also validated and
placed when they are released, so `suite resume --exclude-suspect` reaches them. The cost: a
suite with --max-jobs needs `suite status --wait` (or repeated `suite resume`) to go on.

Releases hold an exclusive lock on suites/<id>/.lock, so two `status --wait` never submit one
run twice.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated, TypedDict

from llmb import layout
from llmb.launch import placement
from llmb.launch.placement import Placement, PlacementError, PlacementRecord
from llmb.llmbrun import analyzer, rerun, status, submit
from llmb.llmbrun.clusterconfig import ClusterConfig
from llmb.llmbrun.errors import RunError
from llmb.llmbrun.history import SubmitRecord
from llmb.llmbrun.suite.plan import NAME_LEN, ConfigRecord, Run, SuiteConfig
from llmb.llmbrun.suite.sets import SetRecord
from llmb.llmbrun.tasks import Task
from llmb.shared import clock, files, records, slurmquery, values
from llmb.shared.errors import UsageError
from llmb.shared.records import Bound

SCHEMA = 1
ID_RE = re.compile(r"[0-9]{8}-[0-9]{6}(?:-([1-9][0-9]{0,3}))?")
ID_EXAMPLE = "20250411-144845"
MAX_RECORD_BYTES = 16 << 20  # a suite of thousands of runs is well under 1 MB
LOCK_FILE = ".lock"
PENDING_STATES = {"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED"}
STATES = ("done", "running", "pending", "held", "failed", "unknown")
QUEUED = ("pending", "running", "unknown")  # what counts against --max-jobs
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]*")  # a workload, size or dtype
MAX_CONFIGS = 10_000  # every published configuration of every recipe is some hundreds
MAX_RUNS = 100_000


Name = Annotated[str, Bound(text=NAME_LEN)]


class RunRecord(TypedDict):
    """One run of suite.json, in submission order."""

    run: int
    config: int  # an index into configurations
    repeat: int


class SelectionRecord(TypedDict):
    """What `suite submit` was asked for (plan.Selection), and where the largest scale came
    from (--max-scale, or the partition's GPUs)."""

    workloads: list[Name]
    dtypes: list[Name]
    min_scale: int
    max_scale: int | None
    max_scale_from: Name


class _SettingsKeys(TypedDict):
    repeats: int


class SuiteSettings(_SettingsKeys, total=False):
    """What `suite submit` records beside the plan (plan_data's `extra`)."""

    max_jobs: int | None
    smoke: bool
    steps: int  # MAX_STEPS of each run, for the GPU-hours
    gpu_type: Name
    partition: Name | None
    placement: PlacementRecord  # Placement.record()
    selection: SelectionRecord
    excluded_suspects: Annotated[list[Name], Bound(items=placement.MAX_HOSTS)]
    screen: str  # the screen.json the suspects came from
    set: SetRecord  # planned from a set (--set): its workload x dtype entries


class _SuiteKeys(_SettingsKeys):
    schema: int
    id: Name  # llmb.shared.clock.stamp(), `-2`, `-3` ...
    configurations: Annotated[list[ConfigRecord], Bound(items=MAX_CONFIGS)]
    runs: Annotated[list[RunRecord], Bound(items=MAX_RUNS)]


class SuiteRecord(_SuiteKeys, SuiteSettings, total=False):
    """suite.json, written once by `suite submit` (and by `suite resume --exclude-suspect`);
    every command that reads it back holds it to this type first (`parse`)."""

    created: Name  # llmb.shared.clock.iso()


@dataclass(frozen=True)
class Suite:
    id: str
    path: Path  # its suite.json
    data: SuiteRecord
    configs: list[SuiteConfig]
    runs: list[Run]
    placement: Placement

    @property
    def repeats(self) -> int:
        return int(self.data["repeats"])

    @property
    def max_jobs(self) -> int | None:
        value = self.data.get("max_jobs")
        return None if value is None else int(value)

    @property
    def smoke(self) -> bool:
        return bool(self.data.get("smoke"))

    def config_of(self, run: Run) -> SuiteConfig:
        return self.configs[run.config]

    def task(self, run: Run) -> Task:
        c = self.config_of(run)
        env = {"SMOKE_TEST": "true"} if self.smoke else {}
        return Task(c.workload, c.size, c.dtype, c.scale, False, run.repeat, env,
                    self.placement, c.scaling)


def plan_data(suite_id: str, configs: list[SuiteConfig], runs: list[Run],
              extra: SuiteSettings) -> SuiteRecord:
    """suite.json's content (`extra`: repeats, max_jobs, smoke, placement, selection, ...)."""
    return {"schema": SCHEMA, "id": suite_id, "created": clock.iso(), **extra,
            "configurations": [c.to_json() for c in configs],
            "runs": [{"run": r.number, "config": r.config, "repeat": r.repeat} for r in runs]}


# --- ids and the record -----------------------------------------------------------------------

def check_id(text: str) -> str:
    """A suite id as given on the command line; UsageError for anything else."""
    if not ID_RE.fullmatch(text):
        raise UsageError(f"suite id {values.shown(text)} is not a suite id (the time it was "
                         f"submitted, like {ID_EXAMPLE}); `llmb-run suite status` shows the "
                         "newest")
    return text


def _order(suite_id: str) -> tuple[str, int]:
    found = ID_RE.fullmatch(suite_id)
    return suite_id[:15], int(found.group(1) or 1) if found else 0


def suite_ids(tree: layout.Install) -> list[str]:
    """The install's suites, oldest first (those whose folder holds a suite.json)."""
    if not tree.suites.is_dir():
        return []
    found = [p.name for p in tree.suites.iterdir()
             if ID_RE.fullmatch(p.name) and (p / layout.SUITE_FILE).is_file()]
    return sorted(found, key=_order)


def load(cfg: ClusterConfig, suite_id: str | None) -> Suite:
    """The suite of this id (None: the newest); RunError when there is none."""
    known = suite_ids(cfg.tree)
    if suite_id is None:
        if not known:
            raise RunError(f"no suite yet under {cfg.tree.suites}; start one with llmb-run "
                           "suite submit")
        suite_id = known[-1]
    check_id(suite_id)
    path = cfg.tree.suite(suite_id) / layout.SUITE_FILE
    try:
        raw = files.read_bounded(path, MAX_RECORD_BYTES)
    except files.FileRefused as exc:
        if exc.missing and not known:
            raise RunError(f"no suite {suite_id}: none yet under {cfg.tree.suites}; start one "
                           "with llmb-run suite submit") from None
        if exc.missing:
            raise RunError(f"no suite {suite_id} in {cfg.tree.suites} (the newest: "
                           f"{', '.join(known[-5:])})") from None
        raise RunError(f"suite record {values.shown(path)} {exc.reason}") from None
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        data = None  # parse names it
    try:
        return parse(suite_id, path, data)
    except (ValueError, PlacementError) as exc:
        raise RunError(f"suite record {values.shown(path)} cannot be used ({exc}); it was "
                       "changed or damaged: start a new suite with llmb-run suite submit") \
            from None


def parse(suite_id: str, path: Path, data: object) -> Suite:
    """A suite.json's content, held to SuiteRecord; ValueError (one line naming the field)
    or PlacementError when it is not one."""
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    try:
        record = records.check(SuiteRecord, data)
    except records.BadRecord as exc:
        raise ValueError(exc.problem) from None
    if record["schema"] != SCHEMA or record["id"] != suite_id:
        raise ValueError(f"schema {record['schema']} of suite {values.brief(record['id'])}, "
                         f"not schema {SCHEMA} of suite {suite_id}")
    for i, c in enumerate(record["configurations"]):
        for key in ("workload", "size", "dtype"):
            if not NAME_RE.fullmatch(c[key]):
                raise ValueError(f"configurations[{i}].{key} is {values.brief(c[key])}, not a "
                                 "name (letters, digits and _ . + -)")
    configs = [SuiteConfig(c["workload"], c["size"], c["dtype"], c["scaling"],
                           _whole(f"configurations[{i}].scale", c["scale"]), c["reference"],
                           _whole(f"configurations[{i}].time_limit_s", c["time_limit_s"]))
               for i, c in enumerate(record["configurations"])]
    runs = [Run(r["run"], r["config"], _whole(f"runs[{i}].repeat", r["repeat"]))
            for i, r in enumerate(record["runs"])]
    if not configs or any(not 0 <= r.config < len(configs) for r in runs) \
            or [r.number for r in runs] != list(range(1, len(runs) + 1)):
        raise ValueError("runs are not numbered 1, 2, ... over its configurations")
    entries = record["set"]["entries"] if "set" in record else []
    if any(e["config"] is not None and not 0 <= e["config"] < len(configs) for e in entries):
        raise ValueError("set.entries name a configuration the suite does not have")
    _whole("repeats", record["repeats"])
    if record.get("max_jobs") is not None:
        _whole("max_jobs", record.get("max_jobs"))
    given = record.get("placement", {})
    place = placement.build(nodelist=given.get("nodelist"), exclude=given.get("exclude"),
                            reservation=given.get("reservation"), qos=given.get("qos"),
                            segment=given.get("segment"), slurm_args=given.get("slurm_args", ()))
    return Suite(suite_id, path, record, configs, runs, place)


def _whole(field: str, value: object) -> int:
    if not isinstance(value, int) or value < 1:
        raise ValueError(f"{field} is {values.brief(value)}, not a whole number from 1")
    return value


def create(cfg: ClusterConfig, content: SuiteRecord) -> Suite:
    """A new suite folder under a fresh id, with its suite.json (0600)."""
    stamp = clock.stamp()
    cfg.tree.suites.mkdir(parents=True, exist_ok=True)
    for n in range(1, 10000):
        suite_id = stamp if n == 1 else f"{stamp}-{n}"
        folder = cfg.tree.suite(suite_id)
        try:
            folder.mkdir(mode=0o700)
        except FileExistsError:
            continue
        data: SuiteRecord = {**content, "id": suite_id}
        path = folder / layout.SUITE_FILE
        files.write_private(path, json.dumps(data, indent=2) + "\n")
        return parse(suite_id, path, data)
    raise RunError(f"cannot name a new suite under {cfg.tree.suites}: every id of {stamp} "
                   "is taken")


def save(suite: Suite, data: SuiteRecord) -> Suite:
    """Replace the suite's record (resume --exclude-suspect changes its placement)."""
    files.write_private(suite.path, json.dumps(data, indent=2) + "\n")
    return parse(suite.id, suite.path, data)


@contextlib.contextmanager
def locked(suite: Suite) -> Iterator[None]:
    """An exclusive lock on the suite while its held runs are released."""
    fd = os.open(suite.path.parent / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


# --- the state of each run --------------------------------------------------------------------

@dataclass
class Slot:
    """One run of the suite and what became of it."""

    run: Run
    attempts: list[SubmitRecord] = field(default_factory=list)
    state: str = "held"
    why: str | None = None
    info: slurmquery.JobInfo | None = None
    result: analyzer.AnalyzedRun | None = None

    @property
    def job_id(self) -> str | None:
        return str(self.attempts[-1]["job_id"]) if self.attempts else None


def submissions(cfg: ClusterConfig, suite: Suite) -> dict[int, list[SubmitRecord]]:
    """The suite's submit records by run number, oldest first."""
    out: dict[int, list[SubmitRecord]] = {}
    for rec in status.selected(cfg, True):
        number = rec.get("suite_run")
        if rec.get("suite") == suite.id and isinstance(number, int) \
                and not isinstance(number, bool):
            out.setdefault(number, []).append(rec)
    return out


def _classify(slot: Slot, analysis: analyzer.RunAnalysis | None) -> None:
    info = slot.info
    assert info is not None
    if info.state in PENDING_STATES:
        slot.state, slot.why = "pending", info.reason
    elif info.state in status.ACTIVE_STATES:
        slot.state, slot.why = "running", info.nodes
    elif info.state == slurmquery.UNKNOWN:
        slot.state, slot.why = "unknown", info.detail
    elif analysis is None:
        slot.state, slot.why = "ended", info.state
    elif analysis.error:
        slot.state, slot.why = "unknown", f"the analyzer failed: {analysis.error}"
    else:
        result = slot.result = analysis.result(str(slot.job_id))
        outcome = result.get("status") if result else None
        reason = result.get("reason") if result else None
        if outcome == "Success":
            slot.state, slot.why = "done", reason
            return
        why = rerun.failure(info, result) or info.state + (f"/{outcome}" if outcome else "")
        if result is None and info.state != slurmquery.PURGED:
            why += ", no training log"
        slot.state, slot.why = "failed", why + (f": {reason}" if reason else "")


def slots(cfg: ClusterConfig, suite: Suite, analyze: bool = True) -> list[Slot]:
    """Every run of the suite with its state. Without `analyze`, an ended run is `ended`
    (enough to count what is in the queue, without running the analyzer)."""
    subs = submissions(cfg, suite)
    out = [Slot(run, subs.get(run.number, [])) for run in suite.runs]
    latest = [s.attempts[-1] for s in out if s.attempts]
    infos = status.states(cfg, latest) if latest else {}
    for slot in out:
        if slot.attempts:
            slot.info = infos[str(slot.job_id)]
    ended = {str(s.job_id): s.attempts[-1].get("experiment_dir") for s in out
             if s.info is not None and s.info.state not in status.ACTIVE_STATES
             and s.info.state != slurmquery.UNKNOWN and status.job_logs(s.attempts[-1])}
    analysis = analyzer.analyze_runs(ended) if analyze and ended else (
        analyzer.RunAnalysis() if analyze else None)
    classify(out, analysis)
    return out


def classify(view: list[Slot], analysis: analyzer.RunAnalysis | None) -> None:
    """Each submitted run's state from its job's Slurm state and the analyzer's result
    (None: not analyzed, an ended run is `ended`)."""
    for slot in view:
        if slot.info is not None:
            _classify(slot, analysis)


def ended_jobs(view: list[Slot]) -> dict[str, str | None]:
    """Every job of the suite that ended and wrote a training log, the latest and the earlier
    attempts of each run: job id -> its run directory."""
    out: dict[str, str | None] = {}
    for slot in view:
        for rec in slot.attempts:
            if (rec is not slot.attempts[-1] or slot.state not in ("pending", "running",
                                                                    "unknown")) \
                    and status.job_logs(rec):
                out[str(rec["job_id"])] = rec.get("experiment_dir")
    return out


def counts(view: list[Slot]) -> dict[str, int]:
    found = {s: 0 for s in (*STATES, "ended")}
    for slot in view:
        found[slot.state] += 1
    return found


def summary(view: list[Slot]) -> str:
    """`3 done, 1 running, 2 held` (the states that have runs)."""
    found = counts(view)
    return ", ".join(f"{n} {s}" for s, n in found.items() if n) or "no runs"


# --- releasing held (and, for resume, failed) runs ----------------------------------------------

def room(suite: Suite, view: list[Slot]) -> int | None:
    """How many more of the suite's jobs may enter the queue (None: no limit)."""
    if suite.max_jobs is None:
        return None
    return max(0, suite.max_jobs - sum(s.state in QUEUED for s in view))


def to_submit(suite: Suite, view: list[Slot], resume: bool) -> tuple[list[Slot], int]:
    """The runs to submit now, in the suite's order (held ones; with `resume` failed ones
    too), and how many more wait for room under --max-jobs."""
    wanted = [s for s in view if s.state == "held" or (resume and s.state == "failed")]
    limit = room(suite, view)
    now = wanted if limit is None else wanted[:limit]
    return now, len(wanted) - len(now)


def tasks_of(suite: Suite, chosen: list[Slot]) -> list[Task]:
    return [suite.task(s.run) for s in chosen]


def submit_slots(cfg: ClusterConfig, suite: Suite, chosen: list[Slot]) -> int:
    """Submit these runs (validated first, all of them); 0, or 1 when any failed (those stay
    held, or failed, for the next release)."""
    if not chosen:
        return 0
    return submit.run_tasks(cfg, tasks_of(suite, chosen), False, False,
                            [s.job_id for s in chosen],
                            [{"suite": suite.id, "suite_run": s.run.number} for s in chosen])


def with_exclusion(suite: Suite, nodes: tuple[str, ...], screen: Path | None) -> Suite:
    """The suite with these suspect nodes added to its --exclude (not saved)."""
    place, new = rerun.excluding(suite.placement, nodes, f"suite {suite.id}")
    if not new:
        return suite
    data = SuiteRecord(**suite.data)
    data.update({"placement": place.record(),
                 "excluded_suspects": [*suite.data.get("excluded_suspects", []), *new]})
    if screen is not None:
        data["screen"] = str(screen)
    return replace(suite, data=data, placement=place)
