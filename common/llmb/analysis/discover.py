"""Finding the logs: every `*.out` under each DIR, one at a time, in a bounded amount of memory.

Directory links are followed once: a link whose target lies inside a tree already walked (a
DIR, or an earlier link's target) is a loop or a second path to the same logs and is not
followed, nor is a link onto /proc, /sys or /dev or to a directory that holds the DIR (a link
to /: the whole file system), which is named instead (llmb.shared.files.LinkGuard); a DIR
given twice, or inside another DIR, is read once. What is remembered for
that is the real path of each DIR and each link followed, never one entry per directory, so
a tree of 200,000 runs costs no more memory than one of ten.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from llmb.analysis.identify import display
from llmb.shared.files import LinkGuard


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
    while pending:
        parent, names = pending[-1]
        if not names:
            pending.pop()
            continue
        top = os.path.join(parent, names.pop()) if parent else names.pop()
        try:
            with os.scandir(top) as listing:
                entries = sorted(listing, key=lambda e: e.name)
        except OSError as exc:
            yield Found(root, str(exc.filename or top), f"cannot list: {exc.strerror}")
            continue
        subdirs = []
        for entry in entries:
            try:
                is_dir = entry.is_dir()  # a link to a directory too
            except OSError:
                is_dir = False
            if is_dir:
                why = _refused(entry, guard)
                if why is not None:
                    yield Found(root, entry.path, why)
                elif state.keep(top, entry.name, entry.is_symlink()):
                    subdirs.append(entry.name)
                    if entry.name.endswith(".out"):
                        yield Found(root, entry.path, "directory")
            elif entry.name.endswith(".out"):
                yield _found((root, entry.path, None))  # (Found's, made in C: one per log)
        pending.append((top, subdirs[::-1]))


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
