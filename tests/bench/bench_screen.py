"""`make bench-screen`: what llmb-run screen's judge and its baseline comparison name on a
modelled real fleet (tests/bench/fleetsim.py states each parameter with its source: healthy
GPUs that differ for good, now and then a disturbed repeat, leaf and spine switches, a
cluster that drifts between the baseline and a later screen), at 256 nodes x 8 GPUs.

    python tests/bench/bench_screen.py [--trials N] [--nodes N]

Each trial draws a fleet, screens it healthy (`peers`: judged against its peers; kept as the
baseline when it named nothing), screens it again healthy and drifted (`baseline`: held to the
first), then once per fault: against the baseline with the element 5 % slow, and against its
peers with the element slowed by the resolution the healthy screen stated for its figure.
Rows:

    mode=peers fault=gemm slowdown=9.1% named=20/20 false_suspects=0

`named`: trials in which the fault was named; `false_suspects`: trials that named anything
the fault does not touch. Claims (exit 1 when one is missed): at most 1 false suspect in the
healthy screens of each mode; against a baseline each 5 % slow element named in at least 19
of 20; against peers, each figure's stated resolution met in 19 of 20; a baseline saved from
at least 18 of 20 healthy screens. The clean model (today's noise alone) is one row.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import zlib
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # the fit's matrices are small: one thread
sys.path[:0] = [str(Path(__file__).resolve().parent),
                str(Path(__file__).resolve().parents[2] / "common")]

import fleetsim  # noqa: E402

BASELINE_SLOWDOWN = 0.05
NAMED, FALSE_MOST, SAVED = 0.95, 1, 0.90


def _rng(*key: object) -> Any:
    import numpy as np

    return np.random.default_rng(zlib.crc32(" ".join(map(str, key)).encode()))


def _false(fleet: fleetsim.Drawn, fault: fleetsim.Fault, named: list[dict[str, Any]],
           held: bool) -> bool:
    """Whether something other than the fault (or its node, for a GPU or NVLink) was named."""
    node = fleet.nodes[fault.node] if fault.kind != "none" else None
    for entry in named:
        if fault.kind != "none" and fleetsim.matches(fleet, fault, entry, held):
            continue
        if node is not None and fault.kind not in ("link",) and \
                str(entry["name"]).split(" GPU ")[0] == node:
            continue  # the slow element's node, named at another level
        return True
    return False


def trial(model: fleetsim.Fleet, count: int, t: int, tally: dict[str, list[int]]) -> None:
    """One fleet: its healthy screens and every fault, in both modes, into `tally`
    ([named, false] per row)."""
    rng = _rng(count, t, model.spine)
    fleet = fleetsim.draw(model, count, rng)
    none = fleetsim.Fault("none")
    base = fleetsim.judged(fleet, *fleetsim.screen(fleet, none, rng), "base")
    clean = not base["named"] and not base["suspects"]
    tally["saved"][0] += clean
    tally["peers none"][1] += not clean
    drift = float(rng.uniform(*model.drift))
    later = fleetsim.judged(fleet, *fleetsim.screen(fleet, none, rng, drift), "later")
    tally["baseline none"][1] += _false(fleet, none, fleetsim.against(base, later), True)
    for kind in fleetsim.FAULTS:
        fault = fleetsim.pick(rng, fleet, kind, BASELINE_SLOWDOWN)
        doc = fleetsim.judged(fleet, *fleetsim.screen(fleet, fault, rng, drift), "fault")
        got = fleetsim.against(base, doc)
        tally[f"baseline {kind}"][0] += any(fleetsim.matches(fleet, fault, n, True) for n in got)
        tally[f"baseline {kind}"][1] += _false(fleet, fault, got, True)
        resolves = fleetsim.stated(base, fault)
        tally.setdefault(f"resolves {kind}", []).append(round(resolves * 1000))
        fault = fleetsim.with_fault(fault, resolves)
        doc = fleetsim.judged(fleet, *fleetsim.screen(fleet, fault, rng), "peers")
        tally[f"peers {kind}"][0] += any(fleetsim.matches(fleet, fault, n, False)
                                         for n in doc["named"])
        tally[f"peers {kind}"][1] += _false(fleet, fault, doc["named"], False)


def clean_row(count: int, trials: int) -> str:
    """Today's clean model: healthy false suspects, and each fault 5 % slow against peers."""
    false, named = 0, dict.fromkeys(fleetsim.FAULTS, 0)
    model = fleetsim.CLEAN
    for t in range(trials):
        rng = _rng("clean", count, t)
        fleet = fleetsim.draw(model, count, rng)
        none = fleetsim.Fault("none")
        doc = fleetsim.judged(fleet, *fleetsim.screen(fleet, none, rng), "clean")
        false += bool(doc["named"] or doc["suspects"])
        for kind in fleetsim.FAULTS:
            fault = fleetsim.pick(rng, fleet, kind, BASELINE_SLOWDOWN)
            doc = fleetsim.judged(fleet, *fleetsim.screen(fleet, fault, rng), "clean")
            named[kind] += any(fleetsim.matches(fleet, fault, n, False) for n in doc["named"])
    return (f"model=clean mode=peers slowdown=5% false_suspects={false}/{trials} " +
            " ".join(f"{k}={v}/{trials}" for k, v in named.items()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--nodes", type=int, default=256)
    args = parser.parse_args(argv)
    start, n = time.monotonic(), args.trials
    print(f"bench-screen: fleet model {fleetsim.Fleet()}")
    tally: dict[str, list[int]] = {"saved": [0, 0]}
    for mode in ("peers", "baseline"):
        for kind in ("none", *fleetsim.FAULTS):
            tally[f"{mode} {kind}"] = [0, 0]
    for t in range(n):
        trial(fleetsim.Fleet(), args.nodes, t, tally)
    missed = []
    for mode in ("peers", "baseline"):
        for kind in ("none", *fleetsim.FAULTS):
            named, false = tally[f"{mode} {kind}"]
            if mode == "peers" and kind != "none":
                stated = statistics.median(tally[f"resolves {kind}"]) / 10
                slowdown = f"{stated:.1f}% (the stated resolution)"
            else:
                slowdown = "-" if kind == "none" else f"{BASELINE_SLOWDOWN:.0%}"
            shown = "-" if kind == "none" else f"{named}/{n}"
            print(f"nodes={args.nodes} mode={mode} fault={kind} slowdown={slowdown} "
                  f"named={shown} false_suspects={false}/{n}", flush=True)
            if kind == "none" and false > FALSE_MOST:
                missed.append(f"{mode}: {false} healthy screens named something")
            if kind != "none" and named < NAMED * n:
                missed.append(f"{mode} {kind}: named {named}/{n}")
    print(f"nodes={args.nodes} baseline saved from {tally['saved'][0]}/{n} healthy screens")
    if tally["saved"][0] < SAVED * n:
        missed.append(f"baseline saved from {tally['saved'][0]}/{n}")
    print(clean_row(args.nodes, n))
    print(f"bench-screen: {time.monotonic() - start:.0f} s")
    if missed:
        print("bench-screen: FAIL: " + "; ".join(missed))
        return 1
    print("bench-screen: PASS: every claim met")
    return 0


if __name__ == "__main__":
    sys.exit(main())
