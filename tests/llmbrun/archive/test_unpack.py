"""llmb.llmbrun.archive.unpack: which members of an archive nobody vouches for are refused, and what
extract writes (private directories and files, each created once). The archives here are
built with tarfile, as a crafted one would be; whole archives made by llmb-run archive are
checked in test_verify_archive.py and test_verify_archive_hostile.py."""

from __future__ import annotations

import io
import stat
import tarfile
from pathlib import Path

import pytest
from llmb.llmbrun.archive import unpack


def member(name: str, kind: bytes = tarfile.REGTYPE, data: bytes = b"x",
           link: str = "") -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    info.linkname = link
    return info, data


def archive(path: Path, *members: tuple[tarfile.TarInfo, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if info.isfile() else None)
    return path


@pytest.mark.parametrize(("name", "kind", "link", "why"), [
    ("/etc/passwd", tarfile.REGTYPE, "", "an absolute path"),
    ("llmb-archive/../x", tarfile.REGTYPE, "", "a path with '..'"),
    ("elsewhere/x", tarfile.REGTYPE, "", "a path outside llmb-archive/"),
    ("llmb-archive/a\nb", tarfile.REGTYPE, "", "control characters"),
    ("llmb-archive/l", tarfile.SYMTYPE, "/etc", "a link (to /etc)"),
    ("llmb-archive/h", tarfile.LNKTYPE, "llmb-archive/x", "a link"),
    ("llmb-archive/f", tarfile.FIFOTYPE, "", "not a regular file or directory"),
    ("llmb-archive/./x", tarfile.REGTYPE, "", "not the plain spelling"),
    ("llmb-archive//x", tarfile.REGTYPE, "", "not the plain spelling"),
    ("llmb-archive/" + "n" * 300, tarfile.REGTYPE, "", "longer than a file system allows"),
    ("llmb-archive/" + "d/" * 70 + "x", tarfile.REGTYPE, "", "more than 64 directories deep"),
])
def test_an_unsafe_member_is_refused_by_name(name: str, kind: bytes, link: str,
                                             why: str) -> None:
    info, _ = member(name, kind, link=link)
    found = unpack.unsafe(info)
    assert found is not None and why in found


def test_a_plain_member_is_safe() -> None:
    assert unpack.unsafe(member("llmb-archive/runs/a/log-1.out")[0]) is None


def test_a_member_given_twice_or_under_a_file_refuses_the_archive(tmp_path: Path) -> None:
    twice = archive(tmp_path / "twice.tar.gz", member("llmb-archive/x"), member("llmb-archive/x"))
    under = archive(tmp_path / "under.tar.gz", member("llmb-archive/x"),
                    member("llmb-archive/x/y"))
    for path, why in ((twice, "twice"), (under, "is a file in the archive")):
        with tarfile.open(path) as tar, pytest.raises(unpack.UnsafeArchive, match=why) as err:
            unpack.safe_members(tar)
        assert "nothing was extracted" in str(err.value) and "\n" not in str(err.value)


def test_extract_makes_every_directory_and_file_private(tmp_path: Path) -> None:
    """No directory member at all: each directory on the way is made 0700 too."""
    path = archive(tmp_path / "a.tar.gz", member("llmb-archive/runs/w/exp/log-1.out", data=b"ok"))
    dest = tmp_path / "out"
    dest.mkdir(mode=0o700)
    with tarfile.open(path) as tar:
        members, has_index = unpack.safe_members(tar)
        unpack.extract(tar, members, dest)
    assert not has_index
    made = dest / "llmb-archive" / "runs" / "w" / "exp" / "log-1.out"
    assert made.read_bytes() == b"ok" and stat.S_IMODE(made.stat().st_mode) == 0o600
    for d in made.relative_to(dest).parents:
        if str(d) != ".":
            assert stat.S_IMODE((dest / d).stat().st_mode) == 0o700, d
