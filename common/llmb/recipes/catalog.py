"""The recipe catalog: load each recipe's metadata.yaml, resolve a config, find its reference.

A recipe folder (llama3.1/, nemotron/, nemotronh/) holds one metadata.yaml: identity, container
image, supported matrix, parallelism for every published row, model shape for FLOPs, the NeMo
job each row runs (`nemo`, see llmb.recipes.nemojob), the published step times and the stack that
measured them (`sources`). This module is the only reader of those files; llmb.recipes.schema
checks what they hold.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llmb.recipes import bridgeschema, nemojob, perf, schema
from llmb.recipes.schema import CLUSTER_TYPES as CLUSTER_TYPES  # the names metadata.yaml uses
from llmb.recipes.schema import DTYPES, SCALINGS, SOURCE_PRECEDENCE, CatalogError
from llmb.shared import yamlfile

REPO_ROOT = Path(__file__).resolve().parents[3]
GPUS_FILE = REPO_ROOT / "common" / schema.GPUS_YAML

# What an install (the installer, llmb-run) targets: a cluster. `local` runs on this machine.
INSTALL_CLUSTER_TYPES = ("slurm", "runai")


@dataclass(frozen=True, eq=False)
class GpuType:
    """One GPU type of common/gpus.yaml, resolved once where a name enters (the cluster
    config, launch.sh's GPU_TYPE, the analyzer's --gpu-type, the installer) and handed on.
    Two are equal when they have the same name."""

    name: str
    gpus_per_node: int
    arch: str
    peak_tflops: Mapping[str, float]  # dense, per dtype: bf16, fp8, nvfp4 where published
    cuda_device_max_connections: int
    env: Mapping[str, str]
    segment_max_nodes: int | None = None  # GPUs of one NVLink domain, in nodes
    screen: Mapping[str, Mapping[str, str | float]] | None = None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, GpuType) and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)

    @property
    def memory_gbps(self) -> float | None:
        """Device memory bandwidth, GB/s (the screen's figure), or None."""
        return self._screen_figure("memory_gbps")

    @property
    def nvlink_gbps(self) -> float | None:
        """NVLink bandwidth per GPU in one direction, GB/s (the screen's figure), or None."""
        return self._screen_figure("nvlink_busbw_gbps")

    def _screen_figure(self, name: str) -> float | None:
        entry = (self.screen or {}).get(name)
        return float(entry["expected"]) if entry and "expected" in entry else None


@dataclass(frozen=True)
class Config:
    """One fully resolved benchmark configuration."""

    recipe: str
    workload: str
    model_size: str
    dtype: str
    gpu: GpuType
    num_gpus: int
    gpus_per_node: int
    scaling: str
    # The layout; None in a Megatron-Bridge recipe's row (bridge/*): its workload base config
    # in Megatron-Bridge chooses the parallelism and batch sizes, not llmb.
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
    seq_length: int
    source: str
    published: bool = True
    # Index of the metadata `configs` entry the row comes from (its per-row NeMo settings).
    entry: int = field(default=-1, compare=False, repr=False)

    @property
    def gpu_type(self) -> str:
        return self.gpu.name

    @property
    def nodes(self) -> int:
        return self.num_gpus // self.gpus_per_node

    @property
    def experiment_name(self) -> str:
        if self.tp is None:  # a Megatron-Bridge row: its layout is not llmb's to name
            return f"{self.workload}_{self.model_size}_{self.dtype}_gpus{self.num_gpus}"
        return (
            f"{self.workload}_{self.model_size}_{self.dtype}_gpus{self.num_gpus}"
            f"_tp{self.tp}_pp{self.pp}_cp{self.cp}_vp{self.vp}_mbs{self.mbs}_gbs{self.gbs}"
        )


@dataclass(frozen=True)
class Reference:
    """A published step time, the seed that publishes it and the stack that measured it."""

    step_time: float
    source: str
    image: str | None = None  # e.g. nvcr.io/nvidia/nemo:25.02.01
    nemo: str | None = None  # NeMo commit (or NeMo-Launcher)
    upstream: str | None = None  # NVIDIA/dgxc-benchmarking release(s)

    def describe(self) -> str:
        """Where the number comes from, in one short phrase: `seed 003, nemo 25.02.01`; a
        Megatron-Bridge row as published.Row.where() gives it."""
        seed = f"seed {self.source}" if self.source.isdigit() else self.source
        if not self.image or not self.source.isdigit():  # (a published row names its container)
            return seed
        name, _, tag = self.image.rpartition("/")[2].partition(":")
        return f"{seed}, {name} {tag}".rstrip()


@dataclass(frozen=True)
class Recipe:
    directory: Path
    data: Mapping[str, Any] = field(repr=False)

    # --- identity -------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return str(self.data["recipe"])

    @property
    def workload(self) -> str:
        return str(self.data["workload"])

    @property
    def family(self) -> str:
        return str(self.data["family"])

    @property
    def seq_length(self) -> int:
        return int(self.data["seq_length"])

    @property
    def image(self) -> str:
        return str(self.data["image"])

    @property
    def logged_tflops(self) -> bool:
        """False when NeMo's logged TFLOPS_per_GPU is not valid for this model (compute it)."""
        return bool(self.data.get("logged_tflops", True))

    @property
    def defaults(self) -> Mapping[str, str]:
        return self.data["defaults"]

    @property
    def profile_steps(self) -> tuple[int, int]:
        """Default (PROFILE_START_STEP, PROFILE_STOP_STEP), as the recipe's seed says."""
        return int(self.data["profile"]["start_step"]), int(self.data["profile"]["stop_step"])

    def source(self, seed: str) -> Mapping[str, str]:
        """The stack seed `seed` measured with (upstream tag, image, NeMo commit)."""
        return self.data["sources"][seed]

    def nemo_settings(self, config: Config) -> dict[str, Any]:
        """The NeMo job of one row (llmb.recipes.nemojob): recipe-wide, size and configs-entry
        settings merged in that order, by-dtype values resolved."""
        layers = [self.data["nemo"], self.size(config.model_size).get("nemo") or {}]
        if config.entry >= 0:
            layers.append(self.data["configs"][config.entry].get("nemo") or {})
        return nemojob.resolve(layers, config.dtype)

    @property
    def sizes(self) -> list[str]:
        return list(self.data["sizes"])

    def size(self, model_size: str) -> Mapping[str, Any]:
        return self.data["sizes"][model_size]

    # --- the supported matrix ---------------------------------------------------------------
    @property
    def dtypes(self) -> list[str]:
        return _ordered(d for c in self.data["configs"] for d in c["dtypes"])

    @property
    def gpu_types(self) -> list[str]:
        return _ordered(g for c in self.data["configs"] for g in c["gpu_types"])

    def rows(self, model_size: str | None = None, dtype: str | None = None,
             gpu_type: str | None = None, scaling: str | None = None) -> list[Config]:
        """Every published configuration matching the filters, resolved."""
        out: list[Config] = []
        for entry in self.data["configs"]:
            if model_size not in (None, entry["size"]) or scaling not in (None, entry["scaling"]):
                continue
            for g in entry["gpu_types"]:
                for d in entry["dtypes"]:
                    if gpu_type in (None, g) and dtype in (None, d):
                        out.extend(self._build(entry, d, g, n, None, True) for n in entry["scales"])
        return out

    def scales(self, model_size: str, dtype: str, gpu_type: str,
               scaling: str = "weak") -> list[int]:
        return sorted(c.num_gpus for c in self.rows(model_size, dtype, gpu_type, scaling))

    def resolve(self, model_size: str, dtype: str, gpu_type: str, num_gpus: int,
                scaling: str = "weak", gpus_per_node: int | None = None,
                allow_unpublished: bool = False) -> Config:
        """The configuration for one request, or CatalogError naming what is not supported.

        allow_unpublished extends the nearest published row's layout to a scale the seeds do
        not list (smoke tests, sweeps past the largest scale); the result has published=False
        and still must satisfy the DP/GA arithmetic.
        """
        self._check_choice("model_size", model_size, self.sizes)
        self._check_choice("dtype", dtype, bridgeschema.DTYPES if self.is_bridge else DTYPES)
        self._check_choice("gpu_type", gpu_type, gpu_types())
        self._check_choice("scaling", scaling, SCALINGS)
        what = f"{self.name} {model_size}"
        for fld, value, allowed in (
            ("dtype", dtype, _ordered(d for c in self._entries(model_size) for d in c["dtypes"])),
            ("gpu_type", gpu_type, _ordered(
                g for c in self._entries(model_size, dtype) for g in c["gpu_types"])),
            ("scaling", scaling, _ordered(
                c["scaling"] for c in self._entries(model_size, dtype, gpu_type))),
        ):
            if value not in allowed:
                raise CatalogError(
                    f"{what} does not publish {fld} {value}; supported: {', '.join(allowed)}",
                    fld, value, allowed)
            what += f" {value}"
        entries = self._entries(model_size, dtype, gpu_type, scaling)
        published = sorted(n for e in entries for n in e["scales"])
        per_node = (_gpu_table()[gpu_type].gpus_per_node if gpus_per_node is None
                    else gpus_per_node)
        if per_node < 1:
            raise CatalogError(f"GPUs per node must be positive, not {per_node}",
                               "gpus_per_node", per_node)
        if num_gpus < 1 or num_gpus % per_node:
            raise CatalogError(
                f"{num_gpus} GPUs is not a positive multiple of {per_node} GPUs per node",
                "num_gpus", num_gpus, published)
        entry = next((e for e in entries if num_gpus in e["scales"]), None)
        if entry is None:
            if not allow_unpublished:
                raise CatalogError(
                    f"{num_gpus} GPUs is not a published scale for {what}; "
                    f"published: {', '.join(map(str, published))}",
                    "num_gpus", num_gpus, published)
            entry = min(entries, key=lambda e: min(abs(n - num_gpus) for n in e["scales"]))
        return self._build(entry, dtype, gpu_type, num_gpus, per_node, entry is not None
                           and num_gpus in entry["scales"])

    def reference(self, model_size: str, dtype: str, gpu_type: str, num_gpus: int,
                  scaling: str = "weak") -> Reference | None:
        """The published step time for this row, from the newest seed that has one."""
        found = [
            Reference(float(r["step_time"][num_gpus]), r["source"], **self.source(r["source"]))
            for r in self.data["references"]
            if (r["size"], r["dtype"], r["gpu_type"], r["scaling"])
            == (model_size, dtype, gpu_type, scaling) and num_gpus in r["step_time"]
        ]
        found.sort(key=lambda r: SOURCE_PRECEDENCE.index(r.source))
        return found[0] if found else None

    def model_flops(self, model_size: str, num_layers: int | None = None) -> float | None:
        """FLOPs per sample; num_layers overrides the depth (405b proxies). None for a
        Megatron-Bridge recipe: its model shape is Megatron-Bridge's, not recorded here."""
        if self.is_bridge:
            return None
        shape = dict(self.size(model_size)["model"])
        if num_layers is not None:
            shape["num_layers"] = num_layers
        return perf.model_flops(self.family, shape, self.seq_length)

    # --- internals --------------------------------------------------------------------------
    def _entries(self, model_size: str, dtype: str | None = None, gpu_type: str | None = None,
                 scaling: str | None = None) -> list[Mapping[str, Any]]:
        return [
            c for c in self.data["configs"]
            if c["size"] == model_size and dtype in (None, *c["dtypes"])
            and gpu_type in (None, *c["gpu_types"]) and scaling in (None, c["scaling"])
        ]

    def _check_choice(self, fld: str, value: str, allowed: Iterable[str]) -> None:
        allowed = list(allowed)
        if value not in allowed:
            raise CatalogError(f"{self.name} has no {fld} {value}; allowed: {', '.join(allowed)}",
                               fld, value, allowed)

    @property
    def is_bridge(self) -> bool:
        """A Megatron-Bridge recipe (bridge/*): its job is llmb.recipes.bridgejob's."""
        return schema.is_bridge(self.data)

    def _build(self, entry: Mapping[str, Any], dtype: str, gpu_type: str, num_gpus: int,
               gpus_per_node: int | None, published: bool) -> Config:
        if self.is_bridge:
            return self._bridge_row(entry, dtype, gpu_type, num_gpus, gpus_per_node, published)
        tp, pp, cp, mbs = entry["tp"], entry["pp"], entry["cp"], entry["mbs"]
        gbs_float = entry["gbs"] if "gbs" in entry else entry["gbs_per_gpu"] * num_gpus
        where = f"{self.name} {entry['size']} {dtype} {gpu_type} at {num_gpus} GPUs"
        if gbs_float != int(gbs_float) or gbs_float < 1:
            raise CatalogError(f"{where}: global batch size {gbs_float} is not a whole number",
                               "num_gpus", num_gpus)
        gbs = int(gbs_float)
        if num_gpus % (tp * pp * cp):
            raise CatalogError(
                f"{where}: {num_gpus} GPUs is not divisible by TP x PP x CP = {tp * pp * cp}",
                "num_gpus", num_gpus)
        dp = num_gpus // (tp * pp * cp)
        if gbs % (mbs * dp):
            raise CatalogError(
                f"{where}: global batch size {gbs} is not divisible by MBS x DP = {mbs * dp}",
                "num_gpus", num_gpus)
        gpu = _gpu_table()[gpu_type]  # the recipe's GPU types are gpus.yaml's (schema)
        return Config(
            recipe=self.name, workload=self.workload, model_size=entry["size"], dtype=dtype,
            gpu=gpu, num_gpus=num_gpus, gpus_per_node=gpus_per_node or gpu.gpus_per_node,
            scaling=entry["scaling"], tp=tp, pp=pp, cp=cp, vp=entry["vp"], ep=entry["ep"],
            mbs=mbs, gbs=gbs, dp=dp, ga=gbs // (mbs * dp),
            num_layers=entry.get("num_layers", self.size(entry["size"])["model"]["num_layers"]),
            seq_length=self.seq_length, source=entry["source"], published=published,
            entry=self._index(entry),
        )

    def _bridge_row(self, entry: Mapping[str, Any], dtype: str, gpu_type: str, num_gpus: int,
                    gpus_per_node: int | None, published: bool) -> Config:
        """A Megatron-Bridge row: the scale and the GPUs per node are llmb's; the layout is
        left to Megatron-Bridge (None)."""
        gpu = _gpu_table()[gpu_type]
        return Config(
            recipe=self.name, workload=self.workload, model_size=entry["size"], dtype=dtype,
            gpu=gpu, num_gpus=num_gpus, gpus_per_node=gpus_per_node or gpu.gpus_per_node,
            scaling=entry["scaling"], tp=None, pp=None, cp=None, vp=None, ep=None, mbs=None,
            gbs=None, dp=None, ga=None, num_layers=int(self.size(entry["size"])["num_layers"]),
            seq_length=self.seq_length, source=entry["source"], published=published,
            entry=self._index(entry),
        )

    def _index(self, entry: Mapping[str, Any]) -> int:
        return next(i for i, e in enumerate(self.data["configs"]) if e is entry)


def _ordered(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))


