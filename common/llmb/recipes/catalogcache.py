"""The recipe catalog as an earlier load parsed it, kept in the user's cache directory: a pure
speed-up, never a source of truth.

Loading the catalog imports PyYAML and parses every metadata.yaml and gpus.yaml, on every
analyzer run, for files that seldom change. `prime` takes the parsed data from
`$XDG_CACHE_HOME/llmb/` (default `~/.cache/llmb/`, none when the home folder does not exist)
instead, when that file was written from files of the same content: its stamp is a SHA-256 of
the bytes of every file the catalog is read from and of the code that reads and checks it (the
catalog's modules, llmb.shared.files and .yamlfile, PyYAML), under the same Python; a copy that
keeps sizes and modification times (`cp -p`, `rsync -a`, `tar x`) changes nothing. What it
takes is validated exactly as a load validates what it parses (llmb.recipes.catalog.prime),
so a value the current metadata would refuse is never served. `store` writes it after a load
that found everything valid; a catalog with a problem is never kept.

The file is one header line, `llmb-catalog VERSION STAMP DIGEST` (DIGEST: the SHA-256 of the
stamp and the payload), then the payload: JSON, at most MAX_BYTES read before any parsing,
mappings' keys written as JSON values (metadata keys step times by GPU count, an integer),
without NaN or infinities. Written in one step, private to the user. One that cannot be read,
written or trusted (not the user's own, writable by others, another stamp, a digest that does
not match, not this format, a value the schema refuses) is ignored without a word, and the
catalog is loaded as if there were none, then kept again. Only the analyzer uses it.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import stat
import sys
import zlib
from pathlib import Path

from llmb.recipes import catalog
from llmb.shared import files, yamlfile

VERSION = 2
MAGIC = b"llmb-catalog"
MAX_BYTES = 4 << 20  # a cache file larger than this is not ours
MAX_SOURCE = 4 << 20  # a file the catalog is made from, hashed whole (they are a few KB)
# The code that reads and validates what is kept: a change to any of it is a new catalog.
_CODE = ("catalog.py", "schema.py", "nemojob.py", "perf.py", "screenfacts.py")


def _where() -> Path | None:
    """The cache file of this checkout's catalog (None without an absolute cache directory,
    or when the home folder it would be in does not exist)."""
    base = os.environ.get("XDG_CACHE_HOME")
    if not base:
        home = os.path.expanduser("~")
        if not os.path.isabs(home) or not os.path.isdir(home):
            return None
        base = os.path.join(home, ".cache")
    if not os.path.isabs(base):
        return None
    tag = zlib.crc32(str(catalog.REPO_ROOT).encode(errors="surrogateescape"))  # (a checkout's
    return Path(base) / "llmb" / f"catalog-{tag:08x}.json"  # file; its stamp says the rest)


def _stamp() -> str | None:
    """What the kept catalog was made from: a SHA-256 of every source's path and bytes; None
    when one of them cannot be read."""
    here = Path(__file__).resolve().parent
    yaml = importlib.util.find_spec("yaml")
    sources = [catalog.GPUS_FILE, *(d / "metadata.yaml" for d in catalog.recipe_dirs()),
               *(here / name for name in _CODE), Path(files.__file__),
               Path(yamlfile.__file__),
               *([Path(yaml.origin)] if yaml is not None and yaml.origin else [])]
    seen = hashlib.sha256(f"{VERSION}\0{sys.version}".encode())
    try:
        for path in sources:
            seen.update(b"\0%s\0%s" % (os.fsencode(path), hashlib.sha256(
                files.read_bounded(path, MAX_SOURCE)).digest()))
    except files.FileRefused:
        return None
    return seen.hexdigest()


def _digest(stamp: str, payload: bytes) -> str:
    return hashlib.sha256(stamp.encode() + b"\0" + payload).hexdigest()


def _encoded(value: object) -> object:
    """Mappings' keys as JSON values (an integer key stays an integer)."""
    if isinstance(value, dict):
        return {json.dumps(k, allow_nan=False): _encoded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_encoded(v) for v in value]
    return value


def _key(pairs: list[tuple[str, object]]) -> dict[object, object]:
    out: dict[object, object] = {}
    for text, value in pairs:
        key = json.loads(text, parse_constant=_no_constant)
        if not isinstance(key, (str, int)):
            raise ValueError(f"a key {text} that metadata does not use")
        out[key] = value
    return out


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not a value metadata holds")


def _decoded(payload: bytes) -> object:
    return json.loads(payload, object_pairs_hook=_key, parse_constant=_no_constant)


_primed: list[bool] = []  # prime's answer, once a process


def prime() -> bool:
    """Give the catalog what the cache keeps, when it is still what loading would find."""
    if not _primed:
        _primed.append(_prime())
    return _primed[0]


def _prime() -> bool:
    where = _where()
    stamp = _stamp() if where is not None else None
    if where is None or stamp is None:
        return False
    try:
        st = os.stat(where)
        if st.st_uid != os.geteuid() or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            return False
        head, _, payload = files.read_bounded(where, MAX_BYTES).partition(b"\n")
        if head.split(b" ") != [MAGIC, b"%d" % VERSION, stamp.encode(),
                                _digest(stamp, payload).encode()]:
            return False
        kept = _decoded(payload)
        if not isinstance(kept, dict) or not isinstance(kept.get("recipes"), dict):
            return False
        mine = {str(d.resolve()) for d in catalog.recipe_dirs()}
        if kept["recipes"].keys() != mine:
            return False
        catalog.prime(kept.get("gpus"), {Path(k): v for k, v in kept["recipes"].items()})
    except Exception:  # a speed-up only: whatever is odd about it, the catalog is loaded
        return False
    return True


def store() -> None:
    """Keep what the catalog loaded (all of it valid: the caller's word) for the next run;
    nothing when it would not read back the same or cannot be written."""
    where = _where()
    stamp = _stamp() if where is not None else None
    gpus, recipes = catalog.loaded()
    mine = [d.resolve() for d in catalog.recipe_dirs()]  # (not a folder another caller loaded)
    if where is None or stamp is None or gpus is None or not set(mine) <= recipes.keys():
        return
    kept = {"gpus": gpus, "recipes": {str(d): recipes[d] for d in mine}}
    try:
        payload = json.dumps(_encoded(kept), allow_nan=False, separators=(",", ":")).encode()
        if _decoded(payload) != kept:  # (a value JSON does not keep as it is)
            return
        head = b" ".join([MAGIC, b"%d" % VERSION, stamp.encode(),
                          _digest(stamp, payload).encode()])
        where.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        files.atomic_write(where, head + b"\n" + payload, mode=files.PRIVATE)
    except (OSError, ValueError, TypeError, RecursionError):
        return
