"""Read-only questions to Slurm: partitions and GRES (sinfo), accounts (sacctmgr), job states.

Every query returns None (or raises SlurmUnavailable with the reason) when the command is
missing, fails or times out, so that callers can fall back to asking the user. Job state comes
from squeue (`-t all`: finished jobs too, for MinJobAge seconds after they end), then
`scontrol show job`, then sacct when accounting exists: clusters without accounting still
report running jobs, and a job none of them knows any more is PURGED, not an error.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypedDict

from llmb.shared.errors import LlmbError
from llmb.shared.values import ascii_digits

TIMEOUT_S = 20
TERMINAL_STATES = {
    "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED",
    "BOOT_FAIL", "DEADLINE", "SPECIAL_EXIT", "REVOKED",
}


class SlurmUnavailable(LlmbError):
    """A Slurm command is missing or failed; the message says which and why."""


@dataclass(frozen=True)
class Partition:
    name: str
    default: bool
    gres: str  # "gpu:8", "gpu:h100:8(S:0-1)" or "" when none
    available: bool = True

    @property
    def gpus(self) -> int:
        """GPUs per node from the GRES string (0 when the partition has none)."""
        for item in self.gres.split(","):
            m = re.match(r"gpu(?::[A-Za-z0-9_.-]+)?:(\d+)", item)
            if m:
                return int(m.group(1))
        return 0

    @property
    def gpu_model(self) -> str | None:
        m = re.match(r"gpu:([A-Za-z][A-Za-z0-9_.-]*):\d+", self.gres)
        return m.group(1).lower() if m else None


# Errors that say the controller (or the accounting database) is busy or unreachable for the
# moment, in Slurm's words: asked again after a pause. Anything else (an unknown job, no
# accounting, a bad option) is an answer, not a failure to get one.
TRANSIENT = ("Socket timed out", "Unable to contact slurm controller", "Connection refused",
             "Communication connection failure", "Resource temporarily unavailable",
             "Zero Bytes were transmitted", "backup controller in standby", "Connection reset",
             "Transport endpoint is not connected", "Problem talking to the database",
             "did not answer within", "try again")
TRIES = 3
BACKOFF_S = (1.0, 3.0)  # the pause before the 2nd and the 3rd try


def _run_once(argv: list[str], both: bool) -> str:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, errors="replace",
                              timeout=TIMEOUT_S, check=False, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise SlurmUnavailable(f"{argv[0]} did not answer within {TIMEOUT_S} s") from None
    except OSError as exc:
        raise SlurmUnavailable(f"{argv[0]} could not run: {exc.strerror or exc}") from None
    if proc.returncode != 0:
        why = (proc.stderr or proc.stdout).strip().splitlines()
        raise SlurmUnavailable(f"{argv[0]} failed: {why[0] if why else f'exit {proc.returncode}'}")
    return proc.stdout + (proc.stderr if both else "")


def transient(message: str) -> bool:
    low = message.lower()
    return any(t.lower() in low for t in TRANSIENT)


def _run(argv: list[str], both: bool = False, sleep: Callable[[float], None] = time.sleep
         ) -> str:
    """A Slurm command's standard output (`both`: and its standard error, for commands that
    print their answer there in some Slurm releases). A busy or unreachable controller (a
    timeout, "Socket timed out", "Unable to contact slurm controller") is asked TRIES times,
    with a pause between; then SlurmUnavailable says what failed and how often."""
    if shutil.which(argv[0]) is None:
        raise SlurmUnavailable(f"{argv[0]} is not installed")
    for attempt in range(TRIES):
        try:
            return _run_once(argv, both)
        except SlurmUnavailable as exc:
            if not transient(str(exc)):
                raise
            if attempt + 1 == TRIES:
                raise SlurmUnavailable(f"{exc} (asked {TRIES} times)") from None
            sleep(BACKOFF_S[min(attempt, len(BACKOFF_S) - 1)])
    raise AssertionError("unreachable")


def partitions() -> list[Partition]:
    out = _run(["sinfo", "-h", "-o", "%P|%G|%a"])
    found: dict[str, Partition] = {}
    for line in out.splitlines():
        if line.count("|") != 2:
            continue
        name, gres, avail = line.split("|")
        default = name.endswith("*")
        name = name.rstrip("*")
        gres = "" if gres in ("(null)", "") else gres
        old = found.get(name)
        if old is None or (not old.gres and gres):
            found[name] = Partition(name, default, gres, avail == "up")
    return list(found.values())


def accounts(user: str) -> list[str]:
    out = _run(["sacctmgr", "-n", "-P", "show", "associations", f"user={user}",
                "format=account"])
    names = [line.strip() for line in out.splitlines() if line.strip()]
    if not names:
        raise SlurmUnavailable(f"sacctmgr lists no account for user {user}")
    return list(dict.fromkeys(names))


# Not Slurm states: PURGED when the controller answered and no longer knows the job (MinJobAge
# passed, or its state was lost) and accounting has no record either (or there is none);
# UNKNOWN when Slurm could not be asked.
PURGED = "PURGED"
UNKNOWN = "UNKNOWN"
_INVALID_JOB = "Invalid job id"
_NO_ACCOUNTING = ("accounting storage is disabled", "not running a supported accounting")


@dataclass(frozen=True)
class JobInfo:
    job_id: str
    state: str  # RUNNING, COMPLETED, ... or PURGED / UNKNOWN
    name: str | None = None
    nodes: str | None = None  # Slurm's node list (hostlist form) once allocated
    reason: str | None = None  # why it is pending
    source: str = ""  # squeue, scontrol, sacct, or "" when none knew it
    detail: str | None = None  # why PURGED / UNKNOWN, one line
    settled: bool = True  # PURGED: every source gave a definite answer (safe to remember)

    @property
    def final(self) -> bool:
        return self.state in TERMINAL_STATES or self.state == PURGED


def _clean(value: str | None) -> str | None:
    value = (value or "").strip()
    return None if value in ("", "(null)", "None", "None assigned", "n/a") else value


def _matches(name: str | None, expected: str | None) -> bool:
    """A job id Slurm reuses (after its state was cleared) belongs to another job: our job's
    name contains its experiment name."""
    return not expected or not name or expected in name


# A Slurm job id: digits, with an array task (_N) or a heterogeneous job component (+N).
JOB_ID = re.compile(r"[0-9]{1,12}(?:_[0-9]{1,9}|\+[0-9]{1,4})?")
BATCH = 500  # job ids per squeue / sacct call (one argument: well below the kernel's limit)
SCONTROL_EACH = 10  # missing jobs asked one by one; more: one `scontrol show job` for all


def _batches(ids: list[str]) -> list[list[str]]:
    return [ids[i:i + BATCH] for i in range(0, len(ids), BATCH)]


def _from_squeue(ids: list[str], names: dict[str, str], found: dict[str, JobInfo]) -> str | None:
    """Fill `found` from squeue, BATCH ids per call; why Slurm could not be asked, or None."""
    for batch in _batches(ids):
        try:
            out = _run(["squeue", "-h", "-t", "all", "-j", ",".join(batch), "-o",
                        "%i|%T|%j|%N|%r"])
        except SlurmUnavailable as exc:
            if _INVALID_JOB in str(exc):
                continue
            return str(exc)
        for line in out.splitlines():
            parts = line.split("|")
            if len(parts) == 5 and parts[0] in batch and _matches(parts[2], names.get(parts[0])):
                found[parts[0]] = JobInfo(parts[0], parts[1], _clean(parts[2]),
                                          _clean(parts[3]), _clean(parts[4]), "squeue")
    return None


def _scontrol_fields(text: str) -> dict[str, dict[str, str]]:
    """`scontrol show job -o` output: job id -> the fields llmb reads."""
    out = {}
    for line in text.splitlines():
        fields = dict(re.findall(r"\b(JobId|JobState|JobName|NodeList|Reason)=(\S*)", line))
        if "JobId" in fields:
            out[fields["JobId"]] = fields
    return out


def _from_scontrol(missing: list[str], names: dict[str, str],
                   found: dict[str, JobInfo]) -> str | None:
    """Fill `found` from `scontrol show job` (one by one, or all at once for many)."""
    asks = [[job] for job in missing] if len(missing) <= SCONTROL_EACH else [[]]
    for ask in asks:
        try:
            text = _run(["scontrol", "show", "job", "-o", *ask])
        except SlurmUnavailable as exc:
            if _INVALID_JOB in str(exc):
                continue
            return str(exc)
        for job, fields in _scontrol_fields(text).items():
            if job in missing and "JobState" in fields and \
                    _matches(fields.get("JobName"), names.get(job)):
                found[job] = JobInfo(job, fields["JobState"], _clean(fields.get("JobName")),
                                     _clean(fields.get("NodeList")),
                                     _clean(fields.get("Reason")), "scontrol")
    return None


def _from_sacct(missing: list[str], names: dict[str, str],
                found: dict[str, JobInfo]) -> str | None:
    """Fill `found` from sacct; why it could not answer, or None."""
    for batch in _batches(missing):
        try:
            out = _run(["sacct", "-n", "-X", "-P", "-j", ",".join(batch), "-o",
                        "JobID,State,JobName,NodeList"])
        except SlurmUnavailable as exc:
            return str(exc)
        for line in out.splitlines():
            parts = line.split("|")
            if len(parts) == 4 and parts[0] in batch and parts[1] and \
                    _matches(parts[2], names.get(parts[0])):
                found[parts[0]] = JobInfo(parts[0], parts[1].split()[0], _clean(parts[2]),
                                          _clean(parts[3]), None, "sacct")
    return None


def job_infos(job_ids: list[str],
              expected_names: dict[str, str] | None = None) -> dict[str, JobInfo]:
    """What Slurm says about each job: squeue (every state it still holds), then
    `scontrol show job`, then sacct (when accounting exists) for those the others miss. An id
    that is not a Slurm job id (a leading -, letters) is never handed to a Slurm command: it is
    UNKNOWN, and says so."""
    names = expected_names or {}
    found: dict[str, JobInfo] = {}
    ids = list(dict.fromkeys(str(j) for j in job_ids))
    for job in ids:
        if not JOB_ID.fullmatch(job):
            found[job] = JobInfo(job, UNKNOWN, detail="not a Slurm job id", settled=False)
    ids = [j for j in ids if j not in found]
    if not ids:
        return found
    unreachable = _from_squeue(ids, names, found)
    if unreachable is None:
        unreachable = _from_scontrol([j for j in ids if j not in found], names, found)
    missing = [j for j in ids if j not in found]
    if not missing:
        return found
    accounting = _from_sacct(missing, names, found)  # slurmdbd may answer for a lost ctld
    settled = accounting is None or any(s in accounting for s in _NO_ACCOUNTING)
    for job in missing:
        if job in found:
            continue
        if unreachable:
            found[job] = JobInfo(job, UNKNOWN, detail=f"cannot ask Slurm: {unreachable}",
                                 settled=False)
            continue
        why = ("no accounting" if accounting and settled else
               f"sacct unavailable ({accounting})" if accounting else "sacct has no record")
        found[job] = JobInfo(job, PURGED, detail=f"squeue and scontrol no longer know it; "
                             f"{why}", settled=settled)
    return found


def job_state(job_id: str) -> str | None:
    """The job's state (RUNNING, COMPLETED, PURGED, ...) or None when Slurm cannot be asked."""
    info = job_infos([job_id])[str(job_id)]
    return None if info.state == UNKNOWN else info.state