# --- loading and validation -----------------------------------------------------------------

# What was loaded and validated (or primed: llmb.recipes.catalogcache), once per process:
# gpus.yaml's GPU types and its parsed data; each recipe by its folder (resolved).
_gpus: tuple[dict[str, GpuType], dict[str, Any]] | None = None
_recipes: dict[Path, Recipe] = {}


def _gpu_table() -> dict[str, GpuType]:
    global _gpus
    if _gpus is None:
        _gpus = _checked_gpus(yamlfile.load_yaml(GPUS_FILE.read_text()), str(GPUS_FILE))
    return _gpus[0]


def _checked_gpus(data: object, where: str) -> tuple[dict[str, GpuType], dict[str, Any]]:
    """gpus.yaml's parsed data, validated, with its GPU types; CatalogError naming a problem."""
    if not isinstance(data, dict) or not all(isinstance(name, str) for name in data):
        raise CatalogError(f"{where} is not a mapping of GPU type names to their facts")
    for name, entry in data.items():
        schema.check_gpu(f"{where}: {name}", entry)
    return {name: GpuType(name=name, **entry) for name, entry in data.items()}, data


def _checked_recipe(folder: Path, data: object, where: str) -> Recipe:
    """A parsed metadata.yaml, validated, every published row checked (the DP/GA arithmetic)."""
    if not isinstance(data, dict):
        raise CatalogError(f"{where} is not a mapping of recipe fields")
    schema.validate(data, where, gpu_types())
    recipe = Recipe(folder, data)
    recipe.rows()
    return recipe


