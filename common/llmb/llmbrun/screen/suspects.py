"""The nodes the newest screen named (`suspects`), for --exclude-suspect on single, bulk and
suite: the contract between `llmb-run screen`, which writes
$LLMB_INSTALL/screens/<stamp>/screen.json, and the commands that leave those nodes out.

screen.json is a JSON object whose `suspects` is a list of node names (possibly empty), held
whole to its type (llmb.llmbrun.screen.results.ScreenDocument) before any of it is used; the
newest screen is the one whose <stamp> folder sorts last (stamps are UTC YYYYmmdd-HHMMSS;
a folder named otherwise, a backup or a copy, is no screen).
A screen that never finished writing its JSON does not count: the one before it does.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from llmb import layout
from llmb.launch import hostlist, placement
from llmb.llmbrun.errors import RunError
from llmb.llmbrun.screen import results
from llmb.llmbrun.screen.document import MAX_NODES
from llmb.shared import files, records, values

MAX_SCREEN_BYTES = 64 << 20  # a screen of thousands of nodes is a few MB
STAMP = re.compile(r"[0-9]{8}-[0-9]{6}")  # llmb.shared.clock.stamp()
REDO = "run llmb-run screen again"  # the newer screen is read instead of the bad one


@dataclass(frozen=True)
class Screen:
    path: Path  # its screen.json
    suspects: tuple[str, ...]
    doc: results.ScreenDocument  # its content, checked


def is_stamp(name: str) -> bool:
    """Whether a folder under screens/ is named as a screen writes it (its UTC stamp,
    YYYYmmdd-HHMMSS); another (`backup-old`, a copy) is never a screen."""
    return STAMP.fullmatch(name) is not None


def stamp_folders(tree: layout.Install) -> list[Path]:
    """The screens' folders, newest first: directories named as a screen writes them."""
    if not tree.screens.is_dir():
        return []
    return sorted((p for p in tree.screens.iterdir() if is_stamp(p.name) and p.is_dir()),
                  reverse=True)


def newest_screen(tree: layout.Install) -> Screen | None:
    """The newest complete screen of this install, or None when there is none."""
    for stamp in stamp_folders(tree):
        path = stamp / layout.SCREEN_FILE
        try:
            raw = files.read_bounded(path, MAX_SCREEN_BYTES)
        except files.FileRefused as exc:
            if exc.missing:
                continue  # a screen still running, or stopped before it wrote its results
            raise RunError(f"screen results {exc}") from None
        doc = _document(path, raw)
        return Screen(path, _suspects(path, doc["suspects"]), doc)
    return None


def _document(path: Path, raw: bytes) -> results.ScreenDocument:
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        raise RunError(f"screen results {values.shown(path)} are not valid JSON; "
                       f"{REDO}") from None
    try:
        return results.checked(data)
    except records.BadRecord as exc:
        raise RunError(f"screen results {values.shown(path)}: {exc.problem}; {REDO}"
                       ) from None


def _suspects(path: Path, names: list[str]) -> tuple[str, ...]:
    """The nodes `names` write (each as a Slurm node list would hold it), counted from their
    ranges before one is written: a screen names at most MAX_NODES nodes."""
    if not names:
        return ()
    try:
        named = sum(hostlist.count(hostlist.parse("suspects", name)) for name in names)
        if named > MAX_NODES:
            raise RunError(f"screen results {values.shown(path)}: suspects name {named} nodes; "
                           f"a screen has at most {MAX_NODES}; run llmb-run screen again")
        return tuple(dict.fromkeys(node for name in names
                                   for node in placement.expand_hostlist("suspects", name)))
    except (hostlist.HostlistError, placement.PlacementError) as exc:
        raise RunError(f"screen results {values.shown(path)}: {exc}") from None


def for_exclude(tree: layout.Install) -> tuple[str, ...]:
    """The nodes --exclude-suspect leaves out; RunError when no screen has run."""
    screen = newest_screen(tree)
    if screen is None:
        raise RunError(f"--exclude-suspect needs a screen: no results under {tree.screens}; "
                       "run llmb-run screen first")
    return screen.suspects
