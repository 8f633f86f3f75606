"""The schema of a recipe's metadata.yaml and of common/gpus.yaml, checked by hand.

`validate` walks a parsed metadata.yaml (llmb.recipes.catalog loads it) and raises CatalogError
naming the first problem in one line: a missing or unknown key at any level, a name that is not
known (family, cluster type, dtype, GPU type, scaling, seed), a row published by two entries, a
step time for a row no entry publishes, a NeMo job (llmb.recipes.nemojob) that is incomplete or
wrong at any level. `check_gpu` does the same for one GPU type of gpus.yaml. The DP/GA arithmetic
of each row is the catalog's (it resolves rows). The names a metadata file may use live here
too, with CatalogError; llmb.recipes.catalog offers them to the rest of llmb.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any

from llmb.recipes import bridgeschema, nemojob, perf, screenfacts
from llmb.recipes.bridgeschema import BRIDGE_FRAMEWORK
from llmb.shared.errors import UsageError

# Seed documents in order of precedence: where two publish the same row, the newer one wins.
SOURCE_PRECEDENCE = ("004", "000", "003", "001", "002")
SCALINGS = ("weak", "strong")
DTYPES = nemojob.DTYPES
CLUSTER_TYPES = ("slurm", "runai", "local")
GPUS_YAML = "gpus.yaml"

TOP_KEYS = {
    "recipe", "workload", "name", "family", "framework", "image", "seq_length", "entrypoint",
    "requires_hf_token", "cluster_types", "defaults", "env", "sizes", "configs", "references",
    "sources", "nemo", "profile",
}
TOP_OPTIONAL = {"logged_tflops"}
# What setup fetches for a recipe (pinned repositories, Hugging Face configs, per-GPU image and
# repositories); their shapes are checked where setup reads them (llmb.install.sources).
TOP_OPTIONAL |= {"repositories", "downloads", "gpu_overrides"}
SIZE_KEYS = {"nemo_recipe", "time_limit", "model", "checkpoint", "env"}
SIZE_OPTIONAL = {"nemo"}
CHECKPOINT_KEYS = {"size", "save_min_scale", "load_min_scale"}
CONFIG_KEYS = {
    "size", "gpu_types", "dtypes", "scaling", "scales", "tp", "pp", "cp", "vp", "ep", "mbs",
    "source",
}
CONFIG_OPTIONAL = {"gbs", "gbs_per_gpu", "num_layers", "nemo"}
REFERENCE_KEYS = {"size", "dtype", "gpu_type", "scaling", "source", "step_time"}
# The stack a seed's numbers were measured with: upstream release (NVIDIA/dgxc-benchmarking
# tag), container image, NeMo (commit, or NeMo-Launcher for the NeMo 1 releases).
SOURCE_KEYS = {"upstream", "image", "nemo"}
PROFILE_KEYS = {"start_step", "stop_step"}
GPU_KEYS = {"gpus_per_node", "arch", "peak_tflops", "cuda_device_max_connections", "env"}
GPU_OPTIONAL = {"segment_max_nodes", "screen"}  # screen: llmb.recipes.screenfacts


class CatalogError(UsageError):
    """A request the catalog cannot satisfy, or a metadata file that is wrong.

    `field` names what was wrong in catalog terms (model_size, dtype, gpu_type, num_gpus,
    scaling, gpus_per_node); callers map it to their own variable or flag name.
    """

    def __init__(self, message: str, field: str | None = None, value: object = None,
                 allowed: Iterable[object] = ()) -> None:
        super().__init__(message)
        self.field = field
        self.value = value
        self.allowed = tuple(allowed)


def _check_keys(where: str, data: object, required: set[str],
                optional: set[str] | frozenset[str] = frozenset()) -> None:
    if not isinstance(data, Mapping):
        raise CatalogError(f"{where}: expected a mapping, got {type(data).__name__}")
    missing = required - set(data)
    unknown = set(data) - required - optional
    if missing:
        raise CatalogError(f"{where}: missing key(s) {', '.join(sorted(missing))}")
    if unknown:
        raise CatalogError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")


def is_bridge(data: Mapping[str, Any]) -> bool:
    """A Megatron-Bridge recipe (bridge/*/metadata.yaml): framework megatron-bridge."""
    framework = data.get("framework")
    return isinstance(framework, Mapping) and framework.get("name") == BRIDGE_FRAMEWORK


def validate(data: Mapping[str, Any], where: str, known_gpus: Collection[str]) -> None:
    """Check a parsed metadata.yaml; raise CatalogError naming the first problem. `known_gpus`:
    the GPU types of gpus.yaml."""
    if is_bridge(data):
        problem = bridgeschema.problem(data, where, known_gpus)
        if problem:
            raise CatalogError(problem)
        return
    _check_keys(where, data, TOP_KEYS, TOP_OPTIONAL)
    if not isinstance(data.get("logged_tflops", True), bool):
        raise CatalogError(f"{where}: logged_tflops must be true or false")
    family = data["family"]
    if family not in perf.SHAPE_KEYS:
        raise CatalogError(f"{where}: family {family!r} is not one of {', '.join(perf.SHAPE_KEYS)}")
    for ctype in data["cluster_types"]:
        if ctype not in CLUSTER_TYPES:
            raise CatalogError(f"{where}: cluster type {ctype!r} is not one of "
                               f"{', '.join(CLUSTER_TYPES)}")
    _validate_job(data, where)
    for name, size in data["sizes"].items():
        at = f"{where}: sizes.{name}"
        _check_keys(at, size, SIZE_KEYS, SIZE_OPTIONAL)
        _check_keys(f"{at}.model", size["model"], set(perf.SHAPE_KEYS[family]))
        _check_keys(f"{at}.checkpoint", size["checkpoint"], CHECKPOINT_KEYS)
        _check_nemo(f"{at}.nemo", size.get("nemo") or {})
    published = _validate_configs(data, where, known_gpus)
    _validate_references(data, where, published)


def _validate_configs(data: Mapping[str, Any], where: str,
                      known_gpus: Collection[str]) -> dict[tuple[object, ...], int]:
    """Each `configs` entry; returns (size, dtype, gpu, scaling, gpus) -> its entry index."""
    published: dict[tuple[object, ...], int] = {}
    for i, entry in enumerate(data["configs"]):
        at = f"{where}: configs[{i}]"
        _check_keys(at, entry, CONFIG_KEYS, CONFIG_OPTIONAL)
        if ("gbs" in entry) == ("gbs_per_gpu" in entry):
            raise CatalogError(f"{at}: give exactly one of gbs, gbs_per_gpu")
        if entry["size"] not in data["sizes"]:
            raise CatalogError(f"{at}: size {entry['size']} is not under sizes")
        if entry["scaling"] not in SCALINGS or entry["source"] not in SOURCE_PRECEDENCE:
            raise CatalogError(
                f"{at}: bad scaling {entry['scaling']!r} or source {entry['source']!r}")
        if entry["source"] not in data["sources"]:
            raise CatalogError(f"{at}: source {entry['source']} has no entry under sources")
        for d in entry["dtypes"]:
            if d not in DTYPES:
                raise CatalogError(f"{at}: dtype {d!r} is not one of {', '.join(DTYPES)}")
        _check_row_job(data, entry, at)
        for g in entry["gpu_types"]:
            if g not in known_gpus:
                raise CatalogError(f"{at}: GPU type {g!r} is not in {GPUS_YAML}")
        for key in _row_keys(entry["size"], entry["dtypes"], entry["gpu_types"],
                             entry["scaling"], entry["scales"]):
            if key in published:
                raise CatalogError(f"{at}: {' '.join(map(str, key))} GPUs is already published "
                                   f"by configs[{published[key]}]")
            published[key] = i
    return published


def _check_row_job(data: Mapping[str, Any], entry: Mapping[str, Any], at: str) -> None:
    """A configs entry's NeMo settings, and the merged NeMo job of each of its dtypes."""
    _check_nemo(f"{at}.nemo", entry.get("nemo") or {})
    layers = [data["nemo"], data["sizes"][entry["size"]].get("nemo") or {},
              entry.get("nemo") or {}]
    for d in entry["dtypes"]:
        try:
            nemojob.check(nemojob.resolve(layers, d), complete=True)
        except nemojob.SettingsError as err:
            raise CatalogError(f"{at}: the NeMo job of its {d} rows: {err}") from None


def _validate_references(data: Mapping[str, Any], where: str,
                         published: Mapping[tuple[object, ...], int]) -> None:
    """Each published step time names a known source and a row some configs entry publishes."""
    for i, ref in enumerate(data["references"]):
        at = f"{where}: references[{i}]"
        _check_keys(at, ref, REFERENCE_KEYS)
        if ref["source"] not in SOURCE_PRECEDENCE:
            raise CatalogError(f"{at}: unknown source {ref['source']!r}")
        if ref["source"] not in data["sources"]:
            raise CatalogError(f"{at}: source {ref['source']} has no entry under sources "
                               "(the stack that measured it)")
        for key in _row_keys(ref["size"], [ref["dtype"]], [ref["gpu_type"]], ref["scaling"],
                             ref["step_time"]):
            if key not in published:
                raise CatalogError(f"{at}: step time for {' '.join(map(str, key))} GPUs, "
                                   "a row no entry of configs publishes")


def _validate_job(data: Mapping[str, Any], where: str) -> None:
    """The recipe-wide NeMo settings, the profile defaults and the measuring stacks."""
    _check_keys(f"{where}: profile", data["profile"], PROFILE_KEYS)
    start, stop = data["profile"]["start_step"], data["profile"]["stop_step"]
    if not all(isinstance(s, int) and not isinstance(s, bool) for s in (start, stop)) \
            or not 0 < start < stop:
        raise CatalogError(f"{where}: profile steps {start!r}..{stop!r} are not 0 < start < stop")
    _check_nemo(f"{where}: nemo", data["nemo"])
    if not isinstance(data["sources"], Mapping):
        raise CatalogError(f"{where}: sources: expected a mapping of seed to stack")
    for seed, stack in data["sources"].items():
        if seed not in SOURCE_PRECEDENCE:
            raise CatalogError(f"{where}: sources: unknown seed {seed!r}")
        _check_keys(f"{where}: sources.{seed}", stack, SOURCE_KEYS)


def _check_nemo(where: str, block: object) -> None:
    try:
        nemojob.check(block)
    except nemojob.SettingsError as err:
        raise CatalogError(f"{where}: {err}") from None


def _row_keys(size: str, dtypes: Iterable[str], gpus: Iterable[str], scaling: str,
              scales: Iterable[int]) -> list[tuple[object, ...]]:
    return [(size, d, g, scaling, n) for d in dtypes for g in gpus for n in scales]


def check_gpu(where: str, entry: object) -> None:
    """One GPU type of gpus.yaml: its keys and its `screen:` block (llmb.recipes.screenfacts)."""
    _check_keys(where, entry, GPU_KEYS, GPU_OPTIONAL)
    problem = screenfacts.problem(f"{where}.screen", entry.get("screen")
                                  if isinstance(entry, Mapping) else None)
    if problem:
        raise CatalogError(problem)
