"""The recipe catalog as an earlier load found it, kept in the user's cache directory.

Loading the catalog (importing PyYAML, parsing every metadata.yaml and gpus.yaml, validating
them and every published row) costs about 30 ms, a fifth of the analyzer's start-up, on every
run, for files that seldom change. `prime` takes them from `$XDG_CACHE_HOME/llmb/` (default
`~/.cache/llmb/`) instead when that file was written from files of the same size and
modification time, read and checked by code of the same size and modification time (the
catalog's modules, llmb.shared.files and .yamlfile, PyYAML) under the same Python; `store`
writes it after a load that found everything valid. A catalog with a problem is never kept:
each run loads it and says what is wrong, as before. The file holds the parsed data in
marshal's format (plain data: text, numbers, lists and mappings with the keys YAML gave them,
never code that runs), written in one step, private to the user; one that cannot be read,
written or trusted (not the user's own, or writable by others) is ignored, and the catalog is
loaded as if there were none. Only the analyzer uses it.
"""

from __future__ import annotations

import importlib.util
import marshal
import os
import stat
import sys
import zlib
from pathlib import Path
from typing import Any

from llmb.recipes import catalog
from llmb.shared import files, yamlfile
from llmb.shared.errors import LlmbError

VERSION = 1
MAX_BYTES = 4 << 20  # a cache file larger than this is not ours
# The code that reads and validates what is kept: a change to any of it is a new catalog.
_CODE = ("catalog.py", "schema.py", "nemojob.py", "perf.py", "screenfacts.py")


def _where() -> Path | None:
    """The cache file of this checkout's catalog (None without an absolute cache directory)."""
    home = os.path.expanduser("~")
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(home, ".cache")
    if not os.path.isabs(base):
        return None
    if not os.environ.get("XDG_CACHE_HOME") and not os.path.isdir(home):
        return None  # HOME=/nonexistent (a service account): no cache, never a home made
    tag = zlib.crc32(str(catalog.REPO_ROOT).encode(errors="surrogateescape"))  # (a checkout's
    return Path(base) / "llmb" / f"catalog-{tag:08x}.marshal"  # file; its stamp says the rest)


def _stamp() -> list[Any] | None:
    """What the kept catalog was made from: sizes and modification times; None when one of
    them cannot be looked at."""
    here = Path(__file__).resolve().parent
    yaml = importlib.util.find_spec("yaml")
    sources = [catalog.GPUS_FILE, *(d / "metadata.yaml" for d in catalog.recipe_dirs()),
               *(here / name for name in _CODE), Path(files.__file__),
               Path(yamlfile.__file__),
               *([Path(yaml.origin)] if yaml is not None and yaml.origin else [])]
    try:
        seen = [(str(p), (st := os.stat(p)).st_size, st.st_mtime_ns) for p in sources]
    except OSError:
        return None
    return [VERSION, sys.version, [list(s) for s in seen]]


_primed: list[bool] = []  # prime's answer, once a process


def prime() -> bool:
    """Give the catalog what the cache keeps, when it is still what loading would find."""
    if not _primed:
        _primed.append(_prime())
    return _primed[0]


def _prime() -> bool:
    where, stamp = _where(), _stamp()
    if where is None or stamp is None:
        return False
    try:
        st = os.stat(where)
        if st.st_uid != os.geteuid() or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            return False
        kept = marshal.loads(files.read_bounded(where, MAX_BYTES))
        if not isinstance(kept, dict) or kept.get("stamp") != stamp:
            return False
        catalog.prime(kept["gpus"], {Path(k): v for k, v in kept["recipes"].items()})
    except (OSError, ValueError, KeyError, TypeError, AttributeError, EOFError, LlmbError):
        return False
    return True


def store() -> None:
    """Keep what the catalog loaded (all of it valid: the caller's word) for the next run;
    nothing when it would not read back the same or cannot be written."""
    where, stamp = _where(), _stamp()
    gpus, recipes = catalog.loaded()
    mine = [d.resolve() for d in catalog.recipe_dirs()]  # (not a folder another caller loaded)
    if where is None or stamp is None or gpus is None or not set(mine) <= recipes.keys():
        return
    kept = {"stamp": stamp, "gpus": gpus, "recipes": {str(d): recipes[d] for d in mine}}
    try:
        data = marshal.dumps(kept)
        if marshal.loads(data) != kept:  # (a value marshal does not keep as it is)
            return
        where.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        files.atomic_write(where, data, mode=files.PRIVATE)
    except (OSError, ValueError, TypeError, EOFError):
        return
