"""Test doubles of Slurm's job-state commands (squeue, scontrol, sacct) for llmb-run's unit
tests, answering from a JSON file the test writes (`world`) with the wording and exit codes of
Debian 12's Slurm 22.05, as seen on tests/slurm's real cluster:

- an unknown job: `slurm_load_jobs error: Invalid job id specified`, exit 1 (squeue with one id,
  scontrol show job); squeue with several ids lists the ones it knows, exit 0;
- no accounting: `sacct` prints `Slurm accounting storage is disabled`, exit 1.

world = {"squeue": {id: [state, name, nodes, reason]}, "scontrol": {id: [...]},
         "sacct": {id: [state, name, nodes]} | "disabled" | "down",
         "absent": ["squeue", ...],    # commands that are not installed at all
         "faults": {"squeue": {"fail": N, "sleep": S, "message": ...}}}
                                       # the first N calls sleep S s, then fail (exit 1) with
                                       # the message (default: Slurm's socket timeout)
Every call is appended to calls.log. The real cluster is used by tests/e2e.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

# What Slurm 22.05's clients print when slurmctld does not answer in time (MessageTimeout).
BUSY = "slurm_load_jobs error: Socket timed out on send/recv operation"
SHIM = '''#!{python}
import json, sys
from pathlib import Path
BUSY = {busy!r}
here = Path(__file__).resolve().parent
world = json.loads((here / "world.json").read_text())
cmd, args = Path(sys.argv[0]).name, sys.argv[1:]
with open(here / "calls.log", "a") as log:
    log.write(" ".join([cmd, *args]) + "\\n")
INVALID = "slurm_load_jobs error: Invalid job id specified"
fault = world.get("faults", {{}}).get(cmd)
if fault:  # the first `fail` calls fail (after `sleep` s), as with a busy slurmctld
    count = here / f"{{cmd}}.count"
    n = int(count.read_text()) if count.exists() else 0
    count.write_text(str(n + 1))
    if n < fault.get("fail", 0):
        import time
        time.sleep(fault.get("sleep", 0))
        print(fault.get("message", BUSY), file=sys.stderr); sys.exit(1)
if cmd == "squeue":
    ids = args[args.index("-j") + 1].split(",")
    known = [i for i in ids if i in world.get("squeue", {{}})]
    if not known and len(ids) == 1:
        print(INVALID, file=sys.stderr); sys.exit(1)
    for i in known:
        print("|".join([i, *world["squeue"][i]]))
elif cmd == "scontrol":
    jobs = world.get("scontrol", {{}})
    listed = list(jobs) if args[-1] == "-o" else [args[-1]]  # no id: every job it holds
    if args[-1] != "-o" and args[-1] not in jobs:
        print(INVALID, file=sys.stderr); sys.exit(1)
    if not listed:
        print("No jobs in the system")
    for job in listed:
        state, name, nodes, reason = jobs[job]
        print(f"JobId={{job}} JobName={{name}} UserId=u(1) JobState={{state}} "
              f"Reason={{reason}} NodeList={{nodes}} BatchHost=x")
elif cmd == "sacct":
    acct = world.get("sacct", "disabled")
    if acct == "disabled":
        print("Slurm accounting storage is disabled", file=sys.stderr); sys.exit(1)
    if acct == "down":
        print("sacct: error: Problem talking to the database: Connection refused",
              file=sys.stderr); sys.exit(1)
    ids = args[args.index("-j") + 1].split(",")
    for i in ids:
        if i in acct:
            print("|".join([i, *acct[i]]))
elif cmd == "scancel":
    pass
'''


class Slurm:
    """A directory of shims; `.world` is rewritten with `set(...)`."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.set()

    def set(self, **world: object) -> None:
        """A new world, each file replaced whole: a job thread may change the world while
        the code under test runs a shim (a half-written file would be a traceback)."""
        self._replace(self.dir / "world.json", json.dumps(world), 0o644)
        for count in self.dir.glob("*.count"):  # faults count from this world on
            count.unlink()
        for cmd in ("squeue", "scontrol", "sacct", "scancel"):
            path = self.dir / cmd
            if cmd in world.get("absent", []):  # type: ignore[operator]
                path.unlink(missing_ok=True)
                continue
            self._replace(path, SHIM.format(python=sys.executable, busy=BUSY), 0o755)

    @staticmethod
    def _replace(path: Path, text: str, mode: int) -> None:
        tmp = path.with_name(f".{path.name}.new")
        tmp.write_text(text)
        tmp.chmod(mode)
        os.replace(tmp, path)

    def calls(self) -> list[str]:
        log = self.dir / "calls.log"
        return log.read_text().splitlines() if log.exists() else []

    def clear(self) -> None:
        (self.dir / "calls.log").unlink(missing_ok=True)
        for count in self.dir.glob("*.count"):
            count.unlink()
