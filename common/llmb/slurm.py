"""Read-only questions to Slurm: partitions and GRES (sinfo), accounts (sacctmgr), job states.

Every query returns None (or raises SlurmUnavailable with the reason) when the command is
missing, fails or times out, so that callers can fall back to asking the user. Job state comes
from squeue, then `scontrol show job` (jobs stay there MinJobAge seconds after they end), then
sacct when accounting exists: clusters without accounting still report running jobs.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass

TIMEOUT_S = 20
TERMINAL_STATES = {
    "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED",
    "BOOT_FAIL", "DEADLINE", "SPECIAL_EXIT", "REVOKED",
}


class SlurmUnavailable(RuntimeError):
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


def _run(argv: list[str]) -> str:
    if shutil.which(argv[0]) is None:
        raise SlurmUnavailable(f"{argv[0]} is not installed")
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise SlurmUnavailable(f"{argv[0]} did not answer within {TIMEOUT_S} s") from None
    if proc.returncode != 0:
        why = (proc.stderr or proc.stdout).strip().splitlines()
        raise SlurmUnavailable(f"{argv[0]} failed: {why[0] if why else f'exit {proc.returncode}'}")
    return proc.stdout


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


def job_state(job_id: str) -> str | None:
    """The job's state (RUNNING, COMPLETED, ...) or None when no Slurm command knows it."""
    try:
        state = _run(["squeue", "-h", "-j", job_id, "-o", "%T"]).strip()
        if state:
            return state.splitlines()[0]
    except SlurmUnavailable:
        pass
    try:
        m = re.search(r"\bJobState=(\S+)", _run(["scontrol", "show", "job", "-o", job_id]))
        if m:
            return m.group(1)
    except SlurmUnavailable:
        pass
    try:
        out = _run(["sacct", "-n", "-X", "-P", "-j", job_id, "-o", "State"]).strip()
        if out:
            return out.splitlines()[0].split()[0]
    except SlurmUnavailable:
        pass
    return None
