"""llmb.recipes.catalogcache: the catalog as an earlier load found it, taken only while the files
and the code it came from hold the same bytes, validated as a load validates, never a catalog
with a problem, never a file that is not the user's own; anything odd about it is ignored."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from llmb.recipes import catalogcache
from paths import COMMON

# A fresh process each time (the catalog is loaded once a process): how it got its catalog,
# what it holds.
PROBE = """
import json, os, sys
from pathlib import Path
from llmb.recipes import catalog, catalogcache
catalog.GPUS_FILE = Path(os.environ.get("GPUS", catalog.GPUS_FILE))
if "RECIPES" in os.environ:
    catalog.recipe_dirs = lambda root=None: sorted(
        p.parent for p in Path(os.environ["RECIPES"]).glob("*/metadata.yaml"))
primed = catalogcache.prime()
try:
    recipes = catalog.all_recipes()
except catalog.CatalogError as exc:
    sys.exit(print(json.dumps({"error": str(exc)})))
gpus = {name: dict(g.peak_tflops) for name, g in (
    (n, catalog.get_gpu_type(n)) for n in catalog.gpu_types())}
if not primed:
    catalogcache.store()
print(json.dumps({"primed": primed, "yaml": "yaml" in sys.modules,
                  "recipes": {r.name: repr(r.data) for r in recipes}, "gpus": gpus}))
"""


def probe(cache: Path, gpus: Path | None = None, recipes: Path | None = None,
          **env_: str) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": str(COMMON), "XDG_CACHE_HOME": str(cache),
           **({"GPUS": str(gpus)} if gpus else {}),
           **({"RECIPES": str(recipes)} if recipes else {}), **env_}
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)


def kept(cache: Path) -> Path:
    [found] = (cache / "llmb").glob("catalog-*.json")
    return found


def test_a_second_run_takes_the_catalog_as_the_first_loaded_it(tmp_path: Path) -> None:
    first = probe(tmp_path)
    assert first["primed"] is False and first["yaml"] is True
    assert oct(kept(tmp_path).stat().st_mode & 0o777) == "0o600"
    assert oct((tmp_path / "llmb").stat().st_mode & 0o777) == "0o700"
    second = probe(tmp_path)
    assert second["primed"] is True and second["yaml"] is False  # no YAML read at all
    assert (second["recipes"], second["gpus"]) == (first["recipes"], first["gpus"])


def test_a_file_it_was_made_from_that_changed_is_read_again(tmp_path: Path) -> None:
    gpus = tmp_path / "gpus.yaml"
    gpus.write_bytes((COMMON / "gpus.yaml").read_bytes())
    first = probe(tmp_path, gpus)
    st = gpus.stat()
    os.utime(gpus, ns=(st.st_atime_ns, st.st_mtime_ns + 1000))
    assert probe(tmp_path, gpus)["primed"] is True  # the same bytes: the same catalog
    gpus.write_bytes(gpus.read_bytes().replace(b"989", b"990", 1))  # content and size change
    changed = probe(tmp_path, gpus)
    assert changed["primed"] is False and changed["gpus"] != first["gpus"]


def test_a_catalog_with_a_problem_is_never_kept(tmp_path: Path) -> None:
    gpus = tmp_path / "gpus.yaml"
    gpus.write_text("h100:\n  gpus_per_node: 8\n")
    assert "error" in probe(tmp_path, gpus)
    assert not list(tmp_path.glob("llmb/catalog-*"))
    assert "error" in probe(tmp_path, gpus)


@pytest.mark.parametrize("spoil", ["group-writable", "garbage", "empty"])
def test_a_cache_file_that_cannot_be_trusted_or_read_is_ignored(tmp_path: Path,
                                                               spoil: str) -> None:
    first = probe(tmp_path)
    where = kept(tmp_path)
    if spoil == "group-writable":
        where.chmod(0o620)
    else:
        where.write_bytes(b"\x00not marshal" if spoil == "garbage" else b"")
    again = probe(tmp_path)
    assert again["primed"] is False and again["recipes"] == first["recipes"]


def test_no_cache_directory_no_cache(tmp_path: Path) -> None:
    (tmp_path / "llmb").write_text("a file where the directory would be")
    assert probe(tmp_path)["primed"] is False
    assert probe(tmp_path)["primed"] is False


def recipes_copy(tmp_path: Path) -> Path:
    root = tmp_path / "recipes"
    for meta in sorted(COMMON.parent.glob("*/metadata.yaml")):
        (root / meta.parent.name).mkdir(parents=True)
        shutil.copy2(meta, root / meta.parent.name / "metadata.yaml")
    return root


def test_a_reference_edited_keeping_size_and_time_is_served_as_it_now_is(tmp_path: Path) -> None:
    """`cp -p`, `rsync -a`, `tar x` keep a file's modification time: a step time changed in
    place, of the same size, kept the old reference (and a run judged `pass` that was `below`)."""
    root = recipes_copy(tmp_path)
    meta = root / "llama3.1" / "metadata.yaml"
    assert probe(tmp_path, recipes=root)["primed"] is False
    assert "12.27" in probe(tmp_path, recipes=root)["recipes"]["llama3.1"]
    st, text = meta.stat(), meta.read_bytes()
    meta.write_bytes(text.replace(b"{8: 12.27,", b"{8: 19.27,", 1))
    os.utime(meta, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (meta.stat().st_size, meta.stat().st_mtime_ns) == (st.st_size, st.st_mtime_ns)
    again = probe(tmp_path, recipes=root)
    assert again["primed"] is False
    assert "19.27" in again["recipes"]["llama3.1"] and "12.27" not in again["recipes"]["llama3.1"]
    assert probe(tmp_path, recipes=root)["recipes"] == again["recipes"]


def rewritten(where: Path, change: Callable[[dict[str, Any]], None]) -> None:
    """The kept file with its payload changed and its digest made right again: only the
    schema stands between such a file and the catalog."""
    data = catalogcache._decoded(where.read_bytes().partition(b"\n")[2])
    assert isinstance(data, dict)
    change(data)
    planted(where, json.dumps(catalogcache._encoded(data)).encode())


def planted(where: Path, payload: bytes) -> None:
    """`payload` under the kept file's header, its digest right."""
    magic, version, stamp, _digest = where.read_bytes().partition(b"\n")[0].split(b" ")
    digest = catalogcache._digest(stamp.decode(), payload).encode()
    where.write_bytes(b" ".join([magic, version, stamp, digest]) + b"\n" + payload)


