"""llmb.llmbrun.archive.verify, part by part: which tar members are safe to unpack
(llmb.llmbrun.archive.unpack), how the checked members are written, and each check of an unpacked
tree (the index's files, the runs, the analysis, secrets in clear) on a small tree built here.
The whole command on archives that llmb-run made, tampered with or made hostile is in
test_pack.py and test_verify_hostile.py."""

from __future__ import annotations

import io
import json
import stat
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from llmb import manifest
from llmb.llmbrun.archive import unpack
from llmb.llmbrun.archive import verify as verify_archive
from llmb.llmbrun.archive.format import INDEX, ROOT, list_files
from llmb.llmbrun.archive.unpack import UnsafeArchive
from trainmanifests import find, make_manifest

ROOT = ROOT


def present(root: Path) -> set[str]:
    """The files of an unpacked tree, as verify-archive lists them."""
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


def member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    m = tarfile.TarInfo(name)
    m.type, m.linkname = kind, link
    return m


@pytest.mark.parametrize(("name", "kind", "why"), [
    (f"{ROOT}/runs/a/log-x_1_0.out", tarfile.REGTYPE, None),
    (f"{ROOT}/runs/a", tarfile.DIRTYPE, None),
    (f"{ROOT}/", tarfile.DIRTYPE, None),
    (f"./{ROOT}/system.json", tarfile.REGTYPE,  # tar's ./ prefix: an alias of the plain name
     f"not the plain spelling of its path ({ROOT}/system.json)"),
    (f"{ROOT}/data.bin", tarfile.CONTTYPE, None),  # a contiguous file is a regular file
    (f"{ROOT}\\..\\escaped", tarfile.REGTYPE, "an absolute path or a path with '..'"),
    (f"{ROOT}/runs/../../escaped", tarfile.REGTYPE, "an absolute path or a path with '..'"),
    ("/etc/cron.d/x", tarfile.REGTYPE, "an absolute path or a path with '..'"),
    ("", tarfile.REGTYPE, f"a path outside {ROOT}/"),
    (f"{ROOT}-evil/x", tarfile.REGTYPE, f"a path outside {ROOT}/"),
    (f"{ROOT}/bell\x07", tarfile.REGTYPE, "a name with control characters"),
    (f"{ROOT}/del\x7f", tarfile.REGTYPE, "a name with control characters"),
    (f"{ROOT}/fifo", tarfile.FIFOTYPE, "not a regular file or directory (a device or a fifo)"),
    (f"{ROOT}/sda", tarfile.BLKTYPE, "not a regular file or directory (a device or a fifo)"),
])
def test_which_members_are_safe(name: str, kind: bytes, why: str | None) -> None:
    assert unpack.unsafe(member(name, kind)) == why


@pytest.mark.parametrize("link", [f"{ROOT}/system.json", "/etc/shadow"])
@pytest.mark.parametrize("kind", [tarfile.SYMTYPE, tarfile.LNKTYPE])
def test_a_link_is_never_safe_even_inside(kind: bytes, link: str) -> None:
    assert unpack.unsafe(member(f"{ROOT}/l", kind, link)) == (
        f"a link (to {link}); an archive holds no links")


def tar_of(tmp_path: Path, members: list[tuple[tarfile.TarInfo, bytes]]) -> Path:
    path = tmp_path / "a.tar"
    with tarfile.open(path, "w") as tar:
        for m, data in members:
            m.size = len(data) if m.isfile() else 0
            tar.addfile(m, io.BytesIO(data) if m.isfile() else None)
    return path


def test_every_problem_is_counted_and_the_first_three_named(tmp_path: Path) -> None:
    path = tar_of(tmp_path, [(member(f"/x{i}"), b"") for i in range(5)])
    with tarfile.open(path) as tar, pytest.raises(UnsafeArchive) as err:
        unpack.safe_members(tar)
    assert str(err.value) == (
        "unsafe member(s), nothing was extracted: /x0: an absolute path or a path with '..'; "
        "/x1: an absolute path or a path with '..'; /x2: an absolute path or a path with '..' "
        "(and 2 more)")


def test_a_file_given_twice_is_refused_a_directory_listed_again_is_not(tmp_path: Path) -> None:
    path = tar_of(tmp_path, [(member(f"{ROOT}/a.json"), b"{}"),
                             (member(f"{ROOT}/a.json"), b"[]")])
    with tarfile.open(path) as tar, pytest.raises(UnsafeArchive, match="in the archive twice"):
        unpack.safe_members(tar)
    path = tar_of(tmp_path, [(member(f"{ROOT}/runs/", tarfile.DIRTYPE), b""),
                             (member(f"{ROOT}/runs", tarfile.DIRTYPE), b"")])
    with tarfile.open(path) as tar:
        assert len(unpack.safe_members(tar)[0]) == 2


