"""Deep directory trees and links into /proc, /sys or /dev are walked without recursion and
without following such a link, on every front that walks a tree: the analyzer (a run dir,
an experiments dir, a whole install), llmb-run archive (each run directory) and
verify-archive (the unpacked tree). Python 3.11's os.walk and Path.rglob recurse: a tree some
1000 directories deep ended each of them in a RecursionError traceback. A followed link to /
or to any directory above the tree walked is not followed either: it would walk the whole file
system."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import fakeinstall
import pytest
import runinstall
from analyzercli import run_analyzer
from llmb.analysis import discover
from llmb.llmbrun.archive.format import INDEX, ROOT
from llmb.shared import files

DEPTH = 1500  # "d/" x 1500: 3000 characters, inside PATH_MAX
PATH = f"{Path(sys.executable).parent}:/usr/bin:/bin"


def deep(top: Path, depth: int = DEPTH) -> Path:
    """top/d/d/.../d (depth levels) with a .out file at the bottom; made with relative steps."""
    here = os.getcwd()
    os.makedirs(top, exist_ok=True)
    os.chdir(top)
    try:
        for _ in range(depth):
            os.mkdir("d")
            os.chdir("d")
        Path("bottom.out").write_text("not a training log\n")
        return Path(os.getcwd())
    finally:
        os.chdir(here)


@pytest.fixture(autouse=True)
def removed_after(tmp_path: Path):
    """Each test's directory goes when the test ends, with rm -r: shutil.rmtree of Python
    3.11 recurses, so pytest's own clean-up of old runs would end in a RecursionError."""
    yield
    subprocess.run(["rm", "-rf", "--", str(tmp_path)], check=True)


@pytest.fixture
def install(tmp_path: Path) -> tuple[Path, Path]:
    root = fakeinstall.make_install(tmp_path / "install")
    run = fakeinstall.make_run(root, "101")
    deep(run / "deep")
    for target in ("/proc", "/sys", "/dev", "/"):
        (run / f"link{target.replace('/', '-')}").symlink_to(target)
    return root, run


def test_walk_never_recurses(tmp_path):
    deep(tmp_path / "t")
    assert sum(1 for _ in files.walk(tmp_path / "t")) == DEPTH + 1


def test_the_analyzers_walk_never_recurses_and_never_enters_a_pseudo_file_system(tmp_path):
    bottom = deep(tmp_path / "t")
    (tmp_path / "t" / "proc").symlink_to("/proc")
    (tmp_path / "t" / "loop").symlink_to(tmp_path / "t")
    found = [(f.path, f.problem) for f in discover.walk([str(tmp_path / "t")])]
    assert found == [(str(tmp_path / "t" / "proc"), files.INTO_VIRTUAL),
                     (str(bottom / "bottom.out"), None)]


@pytest.mark.parametrize("target", ["/", "../..", "../../..", "real-above"])
def test_a_followed_link_never_leads_above_the_tree(tmp_path, target):
    """A link to /, to a parent or to the directory holding the DIR (through its real path or
    the path as given) is reported, not walked: the analyzer's walk stays within the tree and
    what it links to elsewhere."""
    real = tmp_path / "real" / "t"
    (real / "sub").mkdir(parents=True)
    (tmp_path / "real" / "sibling").mkdir()
    (tmp_path / "real" / "sibling" / "log-1.out").write_text("x\n")
    (tmp_path / "given").symlink_to(real)
    elsewhere = tmp_path / "scratch" / "run"
    elsewhere.mkdir(parents=True)
    (elsewhere / "log-2.out").write_text("x\n")
    (real / "scratch-run").symlink_to(elsewhere)
    (real / "sub" / "up").symlink_to(tmp_path / "real" if target == "real-above" else target)
    found = [(f.path, f.problem) for f in discover.walk([str(tmp_path / "given")])]
    given = tmp_path / "given"
    assert found == [(str(given / "scratch-run" / "log-2.out"), None),
                     (str(given / "sub" / "up"), files.INTO_ANCESTOR)]


def test_a_link_is_listed_never_entered(tmp_path):
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "root").symlink_to("/")
    assert list(files.walk(tmp_path / "t")) == [(str(tmp_path / "t"), ["root"], [])]


@pytest.mark.parametrize("where", ["run", "experiments", "install"])
def test_the_analyzer(install, where):
    root, run = install
    target = {"run": run, "experiments": run.parent.parent, "install": root / "workloads"}
    proc = run_analyzer(["--format=json", str(target[where])], timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert files.INTO_VIRTUAL in proc.stdout and files.INTO_ANCESTOR in proc.stdout


def test_archive(install, tmp_path):
    root, _ = install
    out = tmp_path / "a.tar.gz"
    proc = runinstall.run(["archive", "--output", str(out)], root, timeout=300, path=PATH)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr and out.is_file()
    assert "symbolic links" in proc.stdout


def test_verify_archive_of_a_deep_crafted_tree(tmp_path):
    path = tmp_path / "deep.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        info = tarfile.TarInfo(f"{ROOT}/{INDEX}")
        data = b'{"files": {}}'
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        name = f"{ROOT}/" + "d/" * DEPTH + "x"
        info = tarfile.TarInfo(name)
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    proc = runinstall.run(["verify-archive", str(path)], tmp_path, timeout=300)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr + proc.stdout
    assert "a path more than 64 directories deep" in proc.stderr
    assert len(proc.stderr.splitlines()) == 1


def test_rglob_still_recurses_here(tmp_path):
    """The reason for files.walk: on this Python, a recursive glob of such a tree fails."""
    if sys.version_info >= (3, 12):
        pytest.skip("os.walk no longer recurses from Python 3.12 on")
    deep(tmp_path / "t")
    script = f"import os; list(os.walk({str(tmp_path / 't')!r}))"
    probe = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                           timeout=120)
    assert "RecursionError" in probe.stderr
