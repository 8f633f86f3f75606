"""Finding the logs: every `*.out` under each DIR, one at a time, in a bounded amount of memory.

Directory links are followed once: a link whose target lies inside a tree already walked (a
DIR, or an earlier link's target) is a loop or a second path to the same logs and is not
followed, nor is a link onto /proc, /sys or /dev or to a directory that holds the DIR (a link
to /: the whole file system), which is named instead (llmb.shared.files.LinkGuard); /proc,
/sys and /dev are not entered either when a DIR holds them (DIR /: they hold no log, and
/proc every process's view of the whole tree); a DIR given twice, or inside another DIR, is
read once. What is remembered for
that is the real path of each DIR and each link followed, never one entry per directory, so
a tree of 200,000 runs costs no more memory than one of ten.
"""

from __future__ import annotations

import bisect
import functools
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from llmb.analysis.identify import display
from llmb.shared.files import VIRTUAL_ROOTS, LinkGuard

VIRTUAL_DIR = "/proc, /sys or /dev: no log lives there, not walked"


class Found(NamedTuple):
    """A `*.out` file under root, or (problem set) something that could not be walked. (A
    tuple: made for every file of a tree.)"""

    root: str
    path: str
    problem: str | None = None


_found = functools.partial(tuple.__new__, Found)
def check_roots(roots: list[str]) -> None:
    """FileNotFoundError (one line) for a DIR that is missing or not a directory."""
    for root in roots:
        if not os.path.isdir(root):
            what = "is not a directory" if os.path.exists(root) else "does not exist"
            raise FileNotFoundError(f"{display(root)} {what}; pass the experiments directory, "
                                    "e.g. $LLMB_WORKLOAD/experiments")


def _ancestors(path: str) -> Iterator[str]:
    """path, its parent, ... up to /."""
    while True:
        yield path
        parent = os.path.dirname(path)
        if parent == path:
            return
        path = parent


class _Walk:
    """The trees walked so far (real paths), and how a path seen in the walk maps to its real
    path (its DIR's or followed link's prefix replaced). Lookups go up a path's ancestors, so
    they cost its depth, however many links were followed."""

    def __init__(self) -> None:
        self.walked: set[str] = set()
        self.prefixes: dict[str, str] = {}  # path as walked -> real path

    def add(self, seen: str, real: str) -> None:
        self.walked.add(real)
        self.prefixes[seen.rstrip(os.sep) or seen] = real

    def inside(self, real: str) -> bool:
        """Whether real lies in a tree already walked."""
        return any(a in self.walked for a in _ancestors(real))

    def real(self, path: str) -> str:
        for seen in _ancestors(path):
            if seen in self.prefixes:
                return self.prefixes[seen] + path[len(seen):]
        return os.path.realpath(path)

    def keep(self, dirpath: str, name: str, link: bool) -> bool:
        """Whether to descend into dirpath/name (following it once when it is a link)."""
        path = os.path.join(dirpath, name)
        if link:
            target = os.path.realpath(path)
            if self.inside(target):
                return False
            self.add(path, target)
            return True
        return os.path.join(self.real(dirpath), name) not in self.walked


def walk(roots: list[str]) -> Iterator[Found]:
    """Every *.out under the roots (in name order within a directory), and each directory that
    could not be listed or is named *.out."""
    state = _Walk()
    for root in roots:
        real = os.path.realpath(root)
        if state.inside(real):
            continue  # given twice, or inside a DIR already read
        state.add(root, real)
        yield from _walk_root(root, state, LinkGuard(root))


def _walk_root(root: str, state: _Walk, guard: LinkGuard) -> Iterator[Found]:
    """Depth first, names in order; what waits is the names of the directories still to walk,
    not their entries (os.scandir: no stat per file, one per directory link)."""
    pending: list[tuple[str, list[str]]] = [("", [root])]
    # /proc, /sys and /dev as the DIR's own subdirectories (DIR /): named, never entered
    virtual = {os.path.join(root, os.path.basename(v)) for v in VIRTUAL_ROOTS} \
        if os.path.realpath(root) == os.sep else set()
    while pending:
        parent, names = pending[-1]
        if not names:
            pending.pop()
            continue
        top = os.path.join(parent, names.pop()) if parent else names.pop()
        try:
            dirs, logs = _listed(top)
        except OSError as exc:
            yield Found(root, str(exc.filename or top), f"cannot list: {exc.strerror}")
            continue
        subdirs: list[str] = []
        prefix, d = os.path.join(top, ""), 0  # (a log's path: as its os.DirEntry's)
        for name in logs:
            while d < len(dirs) and dirs[d].name < name:  # the directories among them first
                yield from _directory(root, top, dirs[d], state, guard, subdirs, virtual)
                d += 1
            yield _found((root, prefix + name, None))  # (Found's, made in C: one per log)
        for entry in dirs[d:]:
            yield from _directory(root, top, entry, state, guard, subdirs, virtual)
        pending.append((top, subdirs[::-1]))


