"""Compare two run trees (before and after a driver, firmware or image change).

Every configuration that has a figure in both trees gets an entry: both medians,
`delta_pct` = (time_median - baseline_time_median) / baseline_time_median x 100 (positive:
slower than the baseline), and `significant`: the change is larger than either tree's own
spread for that configuration (llmb.analysis.verdicts.spread_pct: the range of its runs' means, at
least twice its step-time jitter), so a difference inside the noise is never called a change.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from llmb.analysis.verdicts import IDENTITY_FIELDS, spread_pct


def compare(configs: Sequence[Mapping[str, Any]], baseline: Sequence[Mapping[str, Any]]
            ) -> list[dict[str, Any]]:
    before = {c["config_key"]: c for c in baseline}
    out = []
    for now in configs:
        base = before.get(now["config_key"])
        if base is None or not base["time_median"] or not now["time_median"]:
            continue
        delta = (now["time_median"] - base["time_median"]) / base["time_median"] * 100
        spread = max(spread_pct(now), spread_pct(base))
        entry: dict[str, Any] = {k: now.get(k) for k in IDENTITY_FIELDS}
        entry.update(
            config_key=now["config_key"],
            baseline_time_median=base["time_median"], time_median=now["time_median"],
            delta_pct=round(delta, 3), significant=abs(delta) > spread,
            spread_pct=round(spread, 3),
            baseline_runs=base["successful_runs"], runs=now["successful_runs"],
            baseline_pct_of_reference=base["pct_of_reference"],
            pct_of_reference=now["pct_of_reference"],
        )
        out.append(entry)
    return out


def unmatched(configs: Sequence[Mapping[str, Any]], baseline: Sequence[Mapping[str, Any]],
              compared: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """How many configurations of each tree found no partner with a figure."""
    matched = {c["config_key"] for c in compared}
    return {"only_current": sum(c["config_key"] not in matched for c in configs),
            "only_baseline": sum(c["config_key"] not in matched for c in baseline)}
