"""Which configuration a log belongs to: its run manifest, else its experiment name.

A run manifest (llmb_manifest.json, written by launch.sh next to the logs) is read from the
log's directory or up to two parents; every field the analysis uses is checked, and a manifest
that is malformed is reported once (a warning naming the field) and the run is identified by
its name instead. Names follow both styles of the seeds,
`<workload>_<size>_<dtype>_gpus<N>_tp.._gbs<G>` and `<workload>_<size>_<dtype>_<N>`, and the
current recipes' (`pretrain_qwen3_30b_a3b_bf16_gpus8_tp1_pp1_cp1_vpNone_ep8_etp1_mbs8_gbs512`:
any fields between gpus and gbs are read). A model the catalog does not know, named in the new
style, is identified as an UnknownModel: its GPUs, GBS and dtype, no reference.
The catalog (pyyaml) is imported only when there is a log to identify.
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar

from llmb import manifest
from llmb.manifest import ManifestError
from llmb.shared.values import ascii_digits, brief, shown

if TYPE_CHECKING:
    from llmb.recipes.catalog import Config, Recipe, Reference

DEFAULT_GPU = "h100"
MANIFEST_LEVELS = 3  # the log's directory and up to two parents
MANIFESTS_KEPT = 256  # manifests (and directories without one) remembered
SCALINGS = ("weak", "strong")
# A manifest's JSON object as read (llmb.manifest), each field checked where it is used; or the
# one-line problem reading it.
ManifestData = Mapping[str, object]
Found = tuple[str, ManifestData | str]  # (its path, its data)


def display(path: str) -> str:
    """A path as text that any encoder accepts (undecodable bytes become U+FFFD)."""
    if path.isascii():  # (most paths: as they are, without a round trip through bytes)
        return path
    return path.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


class Manifests:
    """llmb_manifest.json files near the logs, read once per directory (of the last
    MANIFESTS_KEPT directories: logs are found directory by directory)."""

    def __init__(self) -> None:
        self._cache: OrderedDict[str, Found | None] = OrderedDict()
        self._near: tuple[str, Found | None] | None = None

    def read(self, directory: str) -> Found | None:
        """(path, data) of the manifest in directory, data a one-line problem when it cannot
        be read as a JSON object; None when there is none."""
        if directory not in self._cache:
            path = os.path.join(directory, manifest.NAME)
            found: Found | None
            try:
                found = (path, manifest.read_object(path))
            except ManifestError as exc:
                found = None if exc.missing else (path, exc.reason)
            self._cache[directory] = found
            while len(self._cache) > MANIFESTS_KEPT:
                self._cache.popitem(last=False)
        return self._cache[directory]

    def near(self, log_path: str) -> Found | None:
        """The manifest nearest the log (its folder, or up to two above); worked out once per
        folder (the logs of a folder come together)."""
        folder = os.path.dirname(log_path)
        if self._near is not None and self._near[0] == folder:
            return self._near[1]
        found = self._nearest(os.path.abspath(folder or "."))
        self._near = (folder, found)
        return found

    def _nearest(self, directory: str) -> Found | None:
        for _ in range(MANIFEST_LEVELS):
            if (found := self.read(directory)) is not None:
                return found
            parent = os.path.dirname(directory)
            if parent == directory:
                break
            directory = parent
        return None


def nccl_traced(manifest: ManifestData | str | None) -> bool:
    options = manifest.get("options") if isinstance(manifest, Mapping) else None
    return isinstance(options, dict) and options.get("nccl_trace") is True


# --- names ------------------------------------------------------------------------------------

_SIZE = r"(?P<size>\d+(?:\.\d+)?[bmt](?:_a\d+(?:\.\d+)?[bm])?)"  # 8b; 30b_a3b (MoE: active)
_DTYPE = r"(?P<dtype>[a-z0-9]+(?:_(?:cs|ds|mx|sc))?)"  # bf16, fp8, fp8_cs, nvfp4
# gpus<N>, then any <key><number or None> fields (tp, pp, cp, vp, ep, etp, mbs, ...), gbs<G>
_NEW_REST = (_SIZE + "_" + _DTYPE + r"_gpus(?P<gpus>\d{1,9})"
             r"(?P<fields>(?:_[a-z]{1,8}(?:\d{1,12}|none))*?)_gbs(?P<gbs>\d{1,12})"
             r"(?P<tags>(?:_[a-z][a-z0-9]*)*)(?P<suffix>(?:_\d+)*)")
_NEW_NAME = re.compile(_NEW_REST, re.I)
# a Megatron-Bridge recipe's run: <size>_<compute dtype>_gpus<N> (its layout is in the log)
_GPUS_NAME = re.compile(_SIZE + "_" + _DTYPE + r"_gpus(?P<gpus>\d{1,9})"
                        r"(?P<tags>(?:_[a-z][a-z0-9]*)*)(?P<suffix>(?:_\d+)*)", re.I)
_OLD_NAME = re.compile(
    _SIZE + "_" + _DTYPE + r"_(?P<gpus>\d{1,9})"
    r"(?P<tags>(?:_[a-z][a-z0-9]*)*)(?P<suffix>(?:_\d+)*)", re.I)
# A model the catalog does not know: only in the new style, which states GPUs and GBS itself.
_ANY_NEW_NAME = re.compile(r"(?P<workload>[a-z][a-z0-9.-]*(?:_[a-z][a-z0-9.-]*)*?)_" + _NEW_REST,
                           re.I)
_FIELD = re.compile(r"_([a-z]{1,8})(\d{1,12}|none)", re.I)
_JOB_SUFFIX = re.compile(r"(?:_\d+)+(?:\.out)?$")  # log-<name>_<job>_<n>.out: <job>_<n>


@dataclass(frozen=True)
class NameInfo:
    experiment: str
    workload: str
    model_size: str
    dtype: str
    num_gpus: int
    gbs: int | None
    tags: tuple[str, ...]
    parallel: tuple[int, int, int] | None = None  # (TP, PP, CP) when the name states them


@dataclass(frozen=True)
class UnknownModel:
    """A model the catalog does not know, named by its experiment name (`pretrain_qwen3_...`):
    its runs get their timing and tokens/s (where the log states the sequence length), never a
    reference, model FLOPs or MFU."""

    workload: str
    logged_tflops: bool = True  # what the log says is all there is
    sizes: tuple[str, ...] = ()
    seq_length: int | None = None

    @property
    def name(self) -> str:
        return self.workload.removeprefix("pretraining_").removeprefix("pretrain_")


def _info(m: re.Match[str], experiment: str, workload: str) -> NameInfo | None:
    if int(m.group("gpus")) < 1:
        return None
    gbs = m.groupdict().get("gbs")
    fields = {k.lower(): v for k, v in _FIELD.findall(m.groupdict().get("fields") or "")}
    parallel = None
    if all(k in fields and ascii_digits(fields[k]) for k in ("tp", "pp", "cp")):
        parallel = (int(fields["tp"]), int(fields["pp"]), int(fields["cp"]))
    return NameInfo(
        experiment=experiment[: len(experiment) - len(m.group("suffix"))], workload=workload,
        model_size=m.group("size").lower(), dtype=m.group("dtype").lower(),
        num_gpus=int(m.group("gpus")), gbs=int(gbs) if gbs else None,
        tags=tuple(t for t in m.group("tags").lower().split("_") if t), parallel=parallel)


def parse_name(name: str, workloads: list[str]) -> NameInfo | None:
    """Both naming styles: <workload>_<size>_<dtype>_gpus<N>_tp.._gbs<G> (new; any fields
    between gpus and gbs, such as ep8 or etp1, are read) and <workload>_<size>_<dtype>_<N> (old;
    GBS from the published row at that scale). A workload the catalog does not know is read
    from the new style only (NameInfo.workload is then not one of `workloads`).

    A trailing _<digits> (job id, timestamp, restart) may follow; `pretraining_` is accepted for
    `pretrain_` (seed 000 writes both).
    """
    for workload in sorted(workloads, key=len, reverse=True):
        for prefix in (workload, workload.replace("pretrain_", "pretraining_", 1)):
            if not name.startswith(prefix + "_"):
                continue
            rest = name[len(prefix) + 1:]
            m = (_NEW_NAME.fullmatch(rest) or _OLD_NAME.fullmatch(rest)
                 or _GPUS_NAME.fullmatch(rest))
            if m and (info := _info(m, name, workload)) is not None:
                return info
    m = _ANY_NEW_NAME.fullmatch(name)
    if m is None or m.group("workload") in workloads:
        return None  # a known workload's name that is not one of its styles
    return _info(m, name, m.group("workload"))


def name_candidates(rel: str, root: str) -> list[str]:
    """Where an experiment name may be: the first component under DIR, the log's parent
    directories (nearest first), DIR itself and its parent, then the log's own name."""
    parts = Path(rel).parts
    dirs = list(parts[:-1])
    out = dirs[:1] + dirs[::-1]
    root_abs = Path(os.path.abspath(root))
    out += [root_abs.name, root_abs.parent.name]
    stem = parts[-1].removesuffix(".out")
    out.append(stem.removeprefix("log-"))
    return list(dict.fromkeys(p for p in out if p))


