"""What became of the submitted jobs: `status`, `status --wait` and `jobs log`.

State comes from Slurm (llmb.shared.slurmquery.job_infos: squeue, scontrol, sacct) and, once a job
has reached a final state, from the history, where `status` records it (with the nodes it ran
on) so that it survives Slurm forgetting the job. A job that no Slurm command knows any more
is PURGED (finished longer than MinJobAge ago on a cluster without accounting, or the
controller lost its state); its logs still tell how it ended. The outcome of every finished
job (result, step time, verdict of its configuration, reason) comes from the analyzer, asked
once for all the jobs shown.
"""

from __future__ import annotations

import codecs
import collections
import contextlib
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypedDict, cast

from llmb.llmbrun import analyzer
from llmb.llmbrun.clusterconfig import ClusterConfig
from llmb.llmbrun.errors import PROG, RunError
from llmb.llmbrun.history import Scan, SubmitRecord
from llmb.shared import files, progress, slurmquery, values
from llmb.shared.progress import Progress
from llmb.shared.values import ascii_digits

ACTIVE_STATES = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED",
                 "RESIZING", "SIGNALING", "STAGE_OUT", "REQUEUE_HOLD", "REQUEUE_FED"}
POLL_S = 5.0
LAST = 20  # jobs `status` shows without --all
TABLE = (("JOB", "job_id"), ("STATE", "state"), ("RESULT", "result"), ("VERDICT", "verdict"),
         ("STEP_S", "time_mean"), ("WORKLOAD", "workload"), ("SIZE", "size"),
         ("DTYPE", "dtype"), ("GPUS", "scale"), ("REP", "repeat"), ("NODES", "nodes"),
         ("REASON", "reason"))


class StatusRow(TypedDict):
    """One job in `llmb-run status` (a table row, an object of --format=json): Slurm's state
    and the analyzer's result of its log."""

    job_id: str
    state: str
    state_detail: str | None
    result: str | None  # Success | Failed | Invalid
    verdict: str | None
    reason: str | None
    suspect_nodes: list[str] | None
    time_mean: float | None
    pct_of_reference: float | None
    nodes: str | None
    workload: str | None
    size: str | None
    dtype: str | None
    scale: int | None
    repeat: int | None
    placement: dict[str, object]
    rerun_of: str | None
    experiment_dir: str | None
    submitted: str | None


def selected(cfg: ClusterConfig, show_all: bool, job_ids: list[str] | None = None
             ) -> list[SubmitRecord]:
    """Submit records: the given jobs, every one (--all) or the last 20. The history is read
    as a stream: only the records returned are held."""
    scan = Scan()
    wanted = set(job_ids) if job_ids else None
    subs: collections.deque[SubmitRecord] = collections.deque(
        maxlen=None if show_all or wanted else LAST)
    try:
        for rec in cfg.history.stream(scan, lambda r: r.get("type") == "submit"):
            if wanted is None or rec["job_id"] in wanted:
                subs.append(cast(SubmitRecord, rec))
    except OSError as exc:
        raise RunError(f"cannot read {cfg.history.path}: {exc.strerror}") from None
    problem = scan.problem(cfg.history.path)
    if problem:
        print(f"{PROG}: warning: {problem}", file=sys.stderr)
    for sub in subs:  # a hand-edited record: a run directory that is not a path is none
        if not isinstance(sub.get("experiment_dir"), str) or \
                values.control_characters(str(sub["experiment_dir"])):
            sub["experiment_dir"] = None
    if job_ids:
        return only(cfg, list(subs), job_ids)
    return list(subs)


def only(cfg: ClusterConfig, subs: list[SubmitRecord], job_ids: list[str]
         ) -> list[SubmitRecord]:
    """The submit records of these jobs; RunError naming the first job not recorded."""
    known = {r["job_id"] for r in subs}
    unknown = [j for j in job_ids if j not in known]
    if unknown:
        raise RunError(f"job {values.shown(unknown[0])} is not in {cfg.history.path}; "
                       "`llmb-run status --all` lists the recorded jobs")
    return [r for r in subs if r["job_id"] in set(job_ids)]