def prime(gpus: object, recipes: Mapping[Path, object]) -> None:
    """Take gpus.yaml's data and each recipe folder's metadata as parsed by an earlier load
    (llmb.recipes.catalogcache), validated exactly as a load validates them: CatalogError, and
    nothing taken, when one of them is not valid."""
    global _gpus
    before = _gpus
    try:
        _gpus = _checked_gpus(gpus, f"{GPUS_FILE} (as kept)")
        checked = {folder: _checked_recipe(folder, data, f"{folder}/metadata.yaml (as kept)")
                   for folder, data in recipes.items()}
    except BaseException:
        _gpus = before
        raise
    _recipes.update(checked)


def loaded() -> tuple[dict[str, Any] | None, dict[Path, dict[str, Any]]]:
    """gpus.yaml's data (None when not loaded) and each loaded recipe's metadata, by folder."""
    return (_gpus[1] if _gpus else None,
            {folder: dict(recipe.data) for folder, recipe in _recipes.items()})


def gpu_types() -> list[str]:
    return list(_gpu_table())


def all_gpu_types() -> list[GpuType]:
    """Every GPU type gpus.yaml describes, in its order."""
    return list(_gpu_table().values())


def get_gpu_type(name: str) -> GpuType:
    try:
        return _gpu_table()[name]
    except KeyError:
        raise CatalogError(f"unknown GPU type {name}; allowed: {', '.join(gpu_types())}",
                           "gpu_type", name, gpu_types()) from None


