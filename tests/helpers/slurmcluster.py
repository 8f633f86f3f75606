"""The throw-away test Slurm cluster (tests/slurm/cluster.sh) as a pytest session resource.

Started once per session when a test asks for it; stopped at the end only if this session
started it. Without root the script exits 77 and the tests that need it are skipped with its
reason.

Two of them: the 2-node cluster every end-to-end test shares (LLMB_SLURM_STATE and
LLMB_SLURM_PORT_BASE of the caller), and a 4-node one for the screen's pairing rounds
(`four_nodes()`: its own state dir `<state>-4nodes` and port base + 40, never linked into
/etc; two leaf switches of two nodes each, leaf1 over node1-2 and leaf2 over node3-4, under
one spine: Slurm's topology/tree), so that the tests written for two nodes ("the other node")
keep their cluster. Under
pytest-xdist each worker past the first has clusters of its own (`two_nodes()`).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

from paths import REPO

CLUSTER = REPO / "tests" / "slurm" / "cluster.sh"
SKIP_CODE = 77


FOUR_NODES_PORT_OFFSET = 40
WORKER_PORT_OFFSET = 100  # each pytest-xdist worker's clusters: ports of their own


def _worker() -> int:
    """This pytest-xdist worker's number (gw3: 3); 0 without xdist."""
    return int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)


def _state_and_port(suffix: str, offset: int) -> tuple[str, int]:
    n = _worker()
    state = os.environ.get("LLMB_SLURM_STATE", "/tmp/llmb-slurm").rstrip("/") + suffix
    port = int(os.environ.get("LLMB_SLURM_PORT_BASE", "16817")) + offset
    if n:
        state, port = f"{state}-gw{n}", port + n * WORKER_PORT_OFFSET
    return state, port


def two_nodes() -> dict[str, str] | None:
    """cluster.sh's variables for the 2-node cluster: the caller's (None) in one process or on
    xdist's first worker; on another worker a cluster of its own (its state dir `<state>-gwN`,
    port base + 100 N, never linked into /etc), so that workers run end-to-end tests side by
    side, and one may pause its controller without the others seeing it."""
    if not _worker():
        return None
    state, port = _state_and_port("", 0)
    return {"LLMB_SLURM_STATE": state, "LLMB_SLURM_PORT_BASE": str(port),
            "LLMB_SLURM_SYSTEM_CONF": "0"}


def four_nodes() -> dict[str, str]:
    """cluster.sh's variables for the 4-node cluster beside the caller's 2-node one."""
    state, port = _state_and_port("-4nodes", FOUR_NODES_PORT_OFFSET)
    return {"LLMB_SLURM_STATE": state, "LLMB_SLURM_PORT_BASE": str(port),
            "LLMB_SLURM_SYSTEM_CONF": "0", "LLMB_SLURM_NODES": "4", "LLMB_SLURM_LEAVES": "2"}


def _cluster(*args: str, timeout: float = 900, extra: dict[str, str] | None = None
             ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(CLUSTER), *args], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL,
                          env={**os.environ, **(extra or {})})


def cluster_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The variables a Slurm client needs (`cluster.sh env` prints export lines)."""
    env = {}
    for line in _cluster("env", extra=extra).stdout.splitlines():
        if line.startswith("export ") and "=" in line:
            name, _, value = line[len("export "):].partition("=")
            env[name] = value.strip("'\"")
    return env


def session_cluster(extra: dict[str, str] | None = None) -> Iterator[dict[str, str] | str]:
    """Yield the client env of a running cluster, or a skip reason (str); `extra`: cluster.sh
    variables of another cluster than the caller's (four_nodes())."""
    if not CLUSTER.exists():
        yield "tests/slurm/cluster.sh is missing"
        return
    if os.geteuid() != 0:
        yield "the test Slurm cluster needs root"
        return
    was_up = _cluster("status", extra=extra).returncode == 0
    up = _cluster("up", extra=extra)
    if up.returncode == SKIP_CODE:
        yield (up.stdout + up.stderr).strip() or "test Slurm cluster skipped"
        return
    if up.returncode != 0:
        raise RuntimeError(f"tests/slurm/cluster.sh up failed:\n{up.stdout}\n{up.stderr}")
    try:
        yield cluster_env(extra)
    finally:
        if not was_up:
            _cluster("down", timeout=120, extra=extra)
