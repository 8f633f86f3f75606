"""llmb.recipes.catalogcache: the catalog as an earlier load found it, taken only while the files
and the code it came from are unchanged, never a catalog with a problem, never a file that is not
the user's own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from paths import COMMON

# A fresh process each time (the catalog is loaded once a process): how it got its catalog,
# what it holds.
PROBE = """
import json, os, sys
from pathlib import Path
from llmb.recipes import catalog, catalogcache
catalog.GPUS_FILE = Path(os.environ.get("GPUS", catalog.GPUS_FILE))
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


def probe(cache: Path, gpus: Path | None = None) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": str(COMMON), "XDG_CACHE_HOME": str(cache),
           **({"GPUS": str(gpus)} if gpus else {})}
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)


def kept(cache: Path) -> Path:
    [found] = (cache / "llmb").glob("catalog-*.marshal")
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
    assert probe(tmp_path, gpus)["primed"] is False  # loaded again, and kept again
    assert probe(tmp_path, gpus)["primed"] is True
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


def test_a_home_that_does_not_exist_is_never_made_and_the_cache_skipped(tmp_path: Path) -> None:
    home = tmp_path / "nonexistent"
    env = {k: v for k, v in os.environ.items() if k != "XDG_CACHE_HOME"}
    env.update(PYTHONPATH=str(COMMON), HOME=str(home))
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, check=False,
                         capture_output=True, text=True)
    assert out.returncode == 0 and out.stderr == "", out.stderr
    assert json.loads(out.stdout)["primed"] is False
    assert not home.exists()
