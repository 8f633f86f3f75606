"""The throw-away test Slurm cluster (tests/slurm/cluster.sh) as a pytest session resource.

Started once per session when a test asks for it; stopped at the end only if this session
started it. Without root the script exits 77 and the tests that need it are skipped with its
reason.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

from paths import REPO

CLUSTER = REPO / "tests" / "slurm" / "cluster.sh"
SKIP_CODE = 77


def _cluster(*args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(CLUSTER), *args], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def cluster_env() -> dict[str, str]:
    """The variables a Slurm client needs (`cluster.sh env` prints export lines)."""
    env = {}
    for line in _cluster("env").stdout.splitlines():
        if line.startswith("export ") and "=" in line:
            name, _, value = line[len("export "):].partition("=")
            env[name] = value.strip("'\"")
    return env


def session_cluster() -> Iterator[dict[str, str] | str]:
    """Yield the client env of a running cluster, or a skip reason (str)."""
    if not CLUSTER.exists():
        yield "tests/slurm/cluster.sh is missing"
        return
    if os.geteuid() != 0:
        yield "the test Slurm cluster needs root"
        return
    was_up = _cluster("status").returncode == 0
    up = _cluster("up")
    if up.returncode == SKIP_CODE:
        yield (up.stdout + up.stderr).strip() or "test Slurm cluster skipped"
        return
    if up.returncode != 0:
        raise RuntimeError(f"tests/slurm/cluster.sh up failed:\n{up.stdout}\n{up.stderr}")
    try:
        yield cluster_env()
    finally:
        if not was_up:
            _cluster("down", timeout=120)
