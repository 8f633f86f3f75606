"""make lock: pin every package the development and CI venvs install, on purpose.

The requirement files under common/requirements/ keep ranges (a user's install, through
setup.sh or the installer, takes the newest release each range allows). The venvs that test
llmb install the same files with `pip install -c <lock>`, so a new release of any package, named
or pulled in, reaches the tests only when someone runs `make lock` and commits the result:

  dev.lock    dev.txt (with launch.txt and report.txt)   .venv (make venv, make test, CI)
  smoke.lock  smoke.txt (the CPU torch of SMOKE_TEST)    .venv, beside dev.lock
  nemo.lock   nemo.txt (NeMo 2.3.1 as in the image)      .venv-nemo (tests/nemo/run.sh)

Each lock is what pip resolves for its file, asked without installing anything
(`pip install --dry-run --ignore-installed --report`), in a throw-away venv of the python3 that
CI uses. dev.txt and smoke.txt go into one venv, so they are resolved together first and each
lock is then the part its own file needs of that one resolution: a package both need has one
version in both. nemo.txt is resolved alone (its own venv). A local build label (`+cpu`) is left
out of a pin, so that `torch==2.13.0` matches the CPU build a find-links directory offers and
the release on the index alike.

Usage: python3 tests/tools/lock.py [--python PYTHON]   (make lock; a few minutes, mostly nemo)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
REQUIREMENTS = ROOT / "common" / "requirements"
JOINT = ("dev", "smoke")  # one venv: resolved together, then each on its own within that
ALONE = ("nemo",)


def canonical(name: str) -> str:
    """A distribution name as pip compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def resolve(pip: list[str], requirements: list[str], constraints: Path | None) -> dict[str, str]:
    """{name: version} of everything pip would install for `requirements` (names of files
    under common/requirements, without .txt), nothing installed."""
    with tempfile.TemporaryDirectory(prefix="llmb-lock-") as tmp:
        report = Path(tmp) / "report.json"
        cmd = [*pip, "install", "--quiet", "--disable-pip-version-check", "--dry-run",
               "--ignore-installed", "--report", str(report)]
        for name in requirements:
            cmd += ["-r", str(REQUIREMENTS / f"{name}.txt")]
        if constraints is not None:
            cmd += ["-c", str(constraints)]
        print(f"lock: resolving {' + '.join(requirements)}", file=sys.stderr, flush=True)
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        installs = json.loads(report.read_text())["install"]
    return {canonical(item["metadata"]["name"]): item["metadata"]["version"].split("+")[0]
            for item in installs}


def lock_text(name: str, pins: dict[str, str], python: str) -> str:
    """The lock file: how it was made, then one `name==version` a line, sorted."""
    with_joint = (f", resolved together with {' and '.join(f'{j}.txt' for j in JOINT if j != name)}"
                  if name in JOINT else "")
    header = [
        f"# Pins of every package common/requirements/{name}.txt installs{with_joint}.",
        "# Made by `make lock` (tests/tools/lock.py): pip's resolution without installing",
        f"# (pip install --dry-run --ignore-installed --report) on Python {python}, "
        f"{platform.system()} {platform.machine()}.",
        "# Updated on purpose only: change the requirement file, run `make lock`, commit both.",
        "# The test venvs install with `-c` this file; a user's install keeps the ranges.",
    ]
    return "\n".join(header + [f"{pkg}=={pins[pkg]}" for pkg in sorted(pins)]) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", default="python3", help="the Python CI uses (default python3)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="llmb-lock-venv-") as venv:
        subprocess.run([args.python, "-m", "venv", venv], check=True)
        python = os.path.join(venv, "bin", "python")
        asked = [python, "-c", "import platform; print(platform.python_version())"]
        version = subprocess.run(asked, check=True, capture_output=True, text=True).stdout.strip()
        pip = [python, "-m", "pip"]
        locks: dict[str, dict[str, str]] = {}
        joint = resolve(pip, list(JOINT), None)
        pinned = Path(venv) / "joint.txt"
        pinned.write_text("".join(f"{pkg}=={ver}\n" for pkg, ver in sorted(joint.items())))
        for name in JOINT:
            locks[name] = resolve(pip, [name], pinned)
        for name in ALONE:
            locks[name] = resolve(pip, [name], None)
    for name, pins in locks.items():
        path = REQUIREMENTS / f"{name}.lock"
        path.write_text(lock_text(name, pins, version))
        print(f"lock: wrote {path.relative_to(ROOT)} ({len(pins)} packages)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
