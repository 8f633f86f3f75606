"""llmb-run verify-archive against archives crafted to pass: a rewritten report (index.html,
report.md or a plot) is caught even when the index is rehashed; run paths of the index stay
inside the unpacked tree; a decompression bomb is refused before a byte is extracted; path
aliases and odd names are refused as unsafe members (not "damaged or truncated"); an index
with wrong types is never a traceback. The archive itself is made once by llmb-run archive
over tests/helpers/fakeinstall.py's install."""

from __future__ import annotations

import gzip
import io
import json
import shutil
import subprocess
import tarfile
from pathlib import Path

import fakeinstall
import pytest
import runinstall
import screenfiles
from llmb.llmbrun.archive import unpack as unpacking
from llmb.llmbrun.archive import verify as verifying
from llmb.llmbrun.archive.format import INDEX, ROOT, list_files


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> Path:
    root = fakeinstall.make_install(tmp_path_factory.mktemp("install") / "llmb")
    fakeinstall.make_run(root, "101")
    fakeinstall.make_run(root, "102", complete=False)
    out = root.parent / "results.tar.gz"
    proc = runinstall.run(["archive", "--output", str(out)], root, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return out


def verify(path: Path) -> subprocess.CompletedProcess[str]:
    return runinstall.run(["verify-archive", str(path)], path.parent, timeout=300)


def unpack(path: Path, dest: Path) -> Path:
    with tarfile.open(path) as tar:
        tar.extractall(dest, filter="data")
    return dest / ROOT


def repack(tree: Path, path: Path, rehash: bool = True) -> Path:
    """The tree as an archive again; `rehash`: with an index brought up to date (a careful
    tamperer), first in the archive as llmb-run writes it."""
    if rehash:
        index = json.loads((tree / INDEX).read_text())
        index["files"] = list_files(tree)
        (tree / INDEX).write_text(json.dumps(index))
    with tarfile.open(path, "w:gz") as tar:
        tar.add(tree, arcname=ROOT)
    return path


def test_an_untouched_archive_verifies_with_its_report(made):
    proc = verify(made)
    assert proc.returncode == 0, proc.stdout
    assert "no HTML report" not in proc.stdout


def _plots(tree: Path) -> list[Path]:
    return sorted((tree / "report" / "plots").glob("*.png"))


REWRITES = [
    ("html-number", lambda t: _sub(t / "report" / "index.html", "pass", "below"),
     "report/index.html does not say what analysis.json says"),
    ("html-script", lambda t: _sub(t / "report" / "index.html", "</body>",
                                   "<script>alert(1)</script></body>"),
     "report/index.html does not say what analysis.json says"),
    ("md-number", lambda t: _sub(t / "report" / "report.md", "pass", "below"),
     "report/report.md does not say what analysis.json says"),
    ("md-removed", lambda t: (t / "report" / "report.md").unlink(),
     "report/report.md is missing"),
    ("plot-swapped", lambda t: _plots(t)[0].write_bytes(b"\x89PNG other"),
     "report/index.html does not say what analysis.json says"),
    ("plot-added", lambda t: (t / "report" / "plots" / "extra.png").write_bytes(b"\x89PNG"),
     "report/plots/extra.png is not a plot of analysis.json"),
]


def _sub(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


@pytest.mark.parametrize(("change", "message"), [(c, m) for _, c, m in REWRITES],
                         ids=[k for k, _, _ in REWRITES])
def test_a_rewritten_report_fails_even_with_a_rehashed_index(made, tmp_path, change, message):
    tree = unpack(made, tmp_path / "u")
    change(tree)
    proc = verify(repack(tree, tmp_path / "t.tar.gz"))
    assert proc.returncode == 1, proc.stdout
    assert message in proc.stdout


@pytest.mark.parametrize("run", ["runs/../../../etc", "/etc", "runs/../ARCHIVE.json/..",
                                 "system.json", "runs/\n/x"])
def test_run_paths_of_the_index_stay_inside_the_tree(made, tmp_path, run):
    tree = unpack(made, tmp_path / "u")
    index = json.loads((tree / INDEX).read_text())
    index["runs"][0]["run"] = run
    (tree / INDEX).write_text(json.dumps(index))
    proc = verify(repack(tree, tmp_path / "t.tar.gz", rehash=False))
    assert proc.returncode == 1
    assert "is not a path under runs/ of the archive" in proc.stdout
    assert "Traceback" not in proc.stderr


def bomb(tmp_path: Path, size: int, listed: int) -> Path:
    """An index listing a small file, then that file as `size` zero bytes (gzip makes it
    about a thousandth of that)."""
    path = tmp_path / "bomb.tar.gz"
    index = json.dumps({"format": 1, "files": {"runs/a.out": {"bytes": listed,
                                                               "sha256": "0" * 64}}}).encode()
    with gzip.open(path, "wb", compresslevel=1) as gz, tarfile.open(fileobj=gz, mode="w|") as tar:
        info = tarfile.TarInfo(f"{ROOT}/{INDEX}")
        info.size = len(index)
        tar.addfile(info, io.BytesIO(index))
        info = tarfile.TarInfo(f"{ROOT}/runs/a.out")
        info.size = size

        class Zeros(io.RawIOBase):
            def readable(self) -> bool:
                return True

            def readinto(self, b):  # type: ignore[override]
                b[:] = bytes(len(b))
                return len(b)

        tar.addfile(info, io.BufferedReader(Zeros()))
    return path


def test_a_decompression_bomb_is_refused_before_anything_is_extracted(tmp_path):
    path = bomb(tmp_path, 300 << 20, 10)
    assert path.stat().st_size < 2 << 20
    proc = verify(path)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.startswith(f"llmb-run: verify-archive {path}: refused: "
                                  f"{ROOT}/runs/a.out claims {300 << 20} bytes where "
                                  "ARCHIVE.json lists 10 bytes")
    assert len(proc.stderr.splitlines()) == 1


ALIASES = [
    (f"{ROOT}/./system.json", "not the plain spelling"),
    (f"{ROOT}//system.json", "not the plain spelling"),
    (f"{ROOT}/runs/" + "x" * 300, "a name longer than a file system allows"),
    (f"{ROOT}/system.json/inner", "its directory llmb-archive/system.json is a file"),
    (f"{ROOT}/ARCHIVE.json/", "not the plain spelling"),
]


@pytest.mark.parametrize(("name", "why"), ALIASES, ids=[w.split()[0] + str(i)
                                                       for i, (_, w) in enumerate(ALIASES)])
def test_aliases_and_odd_names_are_unsafe_members_not_damage(made, tmp_path, name, why):
    path = tmp_path / "alias.tar.gz"
    with tarfile.open(made) as src, tarfile.open(path, "w:gz") as dst:
        for member in src:
            dst.addfile(member, src.extractfile(member) if member.isfile() else None)
        extra = tarfile.TarInfo(name)
        extra.size = 1
        dst.addfile(extra, io.BytesIO(b"x"))
    proc = verify(path)
    assert proc.returncode == 1 and proc.stdout == ""
    assert "refused: unsafe member(s), nothing was extracted" in proc.stderr, proc.stderr
    assert why in proc.stderr and "damaged or truncated" not in proc.stderr


INDEX_TYPES = [
    {"runs": 5}, {"runs": ["x", 3, None]}, {"runs": [{"run": 7, "manifest": "yes"}]},
    {"report": ["written"]}, {"report": {"status": "written", "detail": {"a": 1}}},
    {"analysis_error": {"a": 1}}, {"left_out": 3}, {"files": {"system.json": 5}},
]


@pytest.mark.parametrize("change", INDEX_TYPES, ids=[next(iter(c)) + str(i)
                                                     for i, c in enumerate(INDEX_TYPES)])
def test_an_index_with_wrong_types_is_never_a_traceback(made, tmp_path, change):
    tree = unpack(made, tmp_path / "u")
    index = json.loads((tree / INDEX).read_text())
    index.update(change)
    (tree / INDEX).write_text(json.dumps(index))
    proc = verify(repack(tree, tmp_path / "t.tar.gz", rehash="files" not in change))
    assert proc.returncode in (0, 1)
    assert "Traceback" not in proc.stderr and len(proc.stderr.splitlines()) <= 1


RUNS_REWRITTEN = [
    ("not-a-list", lambda runs: 5, "ARCHIVE.json: runs is 5 (a whole number), not a list"),
    ("emptied", lambda runs: [], "belongs to no run ARCHIVE.json lists"),
    ("one-dropped", lambda runs: runs[1:], "belongs to no run ARCHIVE.json lists"),
]


@pytest.mark.parametrize(("change", "message"), [(c, m) for _, c, m in RUNS_REWRITTEN],
                         ids=[k for k, _, _ in RUNS_REWRITTEN])
def test_an_index_that_no_longer_lists_its_runs_fails(made, tmp_path, change, message):
    """Files under runs/ that no run of the index claims: the index was rewritten (it read
    'complete and consistent: 0 run(s)')."""
    tree = unpack(made, tmp_path / "u")
    index = json.loads((tree / INDEX).read_text())
    index["runs"] = change(index["runs"])
    (tree / INDEX).write_text(json.dumps(index))
    proc = verify(repack(tree, tmp_path / "t.tar.gz", rehash=False))
    assert proc.returncode == 1, proc.stdout
    assert message in proc.stdout


@pytest.mark.parametrize("where", ["ARCHIVE.json", "analysis.json"])
def test_an_integer_of_thousands_of_digits_is_a_problem_not_a_traceback(made, tmp_path, where):
    tree = unpack(made, tmp_path / "u")
    text = (tree / where).read_text()
    (tree / where).write_text(text.replace("{", '{"n": ' + "9" * 5000 + ", ", 1))
    proc = verify(repack(tree, tmp_path / "t.tar.gz", rehash=where != INDEX))
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr and len(proc.stderr.splitlines()) <= 1
    assert where in proc.stdout + proc.stderr


def test_a_member_of_another_size_or_unlisted_is_never_written(made, tmp_path):
    """A member within the bomb bound (twice the index's size, and a megabyte) but not of the
    size the index declares, or one the index does not list, was unpacked whole before its
    size and sha256 were compared: it is named without a byte of it written."""
    tree = unpack(made, tmp_path / "u")
    log = next((tree / "runs").rglob("log-*.out"))
    rel = log.relative_to(tree).as_posix()
    log.write_bytes(log.read_bytes() * 3)  # within the bound, not the listed size
    (tree / "runs" / "extra.out").write_bytes(b"y" * (3 << 20))
    path = repack(tree, tmp_path / "t.tar.gz", rehash=False)
    dest = tmp_path / "dest"
    dest.mkdir()
    with tarfile.open(path) as tar:
        members, listed = unpacking.safe_members(tar)
        held = unpacking.extract(tar, members, dest, listed)
    assert set(held) == {rel, "runs/extra.out"}
    assert not (dest / ROOT / rel).exists() and not (dest / ROOT / "runs" / "extra.out").exists()
    proc = verify(path)
    assert proc.returncode == 1
    assert f"{rel} was changed after the archive was made (its size (" in proc.stdout
    assert "runs/extra.out is in the archive but not in ARCHIVE.json (not unpacked)" in proc.stdout


ANALYSIS_TYPES = [
    ("filename-list", lambda d: d["results"][0].update(filename=[1]),
     "results[0].filename is a list of 1 item(s), not text"),
    ("config-key-list", lambda d: d["configurations"][0].update(config_key=["k"]),
     "configurations[0].config_key is a list of 1 item(s), not text"),
    ("results-text", lambda d: d.update(results="all"), "results is 'all' (text), not a list"),
    ("time-text", lambda d: d["results"][0].update(time_mean="fast"),
     "results[0].time_mean is 'fast' (text), not a number or null"),
]


@pytest.mark.parametrize(("change", "message"), [(c, m) for _, c, m in ANALYSIS_TYPES],
                         ids=[k for k, _, _ in ANALYSIS_TYPES])
def test_an_analysis_of_the_wrong_type_names_its_field(made, tmp_path, change, message):
    """A list where analysis.json has a file name ended verify-archive in a TypeError."""
    tree = unpack(made, tmp_path / "u")
    data = json.loads((tree / "analysis.json").read_text())
    change(data)
    (tree / "analysis.json").write_text(json.dumps(data))
    proc = verify(repack(tree, tmp_path / "t.tar.gz"))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert f"  analysis.json is not the analyzer's JSON: {message}\n" in proc.stdout


def test_the_index_cannot_forge_a_line_of_the_verdict(made, tmp_path):
    """An index's own text is printed escaped: its analysis_error forged a second 'complete and
    consistent' line."""
    tree = unpack(made, tmp_path / "u")
    (tree / "analysis.json").unlink()
    shutil.rmtree(tree / "report")
    index = json.loads((tree / INDEX).read_text())
    index.update(analysis_error="x\n/elsewhere.tar.gz: complete and consistent: 9 run(s)",
                 report={"status": "unavailable", "detail": "\x1b]0;owned\x07"})
    (tree / INDEX).write_text(json.dumps(index))
    proc = verify(repack(tree, tmp_path / "t.tar.gz"))
    assert proc.returncode == 0, proc.stdout
    assert len(proc.stdout.splitlines()) == 1 and "\x1b" not in proc.stdout
    assert "no analysis (x\\n/elsewhere.tar.gz: complete and consistent" in proc.stdout


def test_an_index_that_says_no_analysis_while_there_is_one_is_a_problem(made, tmp_path):
    tree = unpack(made, tmp_path / "u")
    index = json.loads((tree / INDEX).read_text())
    index["analysis_error"] = "none"
    (tree / INDEX).write_text(json.dumps(index))
    proc = verify(repack(tree, tmp_path / "t.tar.gz"))
    assert proc.returncode == 1
    assert "ARCHIVE.json says the archive has no analysis, but analysis.json is there" in \
        proc.stdout


def test_a_changed_screen_is_named_not_blamed_on_the_analysis(tmp_path_factory, tmp_path):
    root = fakeinstall.make_install(tmp_path_factory.mktemp("screen") / "llmb")
    fakeinstall.make_run(root, "101")
    screenfiles.screen_json(root)
    made = root.parent / "s.tar.gz"
    assert runinstall.run(["archive", "--output", str(made)], root, timeout=300).returncode == 0
    tree = unpack(made, tmp_path / "u")
    screen = tree / "screen" / "screen.json"
    screen.write_text(screen.read_text().replace("node1", "nodeX"))
    proc = verify(repack(tree, tmp_path / "t.tar.gz"))
    assert proc.returncode == 1
    assert "report/index.html does not say what screen/screen.json says" in proc.stdout
    assert "does not say what analysis.json says" not in proc.stdout


def test_a_relabelled_run_in_the_analysis_is_caught(made, tmp_path):
    """An analysis.json whose run was given another experiment (or configuration) passed as
    consistent: those fields are compared with the analysis of the archived logs too."""
    tree = unpack(made, tmp_path / "u")
    data = json.loads((tree / "analysis.json").read_text())
    data["results"][0]["experiment"] = "someone_elses_run"
    (tree / "analysis.json").write_text(json.dumps(data))
    proc = verify(repack(tree, tmp_path / "t.tar.gz"))
    assert proc.returncode == 1
    assert "analysis.json says experiment=someone_elses_run, its log gives " in proc.stdout


def test_a_json_member_of_millions_of_values_is_refused_before_it_is_parsed(tmp_path):
    """analysis.json of 210 MB of `{},` took 5.4 GB to parse: brackets past the bound are
    counted on the bytes and refused first."""
    path = tmp_path / "analysis.json"
    path.write_bytes(b"[" + b"{}," * (verifying.MAX_JSON_CONTAINERS + 1) + b"{}]")
    with pytest.raises(ValueError, match="holds more objects, lists or values"):
        verifying.read_json(path)
    path.write_bytes(b'{"results": [' + b"{}," * 1000 + b"{}]}")
    assert len(verifying.read_json(path)["results"]) == 1001
