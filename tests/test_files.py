"""llmb.files: atomic replacement with the mode set before the first byte."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from llmb import files


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