def extracted(tmp_path: Path, members: list[tuple[tarfile.TarInfo, bytes]]) -> Path:
    path = tar_of(tmp_path, members)
    dest = tmp_path / "dest"
    dest.mkdir()
    with tarfile.open(path) as tar:
        unpack.extract(tar, unpack.safe_members(tar)[0], dest)
    return dest


def test_checked_members_are_written_private(tmp_path: Path) -> None:
    dest = extracted(tmp_path, [(member(ROOT, tarfile.DIRTYPE), b""),
                                (member(f"{ROOT}/runs", tarfile.DIRTYPE), b""),
                                (member(f"{ROOT}/runs/log-x_1_0.out"), b"step 1\n"),
                                (member(f"{ROOT}/system.json"), b"{}")])
    modes = {p.relative_to(dest).as_posix(): stat.S_IMODE(p.stat().st_mode)
             for p in dest.rglob("*")}
    assert modes == {ROOT: 0o700, f"{ROOT}/runs": 0o700, f"{ROOT}/runs/log-x_1_0.out": 0o600,
                     f"{ROOT}/system.json": 0o600}
    assert (dest / ROOT / "runs" / "log-x_1_0.out").read_bytes() == b"step 1\n"


def test_a_file_may_come_before_its_folders(tmp_path: Path) -> None:
    dest = extracted(tmp_path, [(member(f"{ROOT}/runs/a/log-x_1_0.out"), b"step 1\n"),
                                (member(f"{ROOT}/runs", tarfile.DIRTYPE), b"")])
    log = dest / ROOT / "runs" / "a" / "log-x_1_0.out"
    assert log.read_bytes() == b"step 1\n" and stat.S_IMODE(log.stat().st_mode) == 0o600
    assert stat.S_IMODE(log.parent.stat().st_mode) == 0o700


# --- the checks of an unpacked tree -----------------------------------------------------------

RUN = "runs/pretrain_nemotron4/e/e_1744"


def make_tree(root: Path, cluster_type: str = "slurm") -> Path:
    """An unpacked archive with one run as llmb's launch leaves it, and its index."""
    run = root / RUN
    m = make_manifest(*find("nemotron", "15b", "fp8", "h100", 16), cluster_type=cluster_type)
    manifest.write(m, manifest.path_in(run))
    (run / "e").mkdir()
    (run / "e" / "log-acct.e_7_0.out").write_text("Training epoch 0, iteration 0/49\n")
    if cluster_type == "slurm":
        (run / "e_sbatch.sh").write_text("#!/bin/bash\n#SBATCH --nodes=2\n")
    (root / "system.json").write_text("{}\n")
    index = {"format": 1, "files": list_files(root), "runs": [{"run": RUN, "manifest": True}],
             "analysis_error": "no log to analyze", "report": {"status": "skipped"}}
    (root / INDEX).write_text(json.dumps(index))
    return root


def index_of(root: Path) -> dict[str, Any]:
    return json.loads((root / INDEX).read_text())


def test_a_whole_tree_has_no_problem(tmp_path: Path) -> None:
    root = make_tree(tmp_path / ROOT)
    assert verify_archive.verify_tree(root) == ([], index_of(root))
    assert verify_archive.verify_tree(make_tree(tmp_path / "local", "local"))[0] == []


def test_files_missing_changed_or_added(tmp_path: Path) -> None:
    root = make_tree(tmp_path / ROOT)
    (root / "system.json").write_text("{}\n\n")  # another size
    log = root / RUN / "e" / "log-acct.e_7_0.out"
    log.write_text(log.read_text().replace("0/49", "9/49"))  # same size, another hash
    (root / RUN / "e_sbatch.sh").unlink()
    (root / "notes.txt").write_text("x")
    problems, present = verify_archive.check_files(root, index_of(root)["files"])
    assert problems == [
        f"{RUN}/e/log-acct.e_7_0.out was changed after the archive was made (its size or sha256 "
        "differs from ARCHIVE.json)",
        f"{RUN}/e_sbatch.sh is listed in ARCHIVE.json but missing",
        "system.json was changed after the archive was made (its size or sha256 differs from "
        "ARCHIVE.json)",
        "notes.txt is in the archive but not in ARCHIVE.json"]
    assert INDEX not in present and "notes.txt" in present


