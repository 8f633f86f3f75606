"""The schema of a Megatron-Bridge recipe's metadata.yaml (bridge/<name>/metadata.yaml).

Such a recipe is a folder of facts: its identity upstream (NVIDIA/exemplar-performance), the
stack (image, pinned repositories, per-GPU-type overrides), what setup downloads, the matrix
of sizes x GPU types x dtypes x scales, and what its job asks of Megatron-Bridge's
scripts/performance/setup_experiment.py (`bridge:`, read by llmb.launch.bridgejob). `problem`
names the first thing wrong in one line (llmb.recipes.schema raises it as CatalogError), or
None. The layout of a row (TP, PP, ..., GBS) is Megatron-Bridge's: the catalog's rows leave it
None; each size's `perf` records what Megatron-Bridge's PerfEnvPlugin reads of its workload
base configs (`BaseConfig`, one per GPU type and compute dtype; llmb.launch.bridgeenv applies
the plugin's rules to it).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

BRIDGE_FRAMEWORK = "megatron-bridge"
DTYPES = ("bf16", "fp8", "nvfp4")
FP8_RECIPES = ("cs", "mx", "sc")
TOP_KEYS = {
    "recipe", "workload", "name", "family", "framework", "image", "upstream", "repositories",
    "seq_length", "entrypoint", "requires_hf_token", "cluster_types", "defaults",
    "env", "profile", "bridge", "sizes", "configs", "references",
}
# downloads: a recipe without Hugging Face configs to fetch has none (llmb.install.sources)
TOP_OPTIONAL = {"gpu_overrides", "logged_tflops", "downloads"}
UPSTREAM_KEYS = {"workload", "path", "release"}
BRIDGE_KEYS = {"model_family_name", "offline", "nemo_home", "hf_home", "fp8_recipes",
               "overrides", "profile_args", "args", "checkpoint", "rules"}
RULE_KEYS = {"when"}
RULE_OPTIONAL = {"env", "args", "fp8_recipe", "time_limit", "defaults", "gbs_per_gpu",
                 "no_checkpoint"}
WHEN_KEYS = {"sizes", "dtypes", "gpu_types", "scales"}
SIZE_KEYS = {"recipe_name", "num_layers", "time_limit", "checkpoint", "env", "perf"}
PERF_KEYS = {"base_configs"}
PERF_OPTIONAL = {"env", "p2p_chunksize"}
COMPUTE_DTYPES = ("bf16", "nvfp4", *(f"fp8_{r}" for r in FP8_RECIPES))
DISPATCHERS = ("deepep", "hybridep")  # moe_flex_dispatcher_backend values the plugin tells apart
CONFIG_KEYS = {"size", "gpu_types", "dtypes", "scaling", "scales", "source"}
OVERRIDE_VARS = ("TP", "PP", "CP", "EP", "ETP", "ET", "GBS", "MBS", "VP")
# An argument or environment value of the job: it lands unquoted inside the job's single-quoted
# `bash -c '...'` (Megatron-Bridge's launcher template), so no quote, space or shell character.
_WORD = re.compile(r"[A-Za-z0-9_.,=:/+-]+")
_IMAGE = re.compile(r"nvcr\.io/nvidia/[a-z0-9._-]+:[0-9A-Za-z._-]+")


@dataclass(frozen=True)
class BaseConfig:
    """What Megatron-Bridge's PerfEnvPlugin (commit b50da4c7, scripts/performance/perf_plugins.py)
    reads of one workload base config (scripts/performance/configs/<family>/), as a size's
    `perf.base_configs.<GPU type>.<compute dtype>` records it; a key left out is the default."""

    tp: int = 1  # tensor_model_parallel_size
    pp: int = 1  # pipeline_model_parallel_size
    cp: int = 1  # context_parallel_size
    ep: int = 1  # expert_model_parallel_size
    dispatcher: str | None = None  # moe_flex_dispatcher_backend: deepep, hybridep or none
    a2a_overlap: bool = False  # moe_a2a_overlap
    full_iteration_graph: bool = False  # cuda_graph_impl full_iteration, or local with that scope
    cutedsl: bool = False  # cutedsl_fused_grouped_mlp
    nccl_ub: bool = False
    fsdp: bool = False  # use_megatron_fsdp
    cudnn_norm: bool = False  # the plugin keeps NVTE_NORM_{FWD,BWD}_USE_CUDNN for this row
    env: Mapping[str, str] = field(default_factory=dict)  # the row's own model-specific variables

    @classmethod
    def of(cls, data: Mapping[str, Any]) -> BaseConfig:
        """From metadata that `problem` passed."""
        values: dict[str, Any] = {k: v for k, v in data.items() if k != "env"}
        env = {str(n): str(v) for n, v in (data.get("env") or {}).items()}
        return cls(**values, env=env)


BASE_KEYS = {f.name for f in fields(BaseConfig)}


def _keys(where: str, data: object, required: set[str],
          optional: set[str] | frozenset[str] = frozenset()) -> str | None:
    if not isinstance(data, Mapping):
        return f"{where}: expected a mapping, got {type(data).__name__}"
    missing, unknown = required - set(data), set(data) - required - optional
    if missing:
        return f"{where}: missing key(s) {', '.join(sorted(missing))}"
    if unknown:
        return f"{where}: unknown key(s) {', '.join(sorted(unknown))}"
    return None


def problem(data: Mapping[str, Any], where: str, known_gpus: Collection[str]) -> str | None:
    """The first problem of a parsed Megatron-Bridge metadata.yaml, in one line, or None."""
    return (_keys(where, data, TOP_KEYS, TOP_OPTIONAL)
            or _keys(f"{where}: upstream", data["upstream"], UPSTREAM_KEYS)
            or _stack(data, where, known_gpus)
            or _bridge(data["bridge"], f"{where}: bridge", known_gpus)
            or _sizes(data["sizes"], f"{where}: sizes")
            or _configs(data, where, known_gpus)
            or (f"{where}: references: a Megatron-Bridge recipe publishes no step times yet"
                if data["references"] else None))


def _stack(data: Mapping[str, Any], where: str, known_gpus: Collection[str]) -> str | None:
    """framework, image and repositories; each GPU type's overrides of image and repositories."""
    framework = data["framework"]
    if not isinstance(framework, Mapping) or set(framework) != {"name", "version"}:
        return f"{where}: framework: expected {{name: {BRIDGE_FRAMEWORK}, version: ...}}"
    # (repositories, downloads and the overrides' repositories are what setup fetches: their
    # shapes are checked once, where setup reads them, by llmb.install.sources)
    found = _image(data["image"], f"{where}: image")
    if found:
        return found
    for gpu, pinned in (data.get("gpu_overrides") or {}).items():
        at = f"{where}: gpu_overrides.{gpu}"
        if gpu not in known_gpus:
            return f"{at}: GPU type {gpu!r} is not in gpus.yaml"
        found = _keys(at, pinned, set(), {"image", "repositories"})
        if not found and "image" in pinned:
            found = _image(pinned["image"], f"{at}.image")
        if found:
            return found
    return None