# --- facts for preflight ----------------------------------------------------------------------

# Node states (sinfo %T) in which a node cannot take a job; a trailing `*` (not responding)
# counts as unusable too. Allocated, mixed, reserved and powered-down nodes can run a job later.
UNUSABLE_STATES = ("down", "drain", "fail", "inval", "future", "unknown", "maint")


@dataclass(frozen=True)
class PartitionFacts:
    name: str
    available: str  # up, down, drain, inact
    nodes: int
    idle: int
    gres: str  # "" when none
    usable: int = 0  # nodes in a state that can run a job (not down, drained, failed, ...)


def _usable(state: str) -> bool:
    return not state.endswith("*") and not state.startswith(UNUSABLE_STATES)


def partition_facts(name: str) -> PartitionFacts | None:
    """sinfo's view of one partition (None when sinfo does not list it)."""
    out = _run(["sinfo", "-h", "-p", name, "-o", "%P|%a|%D|%G|%T"])
    nodes = idle = usable = 0
    avail = gres = ""
    for line in out.splitlines():
        parts = line.split("|")
        if len(parts) != 5 or parts[0].rstrip("*") != name:
            continue
        avail = parts[1]
        count = int(parts[2]) if ascii_digits(parts[2]) else 0
        nodes += count
        idle += count if parts[4].startswith("idle") else 0
        usable += count if _usable(parts[4]) else 0
        if parts[3] not in ("", "(null)") and not gres:
            gres = parts[3]
    return PartitionFacts(name, avail, nodes, idle, gres, usable) if avail else None