# --- manifest fields --------------------------------------------------------------------------

# A GPU count, batch size or sequence length of a manifest is at most this: the math on them
# (tokens/s, MFU, model FLOPs) stays far inside a float's range (10^400 GPUs overflowed it).
MAX_COUNT = 1 << 24


def _count(data: ManifestData, key: str, where: str = "", required: bool = True) -> int | None:
    """A positive whole number up to MAX_COUNT (JSON integer, or a string of digits); None
    when absent and not required."""
    value = data.get(key)
    if value is None and not required:
        return None
    if isinstance(value, str) and value.strip().isascii() and value.strip().isdigit() \
            and len(value.strip()) <= 18:
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_COUNT:
        raise ManifestError(f"{where}{key} is {brief(_json(value))}, not a positive whole "
                            f"number up to {MAX_COUNT}")
    return value


def _json(value: object) -> str:
    try:
        return json.dumps(value)
    except ValueError:  # an integer of more digits than Python converts to text
        return brief(value)


def _text(data: ManifestData, key: str) -> str:
    value = data.get(key)
    if not isinstance(value, str) or not value.strip():
        raise ManifestError(f"{key} is {shown(json.dumps(value))[:60]}, not a name")
    return value.strip().lower()


def _section(data: ManifestData, key: str) -> ManifestData:
    value = data.get(key, {})
    if not isinstance(value, dict):
        raise ManifestError(f"{key} is not a mapping")
    return value


