"""The run manifest: the contract between the launcher, the container and the analyzer.

The launcher (llmb.launch) writes `llmb_manifest.json` into each run directory before the job
is submitted; the job's entrypoint (llmb.container) reads it to know what to train; the
analyzer (llmb.analysis) reads it to know which configuration a log belongs to, and
llmb-run's archive and verify-archive carry it. Its fields (schema 1):

    schema, recipe, workload, experiment, model_size, dtype, gpu_type, num_gpus,
    gpus_per_node, nodes, scaling, published, source, seq_length, family, nemo_recipe, nemo,
    model, parallelism {tp, pp, cp, vp, ep, mbs, gbs, dp, ga, num_layers}, cluster_type,
    placement (when given), options {max_steps, smoke_test, profile, profile_start_step,
    profile_stop_step, gpu_metrics, nccl_trace, checkpoint_save, checkpoint_load_path,
    time_limit, dry_run}, image, job_dir, versions, git_commit, created; a Megatron-Bridge
    run's also framework ("megatron-bridge") and bridge {compute_dtype, model_recipe_name,
    args}, and its NeMo fields empty: nemo_recipe "", nemo {}, model {}, parallelism null but
    num_layers

It holds the user's values (paths, account-derived names) but never a secret, and is written
owner-only. `read` gives a Manifest: every field above of its type and within
llmb.shared.records' bounds, checked here once (a reader then checks only what a value means
to it: a count that must be positive, a family it knows); else a ManifestError naming the file
and the field. `read_object` gives the JSON object alone, its fields unchecked: the analyzer
reads manifests written by hand too, which may leave fields out, and checks the fields it uses.
Standard library only: the container and the analyzer's fast path import this module.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, TypedDict

from llmb.shared import files, records
from llmb.shared.errors import LlmbError

NAME = "llmb_manifest.json"
SCHEMA = 1
MAX_BYTES = 1 << 20  # a manifest is a few KB; a larger file is not one


class Parallelism(TypedDict):
    """The row's layout: parallel sizes (vp and ep null where the row has none), batch sizes,
    data parallelism, gradient accumulation and the model's depth. A Megatron-Bridge run's
    are all null but num_layers: its workload base config in Megatron-Bridge chooses them."""

    tp: int | None
    pp: int | None
    cp: int | None
    vp: int | None
    ep: int | None
    mbs: int | None
    gbs: int | None
    dp: int | None
    ga: int | None
    num_layers: int


class Options(TypedDict):
    """What the launch asked for; max_steps is the effective count (a checkpoint load runs 1)."""

    max_steps: int
    smoke_test: bool
    profile: bool
    profile_start_step: int
    profile_stop_step: int
    gpu_metrics: bool
    nccl_trace: bool
    checkpoint_save: bool
    checkpoint_load_path: str | None
    time_limit: str
    dry_run: bool


class Versions(TypedDict):
    llmb: str
    framework: str
    nemo_run: str
    python: str


class Bridge(TypedDict):
    """What a Megatron-Bridge run asked Megatron-Bridge's performance scripts."""

    compute_dtype: str  # bf16, fp8_cs, fp8_mx, fp8_sc, nvfp4 (--compute_dtype)
    model_recipe_name: str  # --model_recipe_name, e.g. qwen3_235b_a22b
    args: list[str]  # every argument run_script.py gets


class _Placed(TypedDict, total=False):
    placement: dict[str, Any]  # llmb.launch.placement's record, when a placement was given
    # the recipe's framework: "nemo" (the 25.04 recipes; a manifest without the field is one)
    # or "megatron-bridge"
    framework: str
    bridge: Bridge  # a Megatron-Bridge run's (framework megatron-bridge)


