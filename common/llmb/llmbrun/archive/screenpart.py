"""The newest screen in an archive (its `screen/` folder): only the files the install's layout
names, never a path the screen's own state names.

    screens/<stamp>/screen.json        the newest screen (a folder named as a screen writes
                                       it: its UTC stamp; llmb.llmbrun.screen.stamp_folders)
    screens/<stamp>/screen-<job>.out   its job's output (the name its job script gives it)
    screens/baseline.json              the install's baseline, when the screen was held to it
                                       (as screen/baseline.json)

Each is taken only when it is a regular file under the install, reached through no link, of
at most MAX_BYTES; else it is left out and said in one line. A screen.json's `output` and
its `baseline.path` are the screen's record of itself: they pick nothing (a baseline given
with --baseline from elsewhere is named, not packed).
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from pathlib import Path

from llmb import layout
from llmb.llmbrun.archive import pack
from llmb.llmbrun.archive.format import LeftOut, ScreenNote
from llmb.llmbrun.clusterconfig import ClusterConfig
from llmb.llmbrun.errors import PROG
from llmb.shared import values

MAX_BYTES = 64 << 20  # a screen's file: thousands of nodes make a few MB
OUTPUT = re.compile(r"screen-[0-9]+(_[0-9]+)?\.out")  # the job's output: screen-%j.out


def packable(cfg: ClusterConfig, path: Path, what: str, left: dict[str, LeftOut]) -> bool:
    """Whether a file the layout names goes in: under the install, through no link, a
    regular file of at most MAX_BYTES (else left out, counted and said in one line)."""
    if not os.path.lexists(path) or pack.linked(cfg, path, what, left):
        return False
    try:
        inside = path.resolve(strict=True).is_relative_to(cfg.install.resolve())
        st = path.lstat()
    except (OSError, RuntimeError):
        return False
    problem = ("lies outside the install" if not inside else
               "is not a regular file" if not path.is_file() else
               f"is larger than the {MAX_BYTES >> 20} MB an archive takes of it"
               if st.st_size > MAX_BYTES else None)
    if problem is None:
        return True
    info = pack.counted(left, "other")
    with contextlib.suppress(OSError):
        info["bytes"] += st.st_size
    print(f"{PROG}: archive: warning: {what} is left out: {values.shown(path)} {problem}",
          file=sys.stderr)
    return False


def newest_linked(cfg: ClusterConfig, left: dict[str, LeftOut]) -> bool:
    """Whether the newest screen's results (the newest stamp folder with a screen.json) are
    a link or lie under one; checked before they are read."""
    from llmb.llmbrun import screen

    screens = cfg.tree.screens
    if not os.path.lexists(screens):
        return False
    if pack.linked(cfg, screens, "the screens", left):
        return True
    for stamp in screen.stamp_folders(cfg.tree):
        if os.path.lexists(stamp / layout.SCREEN_FILE):
            return pack.linked(cfg, stamp / layout.SCREEN_FILE, "the newest screen", left)
    return False


def _held_to_own(cfg: ClusterConfig, said: str) -> bool:
    """Whether the baseline a screen says it was held to is the install's own file."""
    from llmb.llmbrun import screen

    own = screen.baseline_path(cfg.tree)
    with contextlib.suppress(OSError, ValueError, RuntimeError):
        return os.path.realpath(said) == os.path.realpath(own)
    return False


def stage_screen(cfg: ClusterConfig, root: Path, secrets: set[str], in_report: bool,
                 left: dict[str, LeftOut]) -> ScreenNote | None:
    """The newest screen: screen/screen.json, its job's output and the install's baseline it
    was held to (redacted), and its section in the report; the index's note on it (None: the
    install has no screen, or its results are a link or unfit, left out)."""
    from llmb.llmbrun import screen

    if newest_linked(cfg, left):
        return None
    found = screen.load_newest(cfg.tree)
    if found is None or not packable(cfg, found[0], "the newest screen", left):
        return None
    path, doc = found
    pack.copy_redacted(path, root / "screen" / path.name, secrets)
    for output in sorted(p for p in path.parent.iterdir() if OUTPUT.fullmatch(p.name)):
        if packable(cfg, output, "the newest screen's job output", left):
            pack.copy_redacted(output, root / "screen" / output.name, secrets)
    said = doc["baseline"]["path"] if "baseline" in doc else None
    own = screen.baseline_path(cfg.tree)
    if said is not None and not _held_to_own(cfg, said):
        print(f"{PROG}: archive: note: the baseline the newest screen was held to, "
              f"{values.shown(said)}, is not the install's ({values.shown(own)}): not packed "
              "(an archive holds only the install's files)", file=sys.stderr)
    elif said is not None and packable(cfg, own, "the screen's baseline", left):
        pack.copy_redacted(own, root / "screen" / "baseline.json", secrets)
    if in_report:
        screen.add_to_report(root / "report", cfg.tree)
    return ScreenNote(stamp=doc.get("stamp") or path.parent.name, suspects=doc["suspects"],
                      in_report=in_report)
