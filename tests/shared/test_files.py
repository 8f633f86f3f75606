"""llmb.shared.files: atomic replacement with the mode set before the first byte."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from deadline import deadline
from llmb.shared import files


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_private_files_are_0600_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        files.write_private(tmp_path / "secret", "hf_token\n")
    finally:
        os.umask(old)
    assert mode(tmp_path / "secret") == 0o600
    assert (tmp_path / "secret").read_text() == "hf_token\n"


def test_replacing_keeps_the_asked_mode_and_leaves_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "cfg.yaml"
    target.write_text("old")
    target.chmod(0o644)
    files.write_private(target, b"new")
    assert target.read_bytes() == b"new" and mode(target) == 0o600
    files.atomic_write(target, "x", files.EXECUTABLE)
    assert mode(target) == 0o755
    assert [p.name for p in tmp_path.iterdir()] == ["cfg.yaml"]


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "state.json"
    target.write_text("old")
    with pytest.raises(TypeError):
        files.atomic_write(target, 12345)  # type: ignore[arg-type]
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]


# Names the old helper wrote its temporary file to (predictable: the target and this pid).
def _predicted(target: Path) -> list[Path]:
    return [target.with_name(f".{target.name}.tmp.{os.getpid()}"),
            target.with_name(f".{target.name}.tmp")]


PLANTS = ["link-at-temporary-name", "link-at-final-name", "file-of-another-user",
          "fifo-at-temporary-name"]


@pytest.mark.parametrize("plant", PLANTS)
def test_nothing_planted_in_a_shared_directory_redirects_or_exposes_a_write(
        tmp_path: Path, plant: str) -> None:
    """Another user of a shared report directory plants a link (or a file of their own) where
    the writer would put its temporary file or at the final name: the file the link points to
    keeps its content and its mode, the planted file is never re-moded, and the target ends up
    a regular file holding what was written."""
    shared = tmp_path / "shared"
    shared.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("the caller's own file\n")
    victim.chmod(0o600)
    target = shared / "report.md"
    planted: list[Path] = []
    for name in _predicted(target) if plant != "link-at-final-name" else [target]:
        if plant.startswith("link"):
            name.symlink_to(victim)
        elif plant.startswith("fifo"):
            os.mkfifo(name)
        else:
            name.write_text("someone else's\n")
            name.chmod(0o600)
            if os.geteuid() == 0:
                os.chown(name, 65534, 65534)
        planted.append(name)
    with deadline(10):
        files.atomic_write(target, "report\n", files.PUBLIC)
    assert victim.read_text() == "the caller's own file\n" and mode(victim) == 0o600
    assert target.read_text() == "report\n" and not target.is_symlink()
    assert mode(target) == files.PUBLIC
    for name in planted:
        if name != target and plant == "file-of-another-user":
            assert mode(name) == 0o600 and name.read_text() == "someone else's\n"


def test_temporary_names_are_not_predictable(tmp_path: Path, monkeypatch) -> None:
    seen: list[str] = []
    real = os.replace

    def spy(src, dst):
        seen.append(os.path.basename(src))
        return real(src, dst)

    monkeypatch.setattr(os, "replace", spy)
    for _ in range(3):
        files.atomic_write(tmp_path / "f", "x")
    assert len(set(seen)) == 3 and all(str(os.getpid()) not in n for n in seen)


def test_a_missing_parent_is_an_oserror(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        files.atomic_write(tmp_path / "no" / "such" / "file", "x")


def test_path_problem_says_what_is_wrong(tmp_path: Path) -> None:
    a_file = tmp_path / "f"
    a_file.write_text("x")
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "gone")
    assert files.path_problem(tmp_path) is None
    assert files.path_problem(a_file, "file") is None
    assert files.path_problem(a_file) == "is a file, not a directory"
    assert files.path_problem(tmp_path, "file") == "is a directory, not a file"
    assert files.path_problem(tmp_path / "none") == "does not exist"
    assert files.path_problem(a_file / "below") == "does not exist"
    assert files.path_problem(loop) == "is a symbolic link loop"
    assert files.path_problem(dangling) == "is a dangling symbolic link"
    too_long = tmp_path / ("x" * 300)  # the OS refuses to look: said, never raised
    assert files.path_problem(too_long) == "cannot be read (File name too long)"


def test_read_bounded_reads_a_regular_file_up_to_its_bound(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"x" * 10)
    assert files.read_bounded(path, 10) == b"x" * 10
    with pytest.raises(files.FileRefused, match=r"is larger than 9 bytes$"):
        files.read_bounded(path, 9)


def test_read_bounded_refuses_what_is_not_a_regular_file(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # no writer: a blocking open would wait for ever
    for path in (fifo, "/dev/zero", tmp_path):
        with pytest.raises(files.FileRefused) as err:
            files.read_bounded(path, 1 << 20)
        assert err.value.reason in ("is not a regular file", "cannot be read (Is a directory)")
    with pytest.raises(files.FileRefused) as err:
        files.read_bounded(tmp_path / "none", 1)
    assert err.value.missing and str(err.value).endswith("(No such file or directory)")
