"""Where `llmb-run archive` stages its copy, and what it may write over.

The copy is staged next to the output file (login nodes' /tmp is often small), in a directory
named for its host and process (`.llmb-archive-<host>.<pid>.<random>`): a SIGTERM or SIGHUP
removes it on the way out (exit 128+N, one line), and what a SIGKILL or a lost node leaves
is removed by the next archive once that process is gone from this host (another host's is
kept and named). The output never names the install's own state nor lies inside its trees.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
from collections.abc import Iterator
from pathlib import Path

from llmb.llmbrun.clusterconfig import ClusterConfig
from llmb.llmbrun.errors import RunError
from llmb.shared import files, values
from llmb.shared.values import ascii_digits

STAGING = ".llmb-archive-"  # + <host>.<pid>.<random>
GZIP_MAGIC = b"\x1f\x8b"


def prefix() -> str:
    """The name of this process's staging directory, less its random tail."""
    return f"{STAGING}{socket.gethostname()}.{os.getpid()}."


def own_files(cfg: ClusterConfig) -> tuple[list[Path], list[Path]]:
    """The install's own state (files) and trees (directories) an archive never overwrites."""
    tree = cfg.tree
    return ([tree.history, tree.config, tree.hf_token, tree.install_state, tree.wrapper,
             cfg.path],
            [tree.workloads, tree.venvs, tree.images, tree.preflight, tree.screens,
             tree.root / "datasets"])


def refuse_own(cfg: ClusterConfig, out: Path) -> None:
    """--output may not name the install's state (the history, cluster_config.yaml, the
    token, ...) or lie inside its trees (runs, venvs, images, ...), nor be an existing file
    that is not an archive (it would be overwritten)."""
    resolved = out.resolve()
    state, trees = own_files(cfg)
    if any(resolved == p.resolve() for p in state):
        raise RunError(f"--output {values.shown(out)} is a file of this install "
                       f"({resolved.name}, which llmb-run reads); name another file")
    for tree in trees:
        if resolved.is_relative_to(tree.resolve()):
            raise RunError(f"--output {values.shown(out)} lies inside this install's "
                           f"{tree.name}/ (what llmb-run keeps and archives); name a file "
                           "elsewhere, e.g. in the install root")
    if resolved.exists():
        try:
            head = files.read_head(resolved, 2)
        except files.FileRefused as exc:
            raise RunError(f"--output {values.shown(out)} {exc.reason}") from None
        if head != GZIP_MAGIC:
            raise RunError(f"--output {values.shown(out)} exists and is not an archive; "
                           "it would be overwritten: remove it or name another file")


def sweep(directory: Path) -> list[str]:
    """Remove the staging directories an archive killed on this host left in directory (its
    process is gone: SIGKILL, a lost node); one line per directory removed or kept."""
    host = socket.gethostname()
    notes = []
    for entry in directory.glob(f"{STAGING}*"):
        host_pid = entry.name[len(STAGING):].rsplit(".", 1)[0]
        owner, _, pid = host_pid.rpartition(".")
        if not entry.is_dir() or entry.is_symlink() or not ascii_digits(pid):
            continue
        if owner != host:
            notes.append(f"kept {values.shown(entry)}: staged on {values.shown(owner)}, where "
                         "it may still be running")
            continue
        if _alive(int(pid)):
            continue
        shutil.rmtree(entry, ignore_errors=True)
        notes.append(f"removed {values.shown(entry)}, left by an archive that was stopped "
                     f"(process {pid} is gone)")
    return notes


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Stopped(RunError):
    """SIGTERM or SIGHUP while archiving: the staging copy was removed."""


@contextlib.contextmanager
def stoppable() -> Iterator[None]:
    """SIGTERM and SIGHUP raise Stopped here, so the staging directory is removed on the way
    out (the default action would kill the process and leave it); exit status 128+N."""
    def stop(signum: int, _frame: object) -> None:
        raise Stopped(f"stopped by {signal.Signals(signum).name}; the partial archive was "
                      "removed", status=128 + signum)

    saved = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)
