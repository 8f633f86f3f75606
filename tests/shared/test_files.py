"""llmb.shared.files: atomic replacement with the mode set before the first byte."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from deadline import deadline
from llmb.shared import files
from llmb.shared.errors import LlmbError


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


@pytest.fixture(params=["libyaml", "pure-python"])
def loader(request, monkeypatch) -> str:
    """Each YAML test once through libyaml (PyYAML's C loader, whatever its version) and once
    through PyYAML's pure-Python loader, as on a machine whose PyYAML has no libyaml."""
    import yaml

    if request.param == "libyaml" and not getattr(yaml, "__with_libyaml__", False):
        pytest.skip("this PyYAML has no libyaml")
    if request.param == "pure-python":
        monkeypatch.delattr(yaml, "CSafeLoader", raising=False)
    monkeypatch.setattr(files, "_LOADER", [])  # the loader class is made on first use
    return request.param


HOSTILE_YAML = [
    ("dup-top", "env: {A: 1}\nx: 1\nenv: {B: 2}\n", "the key env is given twice (lines 1 and 3)"),
    ("dup-nested", "slurm:\n  account: a\n  account: b\n", "the key account is given twice"),
    ("dup-flow", "env: {A: 1, A: 2}\n", "the key A is given twice"),
    ("deep-flow", "a: " + "[" * 100_000 + "]" * 100_000, "nests deeper than a file llmb reads"),
    ("deep-flow-misled", "a: b 'c\nx: " + "[" * 1500 + "]" * 1500 + "\nd: e'f\n", "nests deeper"),
    ("deep-map", "a: " + "{b: " * 100_000 + "1" + "}" * 100_000, "nests deeper"),
    ("deep-dashes", "- " * 1_000_000 + "x", "nests deeper"),
    ("deep-keys", "? " * 1_000_000 + "x", "nests deeper"),
    ("deep-block", "".join(" " * i + "k:\n" for i in range(2500)), "nests deeper"),
    ("huge-int", "scale: " + "9" * 5000, "holds a value llmb cannot read"),
    ("not-yaml", "a: [1, 2\n", "is not valid YAML"),
    ("laughs", "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
        f"{n}: &{n} [{', '.join([f'*{p}'] * 9)}]\n"
        for p, n in zip("abcdefgh", "bcdefghi", strict=True)),
     "expands, its aliases followed, to more than 1000000 values"),
    ("laughs-in-env", "l0: &l0 [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]\n" for i in range(1, 7))
     + "env: {A: *l6}\n", "(an alias of aliases: the 'billion laughs')"),
    ("self-alias", "a: &a [1, *a]\n", "holds an alias inside its own anchor"),
]


@pytest.mark.parametrize(("text", "message"), [(t, m) for _, t, m in HOSTILE_YAML],
                         ids=[k for k, _, _ in HOSTILE_YAML])
def test_read_yaml_refuses_in_one_line(tmp_path, loader, text, message) -> None:
    """A key given twice (YAML would keep the last one silently), nesting that would crash
    libyaml's recursive parser (a segmentation fault at some 100000 levels), stop libyaml
    0.2.6's scanner at 1000 levels with its own error, or exhaust Python's, an integer longer
    than Python converts: one line naming the file, the same with either loader. deep-flow-misled
    hides its brackets from the count on characters between an apostrophe and a quote."""
    path = tmp_path / "hostile.yaml"
    path.write_text(text)
    with deadline(30), pytest.raises(LlmbError) as err:
        files.read_yaml(path, "sweep.yaml")
    assert message in str(err.value) and "\n" not in str(err.value)
    assert str(err.value).startswith("sweep.yaml")


def test_what_read_yaml_still_reads(tmp_path, loader) -> None:
    path = tmp_path / "ok.yaml"
    path.write_text("base: &b {x: 1}\nd:\n  <<: *b\n  y: 2\nlist: [[1, [2]], {a: [3]}]\n"
                    "big: " + "9" * 4000 + "\n")
    data = files.read_yaml(path, "ok.yaml")
    assert data["d"] == {"x": 1, "y": 2} and data["list"] == [[1, [2]], {"a": [3]}]


def test_brackets_that_open_nothing_are_not_counted(tmp_path, loader) -> None:
    """Hundreds of brackets left open in quoted scalars, comments and plain scalars open no
    collection: the count of flow nesting skips them, and the file reads."""
    many = files.MAX_DEPTH + 1
    rows = "".join(f"  - ['x [{i}', \"{{ \\\" [\"] # [[ {{\n  - y[{i}]{{\n" for i in range(many))
    deepest = files.MAX_DEPTH - 1  # under the top-level mapping: MAX_DEPTH in all
    path = tmp_path / "brackets.yaml"
    path.write_text("# " + "[" * many + "\nrows:\n" + rows + "plain: a[b{c\n"
                    + "nest: " + "[" * deepest + "]" * deepest + "\n")
    data = files.read_yaml(path, "brackets.yaml")
    assert len(data["rows"]) == 2 * many and data["rows"][14:16] == [["x [7", '{ " ['], "y[7]{"]
    assert data["plain"] == "a[b{c"


def test_flow_nesting_is_refused_before_any_parser(tmp_path, monkeypatch) -> None:
    """The flow count needs no scanner: a libyaml that stops deep brackets with its own error
    (0.2.6), or crashes on them, never sees the text."""
    import yaml

    def no_parser(*args, **kwargs):
        raise AssertionError("the text reached PyYAML")

    monkeypatch.setattr(yaml, "scan", no_parser)
    monkeypatch.setattr(yaml, "load", no_parser)
    path = tmp_path / "deep.yaml"
    path.write_text("a: {b: " + "[" * 100_000)
    with pytest.raises(LlmbError, match=r"^deep.yaml nests deeper than a file llmb reads can$"):
        files.read_yaml(path, "deep.yaml")


def test_numbers_and_booleans_are_only_what_they_look_like(tmp_path) -> None:
    """YAML 1.1 read 0x10 as 16, 010 as 8, 1:30:00 as 5400 and no as false: an account named
    0x10 became 16, a time limit became minutes. Decimal numbers and true/false only."""
    path = tmp_path / "c.yaml"
    path.write_text("account: 0x10\noctal: 010\nunder: 1_000\ntime: 1:30:00\npart: no\n"
                    "on: yes\ndate: 2025-01-01\neq: =\nn: 16\nneg: -3\nf: 1.5\ne: 1.5e-05\n"
                    "t: true\nnull: ~\n")
    assert files.read_yaml(path, "c.yaml") == {
        "account": "0x10", "octal": "010", "under": "1_000", "time": "1:30:00", "part": "no",
        "on": "yes", "date": "2025-01-01", "eq": "=", "n": 16, "neg": -3, "f": 1.5, "e": 1.5e-05,
        "t": True, None: None}