class Manifest(_Placed):
    """A run manifest as the launcher writes it (schema 1)."""

    schema: Literal[1]
    recipe: str
    workload: str
    experiment: str
    model_size: str
    dtype: str
    gpu_type: str
    num_gpus: int
    gpus_per_node: int
    nodes: int
    scaling: str
    published: bool
    source: str
    seq_length: int
    family: str
    nemo_recipe: str  # "" for a Megatron-Bridge run (bridge.model_recipe_name names it)
    nemo: dict[str, Any]  # the row's NeMo job: llmb.recipes.nemojob checks its settings ({})
    model: dict[str, Any]  # the model's shape from metadata.yaml (hidden_size, ...) ({})
    parallelism: Parallelism
    cluster_type: str
    options: Options
    image: str
    job_dir: str
    versions: Versions
    git_commit: str | None
    created: str


class ManifestError(LlmbError):
    """A run manifest that cannot be used. `reason` says why (`is not valid JSON (...)`);
    str(error) is `manifest PATH <reason>` when the file is known, else the reason alone."""

    def __init__(self, reason: str, path: str | os.PathLike[str] | None = None,
                 missing: bool = False) -> None:
        super().__init__(f"manifest {path} {reason}" if path is not None else reason)
        self.reason = reason
        self.path = path
        self.missing = missing  # there is no file at path: a run without a manifest


def path_in(run_dir: str | os.PathLike[str]) -> Path:
    """Where a run directory's manifest lives."""
    return Path(run_dir) / NAME


def write(manifest: Mapping[str, Any], path: str | os.PathLike[str]) -> None:
    """Write the manifest owner-only (0600), creating its directory."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    files.write_private(target, json.dumps(manifest, indent=2) + "\n")


def parse(raw: bytes | str) -> Manifest:
    """A manifest's content as a Manifest, or ManifestError (its message does not name the
    file: the caller knows where the bytes came from)."""
    return check(_json_object(raw))


def check(data: object) -> Manifest:
    """data, when it is a manifest as the launcher writes it; else ManifestError naming the
    field (`... is not a schema-1 run manifest: parallelism.tp is 'x' (text), not a whole
    number`)."""
    found = _object(data)
    try:
        return records.check(Manifest, found)
    except records.BadRecord as bad:
        problem = bad.problem.replace("the record has no", "it has no", 1)
        raise ManifestError(f"is not a schema-{SCHEMA} run manifest: {problem}") from None


def _json_object(raw: bytes | str) -> dict[str, object]:
    if len(raw) > MAX_BYTES:
        raise ManifestError(f"is larger than {MAX_BYTES} bytes: not a run manifest")
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        detail = str(exc).splitlines()[0][:80] if str(exc) else "too deep"
        raise ManifestError(f"is not valid JSON ({detail})") from None
    return _object(data)


def _object(data: object) -> dict[str, object]:
    """data, when it is a JSON object that does not claim another schema; else
    ManifestError. (A manifest written by hand may leave `schema` out; `check` requires it.)"""
    if not isinstance(data, dict):
        raise ManifestError("is not a JSON object")
    schema = data.get("schema", SCHEMA)
    if schema != SCHEMA or isinstance(schema, bool):
        raise ManifestError(f"has schema={schema!r}, which is not supported; supported: {SCHEMA}")
    return data


def _bytes(path: str | os.PathLike[str]) -> bytes:
    try:
        return files.read_bounded(path, MAX_BYTES)
    except files.FileRefused as exc:
        reason = exc.reason
        if reason.startswith("is larger than"):
            reason += ": not a run manifest"
        raise ManifestError(reason, path, missing=exc.missing) from None


def read(path: str | os.PathLike[str]) -> Manifest:
    """The manifest at `path`: a regular file of at most MAX_BYTES holding a manifest as the
    launcher writes it; else ManifestError with the path (`missing` when there is no file, so a
    caller can tell a run without a manifest from a broken one)."""
    raw = _bytes(path)
    try:
        return parse(raw)
    except ManifestError as exc:
        raise ManifestError(exc.reason, path) from None


def read_object(path: str | os.PathLike[str]) -> dict[str, object]:
    """The manifest at `path` as a JSON object of this schema, its fields unchecked (one
    written by hand may leave them out): for a reader that checks the fields it uses, and
    accepts less than the launcher writes. ManifestError as `read`'s."""
    raw = _bytes(path)
    try:
        return _json_object(raw)
    except ManifestError as exc:
        raise ManifestError(exc.reason, path) from None
