"""llmb.analysis.spill: sorted items past the memory limit go to private files, come back merged,
as often as asked, and the files are removed."""

from __future__ import annotations

import os
import random
import stat

from llmb.analysis.spill import Spill


def test_sorted_with_ties_in_the_order_added_across_runs_on_disk() -> None:
    rng = random.Random(7)
    items = [(rng.randrange(50), n) for n in range(1000)]
    spill = Spill(limit=64)
    for key, n in items:
        spill.add(key, {"key": key, "n": n})
    assert len(spill) == 1000 and len(spill._runs) == 15  # 15 runs of 64 on disk, 40 in memory
    expected = [{"key": k, "n": n} for k, n in sorted(items, key=lambda kn: kn[0])]
    assert list(spill) == expected
    assert list(spill) == expected  # again: a writer makes several passes
    spill.close()


def test_the_files_are_private_and_removed() -> None:
    spill = Spill(limit=2)
    for n in range(5):
        spill.add(n, f"secret path {n}")
    assert spill._dir is not None
    directory = spill._dir
    assert stat.S_IMODE(os.stat(directory).st_mode) == 0o700
    assert {stat.S_IMODE(os.stat(p).st_mode) & 0o077 for p in spill._runs} == {0}
    spill.close()
    assert not os.path.exists(directory)
    spill.close()  # twice is fine


def test_small_spills_never_touch_the_disk() -> None:
    spill = Spill()
    for n in range(100):
        spill.add(-n, n)
    assert spill._dir is None and list(spill) == list(range(99, -1, -1))