@pytest.mark.parametrize(("change", "problem"), [
    (lambda root, index: index["runs"].append({"run": "/etc", "manifest": True}),
     "run /etc of ARCHIVE.json is not a path under runs/ of the archive"),
    (lambda root, index: index["runs"].append({"run": "runs/gone", "manifest": True}),
     "run runs/gone of ARCHIVE.json is missing"),
    (lambda root, index: index["runs"].append("runs/x"),
     "run  of ARCHIVE.json is not a path under runs/ of the archive"),
    (lambda root, index: manifest.path_in(root / RUN).unlink(),
     f"{RUN}: no llmb_manifest.json"),
    (lambda root, index: manifest.path_in(root / RUN).write_text("{"),
     f"{RUN}: llmb_manifest.json is not valid JSON"),
    (lambda root, index: (root / RUN / "e" / "log-acct.e_7_0.out").unlink(),
     f"{RUN}: its manifest has no training log (log-*.out): the job never wrote one, or the "
     "log was left out"),
    (lambda root, index: (root / RUN / "e_sbatch.sh").unlink(),
     f"{RUN}: no job script (*_sbatch.sh)"),
])
def test_each_run_is_checked(tmp_path: Path, change: Callable[[Path, dict], object],
                             problem: str) -> None:
    root = make_tree(tmp_path / ROOT)
    index = index_of(root)
    change(root, index)
    problems = verify_archive.check_runs(root, index, present(root))
    assert len(problems) == 1 and problems[0].startswith(problem), problems


def test_a_run_made_without_llmbs_launch_is_not_held_to_a_manifest(tmp_path: Path) -> None:
    root = make_tree(tmp_path / ROOT)
    manifest.path_in(root / RUN).unlink()
    assert verify_archive.check_runs(root, {"runs": [{"run": RUN, "manifest": False}]},
                                      present(root)) == []


@pytest.mark.parametrize(("stored", "fresh", "problems"), [
    ({"results": [{"filename": "a", "time_mean": 9.3, "status": "Success"}]},
     {"results": [{"filename": "a", "time_mean": 9.3 * (1 + 1e-12), "status": "Success"}]}, []),
    ({"results": [{"filename": "a", "time_mean": 9.3, "status": "Success"}]},
     {"results": [{"filename": "a", "time_mean": 4.65, "status": "Failed"}]},
     ["a: analysis.json says status=Success, its log gives Failed"]),  # the first key only
    ({"results": [{"filename": "a", "suspect_nodes": ["n1"]}]},
     {"results": [{"filename": "a", "suspect_nodes": []}]},
     ["a: analysis.json says suspect_nodes=['n1'], its log gives []"]),
    ({"results": [{"filename": "a"}, "junk"]}, {"results": [{"filename": "b"}]},
     ["analysis.json has a result for a, but there is no such log",
      "b is not in analysis.json"]),
    ({"configurations": [{"config_key": "k", "verdict": "pass"}]},
     {"configurations": [{"config_key": "k", "verdict": "below"}, {"config_key": "new",
                                                                   "verdict": "pass"}]},
     ["configuration k: analysis.json says verdict=pass, the logs give below",
      "configuration new: analysis.json says verdict=None, the logs give pass"]),
    ({}, {}, []),
])
def test_the_stored_analysis_against_a_fresh_one(stored: dict[str, Any], fresh: dict[str, Any],
                                                 problems: list[str]) -> None:
    assert verify_archive.compare_analysis(stored, fresh) == problems


def test_an_archive_without_analysis_says_why_instead(tmp_path: Path) -> None:
    root = make_tree(tmp_path / ROOT)
    assert verify_archive.check_analysis(root, index_of(root)) == []
    assert verify_archive.check_analysis(root, {"analysis_error": None}) == [
        "analysis.json is missing or not JSON"]


def test_secrets_in_clear_are_named_once_per_file_never_shown(tmp_path: Path) -> None:
    root = make_tree(tmp_path / ROOT)
    token = "hf_" + "Ab1" * 12
    script = root / RUN / "e_sbatch.sh"
    script.write_text(script.read_text() + f"export HF_TOKEN={token}\nexport X={token}\n")
    (root / "analysis.json").write_text(json.dumps({"note": f"HF_TOKEN={token}"}))
    (root / "report").mkdir()
    (root / "report" / "index.html").write_text(f"<p>{token}</p>")
    names = {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}
    problems = verify_archive.check_secrets(root, names)
    assert problems == [f"{RUN}/e_sbatch.sh line 3: HF_TOKEN in clear"]
    assert token not in repr(problems)


@pytest.mark.parametrize("index", ["[]", '{"files": []}', "not json", None])
def test_without_a_readable_index_it_is_no_llmb_archive(tmp_path: Path,
                                                        index: str | None) -> None:
    root = make_tree(tmp_path / ROOT)
    if index is None:
        (root / INDEX).unlink()
    else:
        (root / INDEX).write_text(index)
    assert verify_archive.verify_tree(root) == (
        ["no readable ARCHIVE.json: not an llmb archive, or its index was removed"], None)


def test_a_report_the_index_promises_must_be_there(tmp_path: Path) -> None:
    root = make_tree(tmp_path / ROOT)
    index = index_of(root)
    index["report"] = {"status": "written"}
    (root / INDEX).write_text(json.dumps(index))
    assert verify_archive.verify_tree(root)[0] == ["report/index.html is missing"]