def mpi_types() -> list[str]:
    """`srun --mpi=list`: the MPI plugin types (pmix, pmix_v4, pmi2, ...)."""
    out = _run(["srun", "--mpi=list"], both=True)
    found = re.findall(r"^\s+([A-Za-z0-9_]+)\s*$", out, re.MULTILINE)
    found += re.findall(r"\b(pmix_v\d+)\b", out)
    return list(dict.fromkeys(found))


def has_option(command: str, option: str) -> bool:
    """Whether `command --help` lists `option` (a SPANK plugin's options appear there too)."""
    return re.search(rf"(^|\s){re.escape(option)}([=\s,\[]|$)", _run([command, "--help"]),
                     re.MULTILINE) is not None


def version() -> str:
    return _run(["sinfo", "--version"]).strip()


def topology() -> str:
    """`scontrol show topology`: one line per switch where Slurm has a topology plugin
    (llmb.launch.slurmtopology reads it)."""
    return _run(["scontrol", "show", "topology"])


# --- facts for a results archive --------------------------------------------------------------

CONFIG_KEPT = ("ClusterName", "SLURM_VERSION", "SelectType", "SelectTypeParameters", "MpiDefault",
               "GresTypes", "ProctrackType", "TaskPlugin", "TopologyPlugin",
               "AccountingStorageType", "MinJobAge", "PrologFlags", "SwitchType")