def _image(value: object, where: str) -> str | None:
    if not isinstance(value, str) or not _IMAGE.fullmatch(value):
        return f"{where}: {value!r} is not an image reference such as nvcr.io/nvidia/nemo:26.06.01"
    return None


def _bridge(bridge: object, where: str, known_gpus: Collection[str]) -> str | None:
    found = _keys(where, bridge, BRIDGE_KEYS)
    if found:
        return found
    assert isinstance(bridge, Mapping)
    for gpu, allowed in (bridge["fp8_recipes"] or {}).items():
        if gpu not in known_gpus or not allowed or not set(allowed) <= set(FP8_RECIPES):
            return (f"{where}.fp8_recipes.{gpu}: {allowed!r} is not a list within "
                    f"{', '.join(FP8_RECIPES)} for a GPU type of gpus.yaml")
    words = [*bridge["args"], *bridge["profile_args"],
             *(a for r in bridge["rules"] or [] for a in r.get("args") or []),
             *(v for r in bridge["rules"] or [] for v in (r.get("env") or {}).values())]
    bad = [w for w in words if not _WORD.fullmatch(str(w))]
    if bad:
        return f"{where}: argument {bad[0]!r} holds a character other than {_WORD.pattern}"
    if not set(bridge["overrides"]) <= set(OVERRIDE_VARS):
        return f"{where}.overrides: variables must be among {', '.join(OVERRIDE_VARS)}"
    if bridge["checkpoint"] not in (None, {"save_interval": True}):
        return (f"{where}.checkpoint: null (ENABLE_CHECKPOINT refused) or {{save_interval: "
                "true}} (--save_interval=MAX_STEPS: one checkpoint at the end)")
    for i, rule in enumerate(bridge["rules"] or []):
        at = f"{where}.rules[{i}]"
        found = _keys(at, rule, RULE_KEYS, RULE_OPTIONAL) or \
            _keys(f"{at}.when", rule["when"], set(), WHEN_KEYS)
        if found:
            return found
        if "gbs_per_gpu" in rule and "GBS" not in bridge["overrides"]:
            return f"{at}.gbs_per_gpu: GBS must be one of overrides"
        if not set(rule.get("defaults") or {}) <= set(bridge["overrides"]):
            return f"{at}.defaults: only the variables of overrides may have a default"
        if "fp8_recipe" in rule and rule["fp8_recipe"] not in FP8_RECIPES:
            return f"{at}.fp8_recipe: {rule['fp8_recipe']!r} is not one of {FP8_RECIPES}"
    return None


