"""Test doubles of Slurm's job-state commands (squeue, scontrol, sacct) for llmb-run's unit
tests, answering from a JSON file the test writes (`world`) with the wording and exit codes of
Debian 12's Slurm 22.05, as seen on tests/slurm's real cluster:

- an unknown job: `slurm_load_jobs error: Invalid job id specified`, exit 1 (squeue with one id,
  scontrol show job); squeue with several ids lists the ones it knows, exit 0;
- no accounting: `sacct` prints `Slurm accounting storage is disabled`, exit 1.

world = {"squeue": {id: [state, name, nodes, reason]}, "scontrol": {id: [...]},
         "sacct": {id: [state, name, nodes]} | "disabled" | "down",
         "absent": ["squeue", ...]}    # commands that are not installed at all
Every call is appended to calls.log. The real cluster is used by tests/e2e.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

SHIM = '''#!{python}
import json, sys
from pathlib import Path
here = Path(__file__).resolve().parent
world = json.loads((here / "world.json").read_text())
cmd, args = Path(sys.argv[0]).name, sys.argv[1:]
with open(here / "calls.log", "a") as log:
    log.write(" ".join([cmd, *args]) + "\\n")
INVALID = "slurm_load_jobs error: Invalid job id specified"
if cmd == "squeue":
    ids = args[args.index("-j") + 1].split(",")
    known = [i for i in ids if i in world.get("squeue", {{}})]
    if not known and len(ids) == 1:
        print(INVALID, file=sys.stderr); sys.exit(1)
    for i in known:
        print("|".join([i, *world["squeue"][i]]))
elif cmd == "scontrol":
    job = args[-1]
    if job not in world.get("scontrol", {{}}):
        print(INVALID, file=sys.stderr); sys.exit(1)
    state, name, nodes, reason = world["scontrol"][job]
    print(f"JobId={{job}} JobName={{name}} UserId=u(1) JobState={{state}} Reason={{reason}} "
          f"NodeList={{nodes}} BatchHost=x")
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
        for cmd in ("squeue", "scontrol", "sacct", "scancel"):
            path = self.dir / cmd
            if cmd in world.get("absent", []):  # type: ignore[operator]
                path.unlink(missing_ok=True)
                continue
            self._replace(path, SHIM.format(python=sys.executable), 0o755)

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
