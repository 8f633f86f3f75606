"""llmb.analysis.discover: every *.out once, links followed once, and what it remembers to do so
does not grow with the number of directories."""

from __future__ import annotations

from pathlib import Path

import pytest
from llmb.analysis import discover
from llmb.shared import files
from llmb.shared.files import LinkGuard


def touch(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("x\n")
    return path


def found(roots: list[Path]) -> list[tuple[str, str | None]]:
    return [(f.path, f.problem) for f in discover.walk([str(r) for r in roots])]


def test_every_out_file_in_name_order_and_what_cannot_be_walked(tmp_path: Path) -> None:
    a = touch(tmp_path / "b" / "log-1.out")
    b = touch(tmp_path / "a" / "log-2.out")
    touch(tmp_path / "a" / "notes.txt")
    (tmp_path / "c.out").mkdir()
    assert found([tmp_path]) == [(str(tmp_path / "c.out"), "directory"), (str(b), None),
                                 (str(a), None)]


def test_links_are_followed_once(tmp_path: Path) -> None:
    tree, outside = tmp_path / "tree", tmp_path / "outside"
    touch(tree / "run" / "log-1.out")
    touch(outside / "run" / "log-2.out")
    (tree / "linked").symlink_to(outside)
    (tree / "again").symlink_to(outside)  # a second way to the same logs
    (tree / "loop").symlink_to(tree)  # back into the tree
    (tree / "run" / "up").symlink_to(tree / "run")
    paths = [p for p, _ in found([tree])]
    assert sorted(Path(p).name for p in paths) == ["log-1.out", "log-2.out"]


def test_a_dir_given_twice_or_inside_another_is_read_once(tmp_path: Path) -> None:
    touch(tmp_path / "x" / "log-1.out")
    touch(tmp_path / "x" / "y" / "log-2.out")
    assert len(found([tmp_path / "x", tmp_path / "x"])) == 2
    assert len(found([tmp_path / "x" / "y", tmp_path / "x"])) == 2
    assert len(found([tmp_path / "x", tmp_path / "x" / "y"])) == 2


def test_a_link_to_a_directory_that_holds_the_dir_is_named_not_walked(tmp_path: Path) -> None:
    """A link to a parent of DIR (or to /: the whole file system) is not followed; nor is one
    onto /proc, /sys or /dev."""
    touch(tmp_path / "install" / "experiments" / "log-1.out")
    touch(tmp_path / "install" / "other" / "log-2.out")
    root = tmp_path / "install" / "experiments"
    (root / "whole").symlink_to(tmp_path / "install")
    (root / "slash").symlink_to("/")
    (root / "proc").symlink_to("/proc")
    assert sorted((Path(p).name, why) for p, why in found([root])) == [
        ("log-1.out", None), ("proc", files.INTO_VIRTUAL), ("slash", files.INTO_ANCESTOR),
        ("whole", files.INTO_ANCESTOR)]


def test_what_the_walk_remembers_is_per_dir_and_link_not_per_directory(tmp_path: Path) -> None:
    for n in range(300):
        touch(tmp_path / f"exp{n % 3}" / f"run{n}" / "exp" / "log-x.out")
    state = discover._Walk()
    walked = []
    for root in [str(tmp_path)]:
        state.add(root, str(tmp_path.resolve()))
        walked += list(discover._walk_root(root, state, LinkGuard(root)))
    assert len(walked) == 300
    assert len(state.walked) == 1 and len(state.prefixes) == 1


def test_missing_roots_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="does not exist; pass the experiments"):
        discover.check_roots([str(tmp_path / "nope")])
    touch(tmp_path / "file")
    with pytest.raises(FileNotFoundError, match="is not a directory"):
        discover.check_roots([str(tmp_path / "file")])
