"""llmb.analysis.assemble: outcomes in any order make the same analysis; results past the memory
limit are written by the streaming JSON writer exactly as the materialized analysis reads."""

from __future__ import annotations

import io
import itertools
import json
import random
from typing import Any

import pytest
from llmb.analysis import assemble, formats, spill, verdicts
from llmb.analysis.perlog import Outcome


def result(n: int, config: str, status: str = "Success", **fields: Any) -> dict[str, Any]:
    r: dict[str, Any] = dict.fromkeys(formats.RESULT_FIELDS)
    recipe, size, dtype, gpus = config.split("/")
    r.update(filename=f"{config.replace('/', '_')}/run{n:05d}/log-x_{n}_0.out",
             path=f"/t/{n}", status=status, recipe=recipe, model_size=size, dtype=dtype,
             gpu_type="h100", num_gpus=int(gpus), scaling="weak", global_batch_size=128,
             seq_length=8192, smoke_test=False, time_mean=9.3 + (n % 7) / 100,
             time_std_dev=0.01, final_iteration=49, suspect_nodes=[], **fields)
    r["config_key"] = verdicts.config_key(r)
    return r


CONFIGS = ["llama3.1/8b/fp8/8", "llama3.1/70b/fp8/64", "nemotron/15b/bf16/16", "llama3.1/8b/fp8/16"]


def outcomes(count: int, seed: int) -> list[Outcome]:
    made = [Outcome(f"/t/{n}", result(n, CONFIGS[n % len(CONFIGS)],
                                      "Failed" if n % 11 == 0 else "Success"))
            for n in range(count)]
    made += [Outcome(f"/t/skip{n}", skipped="sbatch output") for n in range(count // 10)]
    random.Random(seed).shuffle(made)
    return made


def build(items: list[Outcome], limit: int, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    monkeypatch.setattr(spill.Spill.__init__, "__defaults__", (limit,))  # the memory limit
    assembly = assemble.Assembly(["/t"], None, (11, 44), 5.0)
    for outcome in items:
        assembly.add(outcome)
    assert bool(assembly.results._runs) == (len(assembly.results) >= limit)
    analysis = assembly.finish()
    out = io.StringIO()
    formats.write(analysis, "json", out)
    streamed = json.loads(out.getvalue())
    materialized = assemble.materialize(analysis)
    assembly.close()
    assert streamed == json.loads(formats.to_json(materialized))
    return streamed


def test_any_order_and_any_memory_limit_give_the_same_analysis(
        monkeypatch: pytest.MonkeyPatch) -> None:
    first = build(outcomes(1000, 1), 100_000, monkeypatch)  # all in memory
    second = build(outcomes(1000, 2), 50, monkeypatch)  # 20 runs on disk
    assert first == second
    assert first["summary"]["logs"] == 1000 and first["summary"]["skipped"] == 100
    keys = [r["config_key"] for r in first["results"]]
    # each configuration's runs together, configurations in the order their runs come
    assert [c["config_key"] for c in first["configurations"]] == list(dict.fromkeys(keys))
    assert sum(1 for a, b in itertools.pairwise(keys) if a != b) == len(CONFIGS) - 1
    for c in first["configurations"]:
        assert c["files"] == [r["filename"] for r in first["results"]
                              if r["config_key"] == c["config_key"]]
        assert c["runs"] == 250


def test_a_manifest_warning_is_given_once(monkeypatch: pytest.MonkeyPatch) -> None:
    assembly = assemble.Assembly(["/t"], None, (11, 44), 5.0)
    for n in range(3):
        assembly.add(Outcome(f"/t/{n}", result(n, CONFIGS[0]), warning="num_gpus is \"x\"",
                             manifest="/t/run/llmb_manifest.json"))
    assert assembly.finish()["warnings"] == [{"path": "run/llmb_manifest.json",
                                             "warning": "num_gpus is \"x\""}]
    assembly.close()
