"""llmb.shared.yamlfile: YAML read as data, every bad file one line, whichever loader PyYAML has."""

from __future__ import annotations

import pytest
from deadline import deadline
from llmb.shared import yamlfile
from llmb.shared.errors import LlmbError


@pytest.fixture(params=["libyaml", "pure-python"])
def loader(request, monkeypatch) -> str:
    """Each YAML test once through libyaml (PyYAML's C loader, whatever its version) and once
    through PyYAML's pure-Python loader, as on a machine whose PyYAML has no libyaml."""
    import yaml

    if request.param == "libyaml" and not getattr(yaml, "__with_libyaml__", False):
        pytest.skip("this PyYAML has no libyaml")
    if request.param == "pure-python":
        monkeypatch.delattr(yaml, "CSafeLoader", raising=False)
    monkeypatch.setattr(yamlfile, "_LOADER", [])  # the loader class is made on first use
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
        yamlfile.read_yaml(path, "sweep.yaml")
    assert message in str(err.value) and "\n" not in str(err.value)
    assert str(err.value).startswith("sweep.yaml")


def test_what_read_yaml_still_reads(tmp_path, loader) -> None:
    path = tmp_path / "ok.yaml"
    path.write_text("base: &b {x: 1}\nd:\n  <<: *b\n  y: 2\nlist: [[1, [2]], {a: [3]}]\n"
                    "big: " + "9" * 4000 + "\n")
    data = yamlfile.read_yaml(path, "ok.yaml")
    assert data["d"] == {"x": 1, "y": 2} and data["list"] == [[1, [2]], {"a": [3]}]


def test_brackets_that_open_nothing_are_not_counted(tmp_path, loader) -> None:
    """Hundreds of brackets left open in quoted scalars, comments and plain scalars open no
    collection: the count of flow nesting skips them, and the file reads."""
    many = yamlfile.MAX_DEPTH + 1
    rows = "".join(f"  - ['x [{i}', \"{{ \\\" [\"] # [[ {{\n  - y[{i}]{{\n" for i in range(many))
    deepest = yamlfile.MAX_DEPTH - 1  # under the top-level mapping: MAX_DEPTH in all
    path = tmp_path / "brackets.yaml"
    path.write_text("# " + "[" * many + "\nrows:\n" + rows + "plain: a[b{c\n"
                    + "nest: " + "[" * deepest + "]" * deepest + "\n")
    data = yamlfile.read_yaml(path, "brackets.yaml")
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
        yamlfile.read_yaml(path, "deep.yaml")


def test_numbers_and_booleans_are_only_what_they_look_like(tmp_path) -> None:
    """YAML 1.1 read 0x10 as 16, 010 as 8, 1:30:00 as 5400 and no as false: an account named
    0x10 became 16, a time limit became minutes. Decimal numbers and true/false only."""
    path = tmp_path / "c.yaml"
    path.write_text("account: 0x10\noctal: 010\nunder: 1_000\ntime: 1:30:00\npart: no\n"
                    "on: yes\ndate: 2025-01-01\neq: =\nn: 16\nneg: -3\nf: 1.5\ne: 1.5e-05\n"
                    "t: true\nnull: ~\n")
    assert yamlfile.read_yaml(path, "c.yaml") == {
        "account": "0x10", "octal": "010", "under": "1_000", "time": "1:30:00", "part": "no",
        "on": "yes", "date": "2025-01-01", "eq": "=", "n": 16, "neg": -3, "f": 1.5, "e": 1.5e-05,
        "t": True, None: None}