NODE_KEPT = re.compile(r"\b(NodeName|CPUTot|RealMemory|Gres|State|Arch|OS|AvailableFeatures|"
                       r"Partitions)=(\S+)")


def _lines(argv: list[str]) -> list[str] | None:
    try:
        return [ln for ln in _run(argv).splitlines() if ln.strip()]
    except SlurmUnavailable:
        return None


class ClusterFacts(TypedDict):
    version: str | None
    partitions: list[str] | None  # sinfo's lines: partition|avail|timelimit|nodes|gres|...
    nodes: list[dict[str, str]]  # each node's NODE_KEPT settings
    config: dict[str, str]  # the CONFIG_KEPT scheduler settings


def cluster_facts() -> ClusterFacts:
    """What sinfo and scontrol say about the cluster (None where a command is missing or
    fails): version, partitions, each node's shape and the scheduler settings that matter to
    a benchmark."""
    try:
        release: str | None = version()
    except SlurmUnavailable:
        release = None
    config = _lines(["scontrol", "show", "config"]) or []
    return {
        "version": release,
        "partitions": _lines(["sinfo", "-h", "-o", "%P|%a|%l|%D|%G|%f|%N"]),
        "nodes": [dict(NODE_KEPT.findall(line))
                  for line in _lines(["scontrol", "show", "nodes", "-o"]) or []],
        "config": {k.strip(): v.strip() for k, _, v in (ln.partition("=") for ln in config)
                   if k.strip() in CONFIG_KEPT},
    }
