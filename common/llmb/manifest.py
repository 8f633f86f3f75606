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
    time_limit, dry_run}, image, job_dir, versions, git_commit, created

It holds the user's values (paths, account-derived names) but never a secret, and is written
owner-only. A reader gets a JSON object of schema 1 or a ManifestError naming what is wrong;
each reader then checks the fields it uses. Standard library only: the container and the
analyzer's fast path import this module.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from llmb.shared import files
from llmb.shared.errors import LlmbError

NAME = "llmb_manifest.json"
SCHEMA = 1
MAX_BYTES = 1 << 20  # a manifest is a few KB; a larger file is not one


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


def parse(raw: bytes | str) -> dict[str, Any]:
    """A manifest's content as a JSON object of this schema, or ManifestError (its message
    does not name the file: the caller knows where the bytes came from)."""
    if len(raw) > MAX_BYTES:
        raise ManifestError(f"is larger than {MAX_BYTES} bytes: not a run manifest")
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        detail = str(exc).splitlines()[0][:80] if str(exc) else "too deep"
        raise ManifestError(f"is not valid JSON ({detail})") from None
    return check(data)


def check(data: object) -> dict[str, Any]:
    """data, when it is a JSON object that does not claim another schema; else
    ManifestError. (A manifest written by hand may leave `schema` out; the container, which
    needs every field, requires it.)"""
    if not isinstance(data, dict):
        raise ManifestError("is not a JSON object")
    schema = data.get("schema", SCHEMA)
    if schema != SCHEMA or isinstance(schema, bool):
        raise ManifestError(f"has schema={schema!r}, which is not supported; supported: {SCHEMA}")
    return data


def read(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The manifest at `path`: a regular file of at most MAX_BYTES holding a JSON object of
    this schema; else ManifestError with the path (`missing` when there is no file, so a caller
    can tell a run without a manifest from a broken one)."""
    try:
        raw = files.read_bounded(path, MAX_BYTES)
    except files.FileRefused as exc:
        reason = exc.reason
        if reason.startswith("is larger than"):
            reason += ": not a run manifest"
        raise ManifestError(reason, path, missing=exc.missing) from None
    try:
        return parse(raw)
    except ManifestError as exc:
        raise ManifestError(exc.reason, path) from None
