"""llmb.launch.hostlist: node lists folded as Slurm folds them, back to exactly the names given."""

from __future__ import annotations

import random
import tracemalloc

import pytest
from deadline import deadline
from llmb.launch import hostlist, placement


@pytest.mark.parametrize(("names", "folded"), [
    ([f"gpu{i:04d}" for i in range(200)], "gpu[0000-0199]"),
    (["node3", "node1", "node2", "node5", "login1"], "node[1-3,5],login1"),
    (["n7", "n007", "n8"], "n[7-8],n007"),
    (["n9", "n10"], "n9,n10"),
    (["rack1-n05", "rack1-n06", "x"], "rack1-n[05-06],x"),
    (["a", "a"], "a"),
])
def test_folded_as_slurm_writes_it(names: list[str], folded: str) -> None:
    assert hostlist.compressed(names) == folded
    assert sorted(placement.expand_hostlist("--exclude", folded)) == sorted(set(names))


def test_any_list_expands_back_to_its_names() -> None:
    rng = random.Random(7)
    for _ in range(500):
        names = {rng.choice(["n", "gpu", "a.b-", "", "r1n"]) + str(rng.randint(0, 300)).zfill(
            rng.choice([0, 2, 4])) for _ in range(rng.randint(1, 60))}
        assert set(placement.expand_hostlist("x", hostlist.compressed(names))) == names


def test_two_hundred_suspects_fit_an_sbatch_line() -> None:
    """--exclude-suspect of a screen that named 200 nodes was refused ('at most 1024 fit')."""
    suspects = [f"gpu{i:04d}" for i in range(0, 400, 2)]
    place, new = placement.build(exclude="login1").with_excluded(suspects)
    assert len(new) == 200 and place.exclude == "login1,gpu[0000,0002,0004," + ",".join(
        f"{i:04d}" for i in range(6, 400, 2)) + "]"
    assert len(str(place.exclude)) <= placement.MAX_VALUE_LEN
    assert placement.build(exclude="n1").with_excluded([f"gpu{i:04d}" for i in range(200)]
                                                       )[0].exclude == "n1,gpu[0000-0199]"


def bounded(what: str):  # a refusal found from the ranges: in seconds, in a few MB
    return deadline(10, what)


def test_a_count_comes_from_the_ranges_without_writing_a_name() -> None:
    items = hostlist.parse("--x", "n[0-65535,0-65535]r[1-4],login1,gpu[007-009]")
    assert hostlist.count(items) == 2 * 65536 * 4 + 1 + 3
    assert hostlist.count(hostlist.parse("--x", "n[0-99999999999]" * 8)) == 10 ** 88
    assert hostlist.expand("--x", "gpu[007-009],n1", bound=4) == ["gpu007", "gpu008",
                                                                  "gpu009", "n1"]


def test_a_one_kilobyte_nodelist_naming_millions_is_refused_before_it_is_written() -> None:
    """`n[0-65535,0-65535,...]` (1 KB) wrote six million names (600 MB) before it was counted."""
    value = "n[" + ",".join(["0-65535"] * 120) + "]"
    assert len(value) <= placement.MAX_VALUE_LEN
    tracemalloc.start()
    try:
        with bounded("a node list of millions is expanded"), pytest.raises(
                placement.PlacementError) as err:
            placement.build(nodelist=value)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert str(err.value).endswith(f"names {120 * 65536} nodes; at most 65536 are allowed: "
                                   "name fewer nodes")
    assert str(err.value).startswith("--nodelist=n[0-65535,") and "\n" not in str(err.value)
    assert peak < 8 << 20


@pytest.mark.parametrize("var", ["LLMB_NODELIST", "LLMB_EXCLUDE"])
def test_the_variable_that_named_too_many_is_the_one_named(var: str) -> None:
    with bounded("a node list is expanded"), pytest.raises(placement.PlacementError) as err:
        placement.from_env({var: "a[0-9][0-9][0-9][0-9][0-9]"})
    assert str(err.value).startswith(f"{var}=a[0-9]") and "names 100000 nodes; at most 65536" \
        in str(err.value)


def test_a_list_at_the_bound_is_taken_whole_and_exclusions_stay_linear() -> None:
    with bounded("a full node list is compared with a full exclusion, name by name"):
        place = placement.build(nodelist="n[0-65535]", exclude="m[00000-49151]")
        excluded, new = place.with_excluded([f"x{i:05d}" for i in range(16384)])
    assert len(new) == 16384 and excluded.exclude == "m[00000-49151],x[00000-16383]"
    with pytest.raises(placement.PlacementError, match=r"names 65537 nodes; at most 65536"):
        excluded.with_excluded(["y1"])


@pytest.mark.parametrize(("value", "why"), [
    ("n[1-3", "unbalanced brackets"), ("n[3-1]", "range 3-1 runs backwards"),
    ("n[1-1234567890123456789]", "bad range"), ("n[١-٣]", "bad range"),
    ("n1,,n2", "an empty name between commas"), ("-n1", "'-n1' is not a node name"),
    ("n$1", "'n$1' is not part of a node name"),
])
def test_what_is_not_a_node_list_is_said_in_one_line(value: str, why: str) -> None:
    with pytest.raises(hostlist.HostlistError) as err:
        hostlist.expand("--x", value)
    assert why in str(err.value) and "\n" not in str(err.value)
