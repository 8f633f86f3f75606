"""llmb.llmbrun.screen.baseline: a healthy screen kept as the cluster's baseline, read back (or a
screen.json used as one), and later screens held to it: the whole cluster slower (named, no
node), one node below its own baseline while its peers see nothing, what cannot be compared."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import screenfiles
from llmb.llmbrun.screen import baseline, precision
from llmb.shared.errors import UsageError


def healthy(root: Path, **kwargs: Any) -> dict[str, Any]:
    return screenfiles.screen_json(root, repeats=7, **kwargs)


def scaled(doc: dict[str, Any], factor: float) -> dict[str, Any]:
    """The same screen with every figure `factor` times what it was."""
    out = copy.deepcopy(doc)
    for n in out["nodes"]:
        for g in n["gpus"]:
            g["figures"] = {f: v * factor for f, v in g["figures"].items()}
            g["repeats"] = {f: [v * factor for v in r] for f, r in g["repeats"].items()}
        n["allreduce"]["busbw_gbps"] *= factor
        n["allreduce"]["repeats"] = [v * factor for v in n["allreduce"]["repeats"]]
    for p in out["pairs"] + [out["all_nodes"]]:
        p["busbw_gbps"] *= factor
        p["repeats"] = [v * factor for v in p["repeats"]]
    return out


def test_a_screen_kept_per_figure_and_element_with_its_noise(tmp_path):
    doc = healthy(tmp_path)
    base = baseline.save(tmp_path / "baseline.json", doc)
    assert base["screen"] == doc["stamp"] and base["versions"]["mode"] == "cpu"
    figures = base["figures"]
    assert sorted(figures) == ["all-nodes busbw_gbps", "all-reduce busbw_gbps",
                               "matmul_fp32_tflops", "memory_gbps", "network busbw_gbps",
                               "pairs busbw_gbps"]
    assert sorted(figures["memory_gbps"]["values"])[:2] == ["node1 GPU 0", "node1 GPU 1"]
    assert sorted(figures["network busbw_gbps"]["values"]) == screenfiles.NODES
    value, error = figures["all-reduce busbw_gbps"]["values"]["node2"]
    assert value == doc["nodes"][1]["allreduce"]["busbw_gbps"]
    assert error == pytest.approx(figures["all-reduce busbw_gbps"]["noise"]
                                  * precision.error_factor(7))
    assert baseline.load(tmp_path / "baseline.json") == json.loads(
        (tmp_path / "baseline.json").read_text())
    # any screen.json serves as one
    as_screen = baseline.load(tmp_path / "screens" / doc["stamp"] / "screen.json")
    assert as_screen["figures"] == figures


@pytest.mark.parametrize(("content", "message"), [
    (None, "cannot be read"), ("{", "is not JSON"),
    ('{"kind": "llmb screen baseline", "versions": {}, "figures": {"x": {"values": {"a": 1}}}}',
     "is not a baseline llmb-run screen writes: the record has no params")])
def test_a_baseline_that_cannot_be_used_is_one_line_naming_it(tmp_path, content, message):
    path = tmp_path / "b.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(UsageError, match=message) as err:
        baseline.load(path)
    assert str(err.value).startswith(f"--baseline {path}") and "\n" not in str(err.value)
    assert "--save-baseline" in str(err.value)


def test_the_same_cluster_again_names_nothing(tmp_path):
    doc = healthy(tmp_path)
    base = baseline.of_screen(doc)
    again = copy.deepcopy(doc)
    baseline.apply(again, base, "b.json")
    assert again["baseline"]["comparable"] and again["baseline"]["changed"] == []
    assert {f["ratio"] for f in again["baseline"]["figures"]} == {1.0}
    assert (again["named"], again["suspects"]) == ([], [])


def test_a_cluster_slower_all_over_names_the_cluster_and_no_node(tmp_path):
    doc = healthy(tmp_path)
    base = baseline.of_screen(doc)
    slow = scaled(doc, 0.5)
    slow["image"] = "/images/nemo-next.sqsh"
    baseline.apply(slow, base, "b.json")
    assert {n["kind"] for n in slow["named"]} == {"cluster"}
    assert sorted(n["figure"] for n in slow["named"]) == sorted(base["figures"])
    first = slow["named"][0]
    assert "50% below its baseline (20260102-030405)" in first["why"]
    assert f"image {doc['image']} -> /images/nemo-next.sqsh" in first["why"]
    assert slow["suspects"] == [] and {n["verdict"] for n in slow["nodes"]} == {"pass"}


def test_a_node_below_its_own_baseline_that_its_peers_do_not_see(tmp_path):
    # node2's own all-reduce was twice the others'; now it is theirs: peers see nothing
    then = healthy(tmp_path / "then", slow={"nodes:node2": 0.2})
    now = healthy(tmp_path / "now")
    assert now["named"] == []
    baseline.apply(now, baseline.of_screen(then), "b.json")
    (named,) = now["named"]
    assert (named["kind"], named["name"]) == ("node", "node2")
    assert named["figure"] == "all-reduce busbw_gbps against its baseline"
    assert named["expected"] == pytest.approx(0.2, rel=0.05)
    assert named["value"] == pytest.approx(0.1, rel=0.05)
    assert now["suspects"] == ["node2"]
    assert now["nodes"][1]["verdict"] == "slow"
    assert "below its own baseline" in now["nodes"][1]["reasons"][-1]


def test_what_measures_other_figures_is_not_compared_and_says_why(tmp_path):
    doc = healthy(tmp_path)
    base = baseline.of_screen(doc)
    other = scaled(doc, 0.5)
    other["mode"] = "gpu"
    baseline.apply(other, base, "b.json")
    assert other["baseline"]["comparable"] is False
    assert other["baseline"]["why_not"] == "mode cpu then, gpu now"
    assert other["named"] == [] and other["baseline"]["figures"] == []