def _listed(top: str) -> tuple[list[os.DirEntry[str]], list[str]]:
    """The directories of a folder (entries) and its *.out files (names), each in name order;
    a file is kept as its name only (thousands of entries held would be thousands of objects
    for the garbage collector to go through, again and again)."""
    dirs, logs = [], []
    with os.scandir(top) as listing:
        for entry in listing:
            try:
                is_dir = entry.is_dir()  # a link to a directory too
            except OSError:
                is_dir = False
            if is_dir:
                dirs.append(entry)
            elif entry.name.endswith(".out"):
                logs.append(entry.name)
    dirs.sort(key=lambda e: e.name)
    logs.sort()
    # the jobs that left a batch output here: the names from `sbatch_` on (they sort together)
    batches = logs[bisect.bisect_left(logs, "sbatch_"):bisect.bisect_left(logs, "sbatch`")]
    batches += [e.name for e in dirs if e.name.startswith("sbatch_")]
    if len(_batch_jobs) >= FOLDERS_KEPT:
        _batch_jobs.clear()
    _batch_jobs[os.path.dirname(os.path.join(top, ""))] = {
        m.group(1) for name in batches if (m := BATCH.match(name))}
    return dirs, logs


BATCH = re.compile(r"^sbatch_.*_(\d+)\.out$")  # a job's batch output, sbatch_<name>_<job>.out
FOLDERS_KEPT = 4096
_batch_jobs: dict[str, set[str]] = {}  # folder -> the jobs with a batch output in it, as walked


def batch_jobs(folder: str) -> set[str] | None:
    """The jobs that left a batch output in folder (as a log's os.path.dirname names it) when
    the walk listed it; None when it did not (or forgot it: FOLDERS_KEPT are kept)."""
    return _batch_jobs.get(folder)


def _directory(root: str, top: str, entry: os.DirEntry[str], state: _Walk, guard: LinkGuard,
               subdirs: list[str], virtual: set[str]) -> Iterator[Found]:
    """A directory of the folder top: walked later (its name added to subdirs), or said why
    not (`virtual`: /proc, /sys and /dev when DIR is /); one named *.out is said too."""
    why = _refused(entry, guard) or (VIRTUAL_DIR if entry.path in virtual else None)
    if why is not None:
        yield Found(root, entry.path, why)
    elif state.keep(top, entry.name, entry.is_symlink()):
        subdirs.append(entry.name)
        if entry.name.endswith(".out"):
            yield Found(root, entry.path, "directory")


def _refused(entry: os.DirEntry[str], guard: LinkGuard) -> str | None:
    """Why a link to a directory is not followed (see LinkGuard), or None."""
    if not entry.is_symlink():
        return None
    try:
        return guard.refused(entry.stat())
    except OSError:
        return None


def relative(path: str, base: str) -> str:
    """os.path.relpath(path, base) for a path found under base, without its cost (it makes
    both absolute and compares their parts: a few microseconds a log, per log)."""
    prefix = base.rstrip(os.sep) + os.sep
    if path.startswith(prefix) and base not in ("", ".") and ".." not in path[len(prefix):]:
        return path[len(prefix):]
    return os.path.relpath(path, base)


def base_of(roots: list[str]) -> str:
    """What file names are relative to: the one DIR, or the directory all DIRs share."""
    if len(roots) == 1:
        return roots[0]
    return os.path.commonpath([os.path.abspath(r) for r in roots])


def experiment_of(rel: str, base: str) -> str:
    """The experiment of an unidentified log: the folder under `experiments` when the path has
    one (an install tree), else the first folder under DIR, else DIR's own name."""
    parts = Path(rel).parts[:-1]
    if "experiments" in parts[:-1]:
        return parts[parts.index("experiments") + 1]
    return parts[0] if parts else Path(os.path.abspath(base)).name
