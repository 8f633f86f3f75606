"""llmb.shared.files: atomic replacement with the mode set before the first byte."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
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