def first_recipe(data: dict[str, Any]) -> dict[str, Any]:
    return next(iter(data["recipes"].values()))


def nan_reference(data: dict[str, Any]) -> None:
    published = next(r for r in data["recipes"].values() if r["references"])
    times = published["references"][0]["step_time"]
    times[next(iter(times))] = float("nan")


SPOILED: dict[str, Callable[[Path], None]] = {
    # marshal's list of 2**31 items in 5 bytes (the format before): MemoryError on every log
    "huge list claim": lambda where: where.write_bytes(b"[\xff\xff\xff\x7f"),
    "empty recipe": lambda where: rewritten(where, lambda d: first_recipe(d).clear()),
    "NaN reference": lambda where: rewritten(where, nan_reference),
    "a recipe left out": lambda where: rewritten(where, lambda d: d["recipes"].popitem()),
    "no GPU types": lambda where: rewritten(where, lambda d: d.update(gpus=[])),
    "a planted stamp, content altered": lambda where: where.write_bytes(
        where.read_bytes().replace(b"12.27", b"19.27", 1)),
    "truncated": lambda where: where.write_bytes(where.read_bytes()[:-200]),
    "not the format": lambda where: where.write_bytes(b"llmb-catalog 2\n{}"),
    "a deep nest": lambda where: planted(where, b"[" * 100_000 + b"]" * 100_000),
    "a huge number": lambda where: planted(where, b'{"\\"gpus\\"":' + b"9" * 5000 + b"}"),
    "another version": lambda where: where.write_bytes(where.read_bytes().replace(
        b"llmb-catalog 2 ", b"llmb-catalog 3 ", 1)),
}


@pytest.mark.parametrize("spoil", SPOILED)
def test_a_malformed_cache_is_ignored_and_rebuilt(tmp_path: Path, spoil: str) -> None:
    first = probe(tmp_path)
    where = kept(tmp_path)
    SPOILED[spoil](where)
    again = probe(tmp_path)
    assert again["primed"] is False and again["recipes"] == first["recipes"]
    assert again["gpus"] == first["gpus"]
    rebuilt = probe(tmp_path)
    assert rebuilt["primed"] is True and rebuilt["recipes"] == first["recipes"]


def test_no_home_folder_no_cache_and_no_error(tmp_path: Path) -> None:
    home = tmp_path / "nonexistent"
    env = {k: v for k, v in os.environ.items() if k != "XDG_CACHE_HOME"}
    out = subprocess.run([sys.executable, "-c", PROBE], check=True, capture_output=True,
                         text=True, env={**env, "PYTHONPATH": str(COMMON), "HOME": str(home)})
    assert json.loads(out.stdout)["primed"] is False and out.stderr == ""


def test_a_home_that_does_not_exist_is_never_made_and_the_cache_skipped(tmp_path: Path) -> None:
    home = tmp_path / "nonexistent"
    env = {k: v for k, v in os.environ.items() if k != "XDG_CACHE_HOME"}
    env.update(PYTHONPATH=str(COMMON), HOME=str(home))
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, check=False,
                         capture_output=True, text=True)
    assert out.returncode == 0 and out.stderr == "", out.stderr
    assert json.loads(out.stdout)["primed"] is False
    assert not home.exists()