def states(cfg: ClusterConfig, subs: list[SubmitRecord]) -> dict[str, slurmquery.JobInfo]:
    """Each job's state: remembered final states first, then Slurm; final ones are recorded."""
    history = cfg.history
    try:
        known = history.final_states({r["job_id"] for r in subs})
    except OSError:
        known = {}  # selected() said why the history cannot be read
    out: dict[str, slurmquery.JobInfo] = {}
    ask: dict[str, str] = {}
    for rec in subs:
        job = rec["job_id"]
        if job in known:
            k = known[job]
            out[job] = slurmquery.JobInfo(job, str(k["state"]), nodes=k.get("nodes"),
                                     source="history", detail=k.get("detail"))
        else:
            ask[job] = str(rec.get("experiment") or "")
    if ask and cfg.cluster_type == "slurm":
        for job, info in slurmquery.job_infos(list(ask), ask).items():
            out[job] = info
            if info.final and info.settled:
                with contextlib.suppress(OSError):  # read-only history: asked again next time
                    history.append({"type": "state", "job_id": job, "state": info.state,
                                    "nodes": info.nodes, "detail": info.detail})
    for job in ask:
        out.setdefault(job, slurmquery.JobInfo(job, slurmquery.UNKNOWN,
                                          detail=f"not a Slurm job ({cfg.cluster_type})"))
    return out


def status_rows(cfg: ClusterConfig, show_all: bool, job_ids: list[str] | None = None
                ) -> list[StatusRow]:
    subs = selected(cfg, show_all, job_ids)
    infos = states(cfg, subs)
    done = {r["job_id"]: str(r.get("experiment_dir") or "") for r in subs
            if infos[r["job_id"]].state not in ACTIVE_STATES}
    found = analyzer.analyze_runs(done)
    rows: list[StatusRow] = []
    for rec in subs:
        job = rec["job_id"]
        info = infos[job]
        result = found.result(job) if job in done else None
        reason = result.get("reason") if result else None
        if not reason and info.state in ACTIVE_STATES and info.reason:
            reason = f"Slurm: {info.reason}"
        rows.append({
            "job_id": job, "state": info.state, "state_detail": info.detail,
            "result": result["status"] if result else None,
            "verdict": found.verdict(job) if result else None,
            "reason": reason,
            "suspect_nodes": result.get("suspect_nodes") if result else None,
            "time_mean": result.get("time_mean") if result else None,
            "pct_of_reference": result.get("pct_of_reference") if result else None,
            "nodes": info.nodes, "workload": rec.get("workload"), "size": rec.get("size"),
            "dtype": rec.get("dtype"), "scale": rec.get("scale"), "repeat": rec.get("repeat"),
            "placement": dict(rec.get("placement") or {}), "rerun_of": rec.get("rerun_of"),
            "experiment_dir": rec.get("experiment_dir"), "submitted": rec.get("time"),
        })
    if done and found.error:
        print(f"{PROG}: warning: the analyzer failed ({found.error}); results are not shown",
              file=sys.stderr)
    return rows


def _cell(value: object) -> str:
    if value is None or value == "" or value == []:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}"
    return values.shown(" ".join(str(value).split()))  # Slurm's words, a log's reason


def render_table(rows: list[StatusRow]) -> str:
    table = [tuple(h for h, _ in TABLE)]
    table += [tuple(_cell(r.get(k)) for _, k in TABLE) for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(TABLE) - 1)]
    return "".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False))
                   + "  " + row[-1] + "\n" for row in table)


def cmd_status(cfg: ClusterConfig, show_all: bool, fmt: str, wait: bool = False,
               job_ids: list[str] | None = None, timeout_s: float | None = None) -> int:
    if wait:
        wait_for(cfg, selected(cfg, show_all, job_ids), timeout_s)
    rows = status_rows(cfg, show_all, job_ids)
    if fmt == "json":
        print(json.dumps({"jobs": rows}, indent=2))
    elif not rows:
        print(f"no submissions recorded in {cfg.history.path}")
    else:
        sys.stdout.write(render_table(rows))
    return 0


def wait_for(cfg: ClusterConfig, subs: list[SubmitRecord], timeout_s: float | None = None,
             poll_s: float = POLL_S, sleep: Callable[[float], None] = time.sleep) -> None:
    """Block (with progress) until every job has left the active states."""
    jobs = [r["job_id"] for r in subs]
    if not jobs:
        return
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    label = f"job {jobs[0]}" if len(jobs) == 1 else f"{len(jobs)} jobs"
    with Progress(f"{PROG}: waiting for {label}") as progress:
        while True:
            infos = states(cfg, subs)
            active = [i for i in infos.values() if i.state in ACTIVE_STATES]
            if not active:
                progress.finish("all ended" if len(jobs) > 1 else infos[jobs[0]].state)
                return
            progress.update(summary(list(infos.values())))
            if deadline is not None and time.monotonic() > deadline:
                progress.finish("timed out")
                raise RunError(f"{len(active)} job(s) still active after {timeout_s:.0f} s: "
                               + ", ".join(f"{i.job_id} {i.state}" for i in active[:5]))
            sleep(poll_s)


