"""Compare two run trees (before and after a driver, firmware or image change).

Every configuration that has a figure in both trees gets an entry: both medians,
`delta_pct` = (time_median - baseline_time_median) / baseline_time_median x 100 (positive:
slower than the baseline), and `significant`: the change is larger than either tree's own
spread for that configuration (llmb.analysis.verdicts.spread_pct: the range of its runs' means, at
least twice its step-time jitter), so a difference inside the noise is never called a change.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import cast

from llmb.analysis.record import Comparison, Configuration
from llmb.analysis.verdicts import IDENTITY_FIELDS, spread_pct


def compare(configs: Sequence[Configuration], baseline: Sequence[Configuration]
            ) -> list[Comparison]:
    before = {c["config_key"]: c for c in baseline}
    out = []
    for now in configs:
        base = before.get(now["config_key"])
        if base is None:
            continue
        before_median, median = base.get("time_median"), now.get("time_median")
        if not before_median or not median:
            continue
        delta = (median - before_median) / before_median * 100
        spread = max(spread_pct(now), spread_pct(base))
        fields: Mapping[str, object] = now
        entry = cast(Comparison, {k: fields.get(k) for k in IDENTITY_FIELDS})
        entry.update({
            "config_key": now["config_key"],
            "baseline_time_median": before_median, "time_median": median,
            "delta_pct": round(delta, 3), "significant": abs(delta) > spread,
            "spread_pct": round(spread, 3),
            "baseline_runs": base["successful_runs"], "runs": now["successful_runs"],
            "baseline_pct_of_reference": base["pct_of_reference"],
            "pct_of_reference": now["pct_of_reference"],
        })
        out.append(entry)
    return out


def unmatched(configs: Sequence[Configuration], baseline: Sequence[Configuration],
              compared: Sequence[Comparison]) -> dict[str, int]:
    """How many configurations of each tree found no partner with a figure."""
    matched = {c["config_key"] for c in compared}
    return {"only_current": sum(c["config_key"] not in matched for c in configs),
            "only_baseline": sum(c["config_key"] not in matched for c in baseline)}
