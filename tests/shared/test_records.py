"""llmb.shared.records: a record read back is held to its TypedDict and its bounds, and a bad one
is one line naming the field, with a short prefix of the value and its size."""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypedDict

import pytest
from llmb.shared import records
from llmb.shared.records import Bound


class _GpuKeys(TypedDict):
    figures: dict[str, float]


class Gpu(_GpuKeys, total=False):
    name: str


class _NodeKeys(TypedDict):
    node: Annotated[str, Bound(text=16)]


class Node(_NodeKeys, total=False):
    gpus: Annotated[list[Gpu], Bound(items=2)]


class Doc(TypedDict, total=False):
    kind: Literal["a", "b"]
    count: int
    mean: float | None
    flag: bool
    nodes: list[Node]
    by_name: dict[str, Node]
    env: dict[str, str]
    free: Any
    raw: dict[str, object]  # any JSON value, bounded as under Any; its reader narrows it


GOOD: dict[str, Any] = {"kind": "a", "count": 3, "mean": None, "flag": False, "env": {"A": "1"},
                        "nodes": [{"node": "n1", "gpus": [{"figures": {"tflops": 1}}]}],
                        "free": {"x": [1, "y", None]}, "raw": {"n": 1, "s": ["t", {}]},
                        "extra": "kept"}


def test_a_record_of_its_type_passes_unchanged() -> None:
    assert records.check(Doc, GOOD) is GOOD


BAD = [
    ([1], "the record is a list of 1 item(s), not a mapping"),
    ({"kind": "c"}, "kind is 'c' (text), not one of a, b"),
    ({"count": True}, "count is true (true or false), not a whole number"),
    ({"count": "3"}, "count is '3' (text), not a whole number"),
    ({"count": 10**400}, "count is a whole number of about 401 digits, beyond the"),
    ({"mean": float("nan")}, "mean is nan (a number), not a finite number"),
    ({"mean": "x"}, "mean is 'x' (text), not a number or null"),
    ({"flag": "false"}, "flag is 'false' (text), not true or false"),
    ({"nodes": "x"}, "nodes is 'x' (text), not a list"),
    ({"nodes": [{"gpus": []}]}, "nodes[0] has no node"),
    ({"nodes": [{"node": 5}]}, "nodes[0].node is 5 (a whole number), not text"),
    ({"nodes": [{"node": "n" * 17}]}, "nodes[0].node is 'nnnnnnnnnnnnnnnnn' (text), longer than "
     "the 16 characters it can be"),
    ({"nodes": [{"node": "n", "gpus": [{"figures": {}}] * 3}]},
     "nodes[0].gpus is a list of 3 item(s), more than the 2 it can hold"),
    ({"nodes": [{"node": "n", "gpus": [{"figures": {"f": "x" * 100}}]}]},
     "nodes[0].gpus[0].figures.f is '" + "x" * 40 + "...' (text of 100 characters), not a "
     "number"),
    ({"nodes": [{"node": "n"}] * 3 + [{"node": "n4", "gpus": [{"figures": {}, "name": 7}]}]},
     "nodes[3].gpus[0].name is 7 (a whole number), not text"),
    ({"nodes": [{"node": "n", "gpus": ["x"]}]}, "nodes[0].gpus[0] is 'x' (text), not a mapping"),
    ({"by_name": {"n1": {"node": "n1"}, "n2": {"gpus": []}}}, "by_name.n2 has no node"),
    ({"by_name": {"n1": {"node": "n1", "gpus": [{}]}}}, "by_name.n1.gpus[0] has no figures"),
    ({"by_name": {"n1": [1]}}, "by_name.n1 is a list of 1 item(s), not a mapping"),
    ({"env": {"A": ["B"]}}, "env.A is a list of 1 item(s), not text"),
    ({"free": {"a": [["q" * 70000]]}}, "free.a[0][0] is '" + "q" * 40 + "...' (text of 70000 "
     "characters), longer than the 65536 characters it can be"),
    ({"raw": {"a": [{"b": "r" * 70000}]}}, "raw.a[0].b is '" + "r" * 40 + "...' (text of 70000 "
     "characters), longer than the 65536 characters it can be"),
    ({"free": [[]] * 100_001}, "free is a list of 100001 item(s), more than the 100000"),
    ({"extra": "e" * 70000}, "extra is '" + "e" * 40 + "...' (text of 70000 characters)"),
]


@pytest.mark.parametrize(("data", "message"), BAD, ids=[m[:30] for _, m in BAD])
def test_a_bad_record_is_one_line_naming_the_field(data: Any, message: str) -> None:
    with pytest.raises(records.BadRecord) as err:
        records.check(Doc, data)
    assert str(err.value).startswith(message)
    assert "\n" not in str(err.value) and len(str(err.value)) < 200
    assert records.problem(Doc, data) == str(err.value)


def test_a_typeddict_entry_field_is_checked_in_lists_and_mappings_alike() -> None:
    node: Node = {"node": "n1", "gpus": [{"figures": {"tflops": 1.0}, "name": "H100"}]}
    doc: Doc = {"nodes": [node], "by_name": {"n1": node}}
    assert records.check(Doc, doc)["by_name"]["n1"]["gpus"][0]["name"] == "H100"
    err = records.problem(Doc, {"nodes": [node] * 3 + [{"node": "n4", "gpus": [{"figures": {},
                                                                                "name": 7}]}]})
    assert err == "nodes[3].gpus[0].name is 7 (a whole number), not text"
    with pytest.raises(records.BadRecord) as bad:
        records.check(Doc, {"by_name": {"n1": {"node": "n1", "gpus": [{"figures": {"f": "x"}}]}}})
    assert bad.value.field == "by_name.n1.gpus[0].figures.f"


def test_deep_nesting_under_any_is_refused_without_recursion() -> None:
    deep: Any = []
    for _ in range(100_000):
        deep = [deep]
    assert "nested deeper than 64 levels" in str(records.problem(Doc, {"free": deep}))


class Measured(TypedDict):
    value: Annotated[float, Bound(number=1e9)]
    values: list[Annotated[float, Bound(number=1e9)] | None]


@pytest.mark.parametrize("value", [1e308, -1e308, 10**12, -2e9])
def test_a_number_beyond_its_bound_is_refused_in_one_line(value: float) -> None:
    with pytest.raises(records.BadRecord) as err:
        records.check(Measured, {"value": 1.0, "values": [None, value]})
    assert err.value.field == "values[1]"
    assert "beyond the 1e+09 it can be" in err.value.problem
    assert "\n" not in str(err.value)


def test_a_number_within_its_bound_passes() -> None:
    assert records.check(Measured, {"value": -1e9, "values": [None, 3, 2.5]})["value"] == -1e9