def summary(infos: list[slurmquery.JobInfo]) -> str:
    """`RUNNING on node2`, or `2 RUNNING, 1 PENDING (Resources)` for several jobs."""
    if len(infos) == 1:
        i = infos[0]
        where = f" on {i.nodes}" if i.nodes and i.state != "PENDING" else ""
        why = f" ({i.reason})" if i.state == "PENDING" and i.reason else ""
        return f"{i.state}{where}{why}"
    counts: dict[str, int] = {}
    for i in infos:
        counts[i.state] = counts.get(i.state, 0) + 1
    return ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))


# --- jobs log ---------------------------------------------------------------------------------

def job_logs(rec: SubmitRecord, batch: bool = False) -> list[Path]:
    """The job's training logs (log-*_<job>_<restart>.out, by restart), or its batch output."""
    run_dir = rec.get("experiment_dir")
    if not run_dir or not Path(run_dir).is_dir():
        return []
    job = rec["job_id"]
    pattern = f"sbatch_*_{job}.out" if batch else f"log-*_{job}_*.out"
    found = [p for p in Path(run_dir).glob(f"*/{pattern}") if p.is_file()]

    def restart(p: Path) -> int:
        tail = p.stem.rsplit("_", 1)[-1]
        return int(tail) if ascii_digits(tail) else 0

    return sorted(found, key=lambda p: (restart(p), p.name))


def cmd_log(cfg: ClusterConfig, job: str, follow: bool, batch: bool,
            poll_s: float = 1.0, out=None) -> int:
    out = out or sys.stdout
    rec = selected(cfg, True, [job])[-1]  # a job id Slurm reused: the latest submission
    what = "batch output" if batch else "log"
    if not follow:
        logs = job_logs(rec, batch)
        if not logs:
            info = states(cfg, [rec])[job]
            raise RunError(f"job {job} has no {what} yet ({info.state}) under "
                           f"{rec.get('experiment_dir') or 'its experiment directory'}")
        for path in logs:
            _copy(path, _Reader(), out)
        return 0
    return _follow(cfg, rec, batch, poll_s, out)


class _Reader:
    """Where printing a log got to: a byte offset and a UTF-8 decoder that keeps a character
    split across two reads whole."""

    def __init__(self) -> None:
        self.offset = 0
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")


def _copy(path: Path, reader: _Reader, out) -> None:
    """Write what path holds past reader.offset to out (a regular file only: a FIFO or a
    device named like a log is refused, never waited on)."""
    try:
        fh = files.open_regular_file(path)
    except files.FileRefused as exc:
        raise RunError(str(exc)) from None
    with fh:
        fh.seek(reader.offset)
        while chunk := fh.read(1 << 16):
            out.write(reader.decoder.decode(chunk))
            reader.offset += len(chunk)
    out.flush()


def _follow(cfg: ClusterConfig, rec: SubmitRecord, batch: bool, poll_s: float, out) -> int:
    """Print the log as it grows until the job has ended (Ctrl-C stops following)."""
    job = rec["job_id"]
    readers: dict[Path, _Reader] = {}
    next_check = 0.0
    announced = False
    try:
        # llmb.shared.progress: a live line while it is pending
        wait_for_log(cfg, rec, batch, poll_s)
        while True:
            for path in job_logs(rec, batch):
                _copy(path, readers.setdefault(path, _Reader()), out)
            if time.monotonic() >= next_check:
                next_check = time.monotonic() + max(poll_s, POLL_S)
                info = states(cfg, [rec])[job]
                if info.state == slurmquery.UNKNOWN:
                    print(f"{PROG}: stopped following job {job}: {values.shown(info.detail)}",
                          file=sys.stderr)
                    return 1
                if info.state not in ACTIVE_STATES:
                    for path in job_logs(rec, batch):  # what it wrote before it ended
                        _copy(path, readers.setdefault(path, _Reader()), out)
                    print(f"{PROG}: job {job} ended: {values.shown(info.state)}",
                          file=sys.stderr)
                    return 0
                if not readers and not announced:
                    print(f"{PROG}: job {job} is {values.shown(summary([info]))}; waiting for "
                          "its log",
                          file=sys.stderr)
                    announced = True
            time.sleep(poll_s)
    except KeyboardInterrupt:
        return 130


def wait_for_log(cfg: ClusterConfig, rec: SubmitRecord, batch: bool, poll_s: float) -> None:
    """Until the job has a log or has ended: its state as progress (llmb.shared.progress.wait)."""
    job = rec["job_id"]
    next_ask, said = 0.0, ""

    def status() -> str | None:
        nonlocal next_ask, said
        if job_logs(rec, batch):
            return None
        if time.monotonic() >= next_ask:  # Slurm is asked every POLL_S at most
            next_ask = time.monotonic() + max(poll_s, POLL_S)
            info = states(cfg, [rec])[job]
            if info.state not in ACTIVE_STATES:
                return None
            said = f"{summary([info])}; waiting for its log"
        return said

    progress.wait(f"{PROG}: job {job}", status, poll_s)