def _parallel(par: ManifestData) -> tuple[int, int, int] | None:
    """(TP, PP, CP) of a manifest's parallelism, when it states all three as counts."""
    found = [v for v in (par.get(k) for k in ("tp", "pp", "cp"))
             if isinstance(v, int) and not isinstance(v, bool) and v > 0]
    return (found[0], found[1], found[2]) if len(found) == 3 else None


class Identity(TypedDict):
    """Which configuration a run is, as its manifest or its name says (Identifier.identify):
    what its result's identity, figures and checks are made from."""

    recipe: Recipe | UnknownModel
    experiment: str | None
    model_size: str
    dtype: str
    gpu_type: str
    num_gpus: int | None
    gbs: int | None
    gbs_from: str  # manifest, name, published row, log
    scaling: str | None  # weak, strong, or unknown
    num_layers: int | None
    parallel: tuple[int, int, int] | None  # (TP, PP, CP)
    seq_length: int | None
    by: str  # manifest, name
    final_index: int | None  # the manifest's max_steps - 1
    smoke: bool  # a smoke test: no model FLOPs, MFU or reference apply
    reference: Reference | None  # the published step time, for the published row only


class Identifier:
    """Turns a manifest or an experiment name into the run's catalog identity."""

    def __init__(self, gpu_type: str | None) -> None:
        from llmb.recipes import catalog, catalogcache  # pyyaml: only once a log is identified

        self.catalog = catalog
        self.gpu_type = gpu_type or DEFAULT_GPU
        primed = catalogcache.prime()  # as an earlier run loaded it, when nothing changed
        try:
            self.recipes = {r.workload: r for r in catalog.all_recipes()}
            catalog.gpu_types()
        except catalog.CatalogError as exc:  # a broken metadata.yaml: analyze, do not identify
            self.recipes = {}
            self.error: str | None = str(exc)
        else:
            self.error = None
            if not primed:
                catalogcache.store()
        self._by_name = {r.name: r for r in self.recipes.values()}
        # the identities of the last MANIFESTS_KEPT manifests (a run's logs come together)
        self._manifests: OrderedDict[str, tuple[Identity | None, str | None]] = OrderedDict()
        self._names: OrderedDict[str, NameInfo | None] = OrderedDict()  # name -> its parts
        self._named: OrderedDict[NameInfo, Identity] = OrderedDict()  # -> identity
        self._layers: OrderedDict[tuple[object, ...], int | None] = OrderedDict()
        self._places: OrderedDict[tuple[str, str, str], NameInfo | None] = OrderedDict()
        self._figures: OrderedDict[tuple[object, ...], float | None] = OrderedDict()

    def recipe(self, key: object) -> Recipe | None:
        return self.recipes.get(str(key)) or self._by_name.get(str(key))

    def from_manifest(self, path: str, m: ManifestData | str
                      ) -> tuple[Identity | None, str | None]:
        """(identity or None, a one-line problem or None); worked out once per manifest."""
        if path not in self._manifests:
            try:
                if isinstance(m, str):
                    raise ManifestError(m)
                self._manifests[path] = (self._manifest_identity(m), None)
            except ManifestError as exc:
                self._manifests[path] = (None, f"{exc}; identified by name instead")
            while len(self._manifests) > MANIFESTS_KEPT:
                self._manifests.popitem(last=False)
        return self._manifests[path]

    def _manifest_identity(self, m: ManifestData) -> Identity:
        recipe = self.recipe(m.get("workload")) or self.recipe(m.get("recipe"))
        if recipe is None:
            known = f"{len(self.recipes)} known: llmb-run list names them" if self.recipes \
                else "no catalog"
            raise ManifestError(f"workload {shown(m.get('workload'))[:60]} is not a known "
                                f"recipe ({known})")
        par = _section(m, "parallelism")
        opts = _section(m, "options")
        bridge = getattr(recipe, "is_bridge", False) is True
        scaling, experiment = m.get("scaling"), m.get("experiment")
        if scaling is not None and scaling not in SCALINGS:
            raise ManifestError(f"scaling is {shown(scaling)[:40]}, not weak or strong")
        smoke = opts.get("smoke_test", False)
        if not isinstance(smoke, bool):
            raise ManifestError("options.smoke_test is not true or false")
        gpu = m.get("gpu_type")
        max_steps = _count(opts, "max_steps", "options.", required=False)
        ident: Identity = {
            "recipe": recipe, "experiment": experiment if isinstance(experiment, str) else None,
            "model_size": _text(m, "model_size"),
            "dtype": _text(_section(m, "bridge"), "compute_dtype") if bridge and "bridge" in m
            else _text(m, "dtype"),
            "gpu_type": _text(m, "gpu_type") if gpu is not None else self.gpu_type,
            "num_gpus": _count(m, "num_gpus"),
            # (a Megatron-Bridge run's layout is Megatron-Bridge's: its log states the GBS)
            "gbs": _count(par, "gbs", "parallelism.", required=not bridge),
            "gbs_from": "manifest", "scaling": scaling if isinstance(scaling, str) else None,
            "num_layers": _count(par, "num_layers", "parallelism.", required=False),
            "parallel": _parallel(par),
            "seq_length": _count(m, "seq_length", required=False) or recipe.seq_length,
            "by": "manifest",
            "final_index": max_steps - 1 if max_steps else None,
            # A smoke test trains a tiny stand-in model: nothing about the real model's
            # FLOPs, MFU or reference applies to its step times.
            "smoke": smoke, "reference": None,
        }
        ident["reference"] = None if smoke else self._reference(recipe, ident)
        return ident

    def from_name(self, info: NameInfo) -> Identity:
        recipe = self.recipes.get(info.workload)
        if recipe is None or info.model_size not in recipe.sizes:  # (qwen3's 30b_a3b: a name
            return self._unknown(info)  # Megatron-Bridge gives, not one of the recipe's sizes)
        gpu = self.gpu_type
        weak = self._resolve(recipe, info, gpu, "weak")
        gbs = info.gbs if info.gbs is not None else (weak.gbs if weak else None)
        scaling = None
        if weak is not None and gbs is not None:
            scaling = "weak" if gbs == weak.gbs else "strong"
        elif (strong := self._resolve(recipe, info, gpu, "strong")) is not None:
            scaling = "strong" if strong.gbs == gbs else None
        layout = self._resolve(recipe, info, gpu, scaling or "weak")
        ident: Identity = {
            "recipe": recipe, "experiment": info.experiment, "model_size": info.model_size,
            "dtype": info.dtype, "gpu_type": gpu, "num_gpus": info.num_gpus, "gbs": gbs,
            "gbs_from": "name" if info.gbs is not None else "published row",
            "scaling": scaling, "num_layers": layout.num_layers if layout else None,
            "seq_length": recipe.seq_length, "by": "name", "final_index": None, "smoke": False,
            "parallel": info.parallel, "reference": None,
        }
        ident["reference"] = self._reference(recipe, ident)
        return ident

    def _unknown(self, info: NameInfo) -> Identity:
        """The identity of a model the catalog does not know: what its name says, and no
        reference (llmb.analysis.result takes the sequence length from the log)."""
        return {
            "recipe": UnknownModel(info.workload), "experiment": info.experiment,
            "model_size": info.model_size, "dtype": info.dtype, "gpu_type": self.gpu_type,
            "num_gpus": info.num_gpus, "gbs": info.gbs, "gbs_from": "name", "scaling": None,
            "num_layers": None, "seq_length": None, "by": "name", "final_index": None,
            "smoke": False, "parallel": info.parallel, "reference": None,
        }

    def catalog_layers(self, ident: Identity) -> int | None:
        """The layer count the catalog gives the identified configuration (the launcher writes
        it into the manifest), or None when the catalog has no such row."""
        key = (ident["recipe"].name, *(ident[k] for k in ("model_size", "dtype", "gpu_type",
                                                          "num_gpus", "scaling")))
        return _kept(self._layers, key, lambda: self._catalog_layers(ident))

    def _catalog_layers(self, ident: Identity) -> int | None:
        recipe, gpus = ident["recipe"], ident["num_gpus"]
        if isinstance(recipe, UnknownModel) or gpus is None:  # (a manifest names a recipe)
            return None
        try:
            cfg = recipe.resolve(ident["model_size"], ident["dtype"], ident["gpu_type"], gpus,
                                 ident["scaling"] or "weak", allow_unpublished=True)
        except self.catalog.CatalogError:
            return None
        return int(cfg.num_layers)

    def with_gbs(self, ident: Identity, gbs: int) -> Identity:
        """A name-identified run whose GBS was taken from the published row, identified again
        with the GBS its log states (scaling and reference follow it)."""
        info = NameInfo(experiment=ident["experiment"] or "", workload=ident["recipe"].workload,
                        model_size=ident["model_size"], dtype=ident["dtype"],
                        num_gpus=ident["num_gpus"] or 0, gbs=gbs, tags=(),
                        parallel=ident.get("parallel"))
        return {**self.from_name(info), "gbs_from": "log"}

    def _resolve(self, recipe: Recipe, info: NameInfo, gpu: str, scaling: str) -> Config | None:
        try:
            return recipe.resolve(info.model_size, info.dtype, gpu, info.num_gpus, scaling,
                                  allow_unpublished=True)
        except self.catalog.CatalogError:
            return None

    def _reference(self, recipe: Recipe, ident: Identity) -> Reference | None:
        """The published step time, only when this run is the published row (same GBS)."""
        scaling, gpus = ident["scaling"], ident["num_gpus"]
        if scaling is None or scaling not in SCALINGS or gpus is None:
            return None
        try:
            cfg = recipe.resolve(ident["model_size"], ident["dtype"], ident["gpu_type"], gpus,
                                 scaling)
        except self.catalog.CatalogError:
            return None
        if cfg.gbs != ident["gbs"]:
            return None
        return recipe.reference(ident["model_size"], ident["dtype"], ident["gpu_type"], gpus,
                                scaling)

    def model_flops(self, ident: Identity) -> float | None:
        recipe = ident["recipe"]
        key = ("flops", recipe.name, ident["model_size"], ident["num_layers"])
        return _kept(self._figures, key, lambda: recipe.model_flops(
            ident["model_size"], ident["num_layers"]) if not isinstance(recipe, UnknownModel)
            and ident["model_size"] in recipe.sizes else None)

    def peak_tflops(self, ident: dict[str, Any], gpu_type: str | None = None) -> float | None:
        key = ("peak", gpu_type or ident["gpu_type"], ident["dtype"])
        return _kept(self._figures, key, lambda: self._peak(ident, gpu_type))

    def _peak(self, ident: dict[str, Any], gpu_type: str | None) -> float | None:
        try:
            peak = self.catalog.get_gpu_type(gpu_type or ident["gpu_type"]).peak_tflops
        except self.catalog.CatalogError:
            return None
        from llmb.recipes import perf  # the dtype-to-peak rule lives beside MFU

        return perf.peak_tflops(peak, ident["dtype"])

    def identify(self, manifest: Found | None, rel: str,
                 root: str) -> tuple[Identity | None, str | None]:
        """The run's identity (manifest first, then the names around the log) and a warning
        about its manifest, if any."""
        ident, warning = self.from_manifest(*manifest) if manifest else (None, None)
        if ident is None and self.recipes:
            # the logs of one folder and job name share their names: worked out once
            place = (os.path.dirname(rel), _JOB_SUFFIX.sub("", os.path.basename(rel)), root)
            info = _kept(self._places, place, lambda: self._name_info(rel, root))
            if info is not None:
                return _kept(self._named, info, functools.partial(self.from_name, info)), warning
        return ident, warning

    def _name_info(self, rel: str, root: str) -> NameInfo | None:
        for candidate in name_candidates(rel, root):
            info = _kept(self._names, candidate, functools.partial(self._parsed, candidate))
            if info is not None:
                return info
        return None

    def _parsed(self, name: str) -> NameInfo | None:
        return parse_name(name, list(self.recipes))


_Key = TypeVar("_Key", bound=Hashable)
_Value = TypeVar("_Value")


def _kept(cache: OrderedDict[_Key, _Value], key: _Key, make: Callable[[], _Value]) -> _Value:
    """cache[key], made once; the cache keeps its last MANIFESTS_KEPT keys (the logs of a run,
    and of a configuration, come together)."""
    if key in cache:
        cache.move_to_end(key)
        return cache[key]
    value = cache[key] = make()
    while len(cache) > MANIFESTS_KEPT:
        cache.popitem(last=False)
    return value
