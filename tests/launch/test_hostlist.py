"""llmb.launch.hostlist: node lists folded as Slurm folds them, back to exactly the names given."""

from __future__ import annotations

import random

import pytest
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