def _sizes(sizes: object, where: str) -> str | None:
    if not isinstance(sizes, Mapping) or not sizes:
        return f"{where}: expected a mapping of sizes"
    for name, size in sizes.items():
        found = _keys(f"{where}.{name}", size, SIZE_KEYS)
        if found:
            return found
        if not isinstance(size["num_layers"], int) or size["num_layers"] < 1:
            return f"{where}.{name}.num_layers: {size['num_layers']!r} is not a positive integer"
        found = _perf(size["perf"], f"{where}.{name}.perf")
        if found:
            return found
    return None


def _perf(perf: object, where: str) -> str | None:
    """A size's PerfEnvPlugin inputs: its base configs by GPU type and compute dtype, the
    model-specific variables of every row (`env`), the NCCL P2P chunk size (`p2p_chunksize`)."""
    found = _keys(where, perf, PERF_KEYS, PERF_OPTIONAL)
    if found:
        return found
    assert isinstance(perf, Mapping)
    chunk = perf.get("p2p_chunksize")
    if chunk is not None and (type(chunk) is not int or chunk < 2):
        return f"{where}.p2p_chunksize: {chunk!r} is not an integer above 1"
    found = _env(perf.get("env") or {}, f"{where}.env")
    if found or not isinstance(perf["base_configs"], Mapping):
        return found or f"{where}.base_configs: expected a mapping of GPU types"
    for gpu, by_dtype in perf["base_configs"].items():
        if not isinstance(by_dtype, Mapping) or not set(by_dtype) <= set(COMPUTE_DTYPES):
            return (f"{where}.base_configs.{gpu}: expected a mapping of compute dtypes among "
                    f"{', '.join(COMPUTE_DTYPES)}")
        for dtype, base in by_dtype.items():
            found = _base(base, f"{where}.base_configs.{gpu}.{dtype}")
            if found:
                return found
    return None


def _base(base: object, where: str) -> str | None:
    found = _keys(where, base, set(), BASE_KEYS)
    if found:
        return found
    assert isinstance(base, Mapping)
    for key, value in base.items():
        if key in ("tp", "pp", "cp", "ep"):
            ok = type(value) is int and value >= 1
            want = "a positive integer"
        elif key == "dispatcher":
            ok, want = value in DISPATCHERS, f"one of {', '.join(DISPATCHERS)}"
        elif key == "env":
            found = _env(value, f"{where}.env")
            if found:
                return found
            continue
        else:
            ok, want = type(value) is bool, "true or false"
        if not ok:
            return f"{where}.{key}: {value!r} is not {want}"
    return None


def _env(env: object, where: str) -> str | None:
    if not isinstance(env, Mapping):
        return f"{where}: expected a mapping of variables"
    bad = [f"{k}={v}" for k, v in env.items()
           if not re.fullmatch(r"[A-Z_][A-Z0-9_]*", str(k)) or not _WORD.fullmatch(str(v))]
    if bad:
        return f"{where}: {bad[0]!r} is not NAME=VALUE with VALUE of {_WORD.pattern}"
    return None


def _configs(data: Mapping[str, Any], where: str, known_gpus: Collection[str]) -> str | None:
    seen: dict[tuple[object, ...], int] = {}
    for i, entry in enumerate(data["configs"]):
        at = f"{where}: configs[{i}]"
        found = _keys(at, entry, CONFIG_KEYS)
        if found:
            return found
        if entry["size"] not in data["sizes"]:
            return f"{at}: size {entry['size']} is not under sizes"
        if entry["source"] != data["upstream"]["release"] or entry["scaling"] != "weak":
            return f"{at}: source must be upstream.release and scaling weak"
        for name, values, allowed in (("dtype", entry["dtypes"], DTYPES),
                                      ("GPU type", entry["gpu_types"], known_gpus)):
            bad = [v for v in values if v not in allowed]
            if bad:
                return f"{at}: {name} {bad[0]!r} is not one of {', '.join(allowed)}"
        for key in ((entry["size"], d, g, n) for d in entry["dtypes"]
                    for g in entry["gpu_types"] for n in entry["scales"]):
            if key in seen:
                return f"{at}: {' '.join(map(str, key))} GPUs is already listed by " \
                       f"configs[{seen[key]}]"
            seen[key] = i
    return None
