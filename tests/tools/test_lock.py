"""The lock files of the test venvs (common/requirements/*.lock, written by `make lock`): each
pins every package its requirement file names, at a version the file allows, so a requirement
changed without `make lock` fails here instead of resolving to something else in CI."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from paths import REPO

REQUIREMENTS = REPO / "common" / "requirements"
LOCKS = ("dev", "smoke", "nemo")


def named(path: Path) -> list[Requirement]:
    """The requirements a file names, with those of the files it includes (`-r`)."""
    found: list[Requirement] = []
    for raw in path.read_text().splitlines():
        line = raw.split(" #")[0].strip()
        if line.startswith("-r "):
            found += named(path.parent / line[3:].strip())
        elif line and not line.startswith("#"):
            found.append(Requirement(line))
    return found


def pins(name: str) -> dict[str, str]:
    lines = (REQUIREMENTS / f"{name}.lock").read_text().splitlines()
    return dict(line.split("==") for line in lines if not line.startswith("#"))


@pytest.mark.parametrize("name", LOCKS)
def test_every_named_package_is_pinned_within_its_range(name: str) -> None:
    pinned = pins(name)
    for req in named(REQUIREMENTS / f"{name}.txt"):
        version = pinned.get(canonicalize_name(req.name))
        assert version is not None, f"{name}.lock pins no {req.name}: run make lock"
        assert req.specifier.contains(version, prereleases=True), (
            f"{name}.lock pins {req.name}=={version}, outside {req}: run make lock")


def test_dev_test_tools_are_in_the_dev_lock() -> None:
    """pytest-xdist, for a parallel unit tier, is part of the development venv."""
    assert "pytest-xdist" in pins("dev") and "execnet" in pins("dev")


def test_the_two_locks_of_one_venv_agree() -> None:
    """dev.txt and smoke.txt go into one venv: a package both need has one version."""
    dev, smoke = pins("dev"), pins("smoke")
    assert smoke and {pkg: dev[pkg] for pkg in smoke if pkg in dev} == {
        pkg: smoke[pkg] for pkg in smoke if pkg in dev}
    assert "torch" in smoke and "torch" not in dev


@pytest.mark.parametrize("name", LOCKS)
def test_each_lock_says_how_it_was_made_and_pins_exactly(name: str) -> None:
    text = (REQUIREMENTS / f"{name}.lock").read_text()
    header = "".join(line for line in text.splitlines() if line.startswith("#"))
    assert "make lock" in header and "on purpose" in header and f"{name}.txt" in header
    entries = [line for line in text.splitlines() if not line.startswith("#")]
    names = [entry.split("==")[0] for entry in entries]
    assert names == sorted(names) and len(names) == len(set(names))
    for entry in entries:
        pkg, version = entry.split("==")
        assert pkg == canonicalize_name(pkg), entry
        assert re.fullmatch(r"[0-9][0-9A-Za-z.!]*", version), entry  # no local label (+cpu)