def load_recipe(directory: Path | str) -> Recipe:
    """Load, validate and check every published row of one recipe folder (once a folder)."""
    folder = Path(directory).resolve()
    recipe = _recipes.get(folder)
    if recipe is None:
        path = folder / "metadata.yaml"
        data = yamlfile.read_yaml(path, str(path), CatalogError)
        recipe = _recipes[folder] = _checked_recipe(folder, data, str(path))
    return recipe


def recipe_dirs(root: Path = REPO_ROOT) -> list[Path]:
    """The recipe folders: the NeMo ones at the root, then the Megatron-Bridge ones under
    bridge/ (a name both use, llama3.1, finds the root one first)."""
    return [p.parent for pattern in ("*/metadata.yaml", "bridge/*/metadata.yaml")
            for p in sorted(root.glob(pattern))]


def all_recipes(root: Path = REPO_ROOT) -> list[Recipe]:
    return [load_recipe(d) for d in recipe_dirs(root)]


def find_recipe(key: str, root: Path = REPO_ROOT) -> Recipe:
    """A recipe by folder name (nemotron) or workload key (pretrain_nemotron4)."""
    for recipe in all_recipes(root):
        if key in (recipe.name, recipe.workload, recipe.directory.name):
            return recipe
    known = ", ".join(r.workload for r in all_recipes(root))
    raise CatalogError(f"unknown workload {key}; known: {known}", "workload", key)


def require_gpu_type(recipe: Recipe, gpu_type: str, root: Path = REPO_ROOT) -> None:
    """CatalogError (field gpu_type) when gpus.yaml knows gpu_type but the recipe publishes no
    row for it: one line naming the GPU types the recipe has, and the GPU types that no recipe
    publishes, which only the analyzer and the screen use. (A GPU type gpus.yaml does not know
    is the caller's to refuse.)"""
    if gpu_type not in gpu_types() or gpu_type in recipe.gpu_types:
        return
    published = {g for r in all_recipes(root) for g in r.gpu_types}
    only = [g for g in gpu_types() if g not in published]
    also = (f"; the analyzer (--gpu-type) and llmb-run screen also support {', '.join(only)}"
            if only else "")
    raise CatalogError(f"{gpu_type} is not supported by {recipe.name}; allowed: "
                       f"{', '.join(recipe.gpu_types)} (the GPU types it publishes rows for)"
                       + also, "gpu_type", gpu_type, recipe.gpu_types)
