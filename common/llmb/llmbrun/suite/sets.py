"""Acceptance sets: a fixed list of workloads and dtypes per GPU type, run at one scale
(`llmb-run suite submit --set NAME`). A set is data, common/suites/<NAME>.yaml; the one set is
`exemplar`, NVIDIA/exemplar-performance v26.08.00's exemplar.yaml (its source is in the file).

A set names a workload as upstream does, `<upstream workload>_<size>` (pretrain_llama3.1_70b:
the size is what follows the last `_`). It resolves to the llmb recipe whose metadata.yaml
carries `upstream: {workload: pretrain_llama3.1, path: ..., release: v26.08.00}` (the set's
release) and publishes the size. Each workload x dtype of the install's GPU type is one
configuration at the set's scale (weak scaling), each run `repeats` times; one that cannot be
planned (no recipe carries it, not installed, the dtype or the scale not published) is kept in
the suite's record with the reason, and counts as missing in the verdict. A smoke suite
(`--smoke`) runs a row at a scale it does not publish, as `SMOKE_TEST=true ./launch.sh` does:
with the nearest published layout and one warning line (llmb.llmbrun.tasks), no reference.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, TypedDict

from llmb.llmbrun.clusterconfig import ClusterConfig
from llmb.llmbrun.errors import RunError
from llmb.llmbrun.suite import plan
from llmb.llmbrun.suite.plan import NAME_LEN, SuiteConfig
from llmb.recipes import catalog
from llmb.shared import records, values, yamlfile
from llmb.shared.errors import UsageError
from llmb.shared.records import Bound

SETS_DIR = catalog.REPO_ROOT / "common" / "suites"
SET_NAMES = ("exemplar",)
WORKLOAD_RE = re.compile(r"([a-z0-9][a-z0-9_.-]*)_([0-9]+(?:\.[0-9]+)?[bt])")
NAME_RE = re.compile(r"[a-z0-9][a-z0-9_.+-]*")
MAX_ENTRIES = 256

Name = Annotated[str, Bound(text=NAME_LEN)]


class SetSource(TypedDict):
    """Where a set's lists come from."""

    repository: Name
    release: Name
    path: Name


class _SetConfig(TypedDict):
    scale: int
    repeats: int
    profile: bool


class _Dtypes(TypedDict):
    dtypes: Annotated[list[Name], Bound(items=16)]


class SetFile(TypedDict):
    """common/suites/<NAME>.yaml: upstream's structure (config, workloads), with llmb's name
    and source."""

    name: Name
    source: SetSource
    config: _SetConfig
    workloads: dict[Name, Annotated[list[dict[Name, _Dtypes]], Bound(items=MAX_ENTRIES)]]


class SetEntry(TypedDict):
    """One workload x dtype of a set in a suite's record: the configuration it was planned as
    (an index into the suite's configurations), or why it was not."""

    workload: Name  # upstream's name with its size: pretrain_llama3.1_70b
    dtype: Name
    recipe: Name | None  # the llmb workload it resolved to
    config: int | None
    missing: Annotated[str, Bound(text=1024)] | None


class SetRecord(TypedDict):
    """What a suite planned from a set records (suite.json `set`)."""

    name: Name
    source: SetSource
    scale: int  # the set's
    planned_scale: int  # the suite's: below `scale` it is a rehearsal (--scale)
    gpu_type: Name
    entries: Annotated[list[SetEntry], Bound(items=MAX_ENTRIES * 8)]


@dataclass(frozen=True)
class SetWorkload:
    name: str  # pretrain_llama3.1_70b
    key: str  # pretrain_llama3.1
    size: str  # 70b
    dtypes: tuple[str, ...]


@dataclass(frozen=True)
class SuiteSet:
    """A set, checked: its workloads per GPU type."""

    name: str
    source: SetSource
    scale: int
    repeats: int
    profile: bool
    workloads: Mapping[str, tuple[SetWorkload, ...]]

    def origin(self) -> str:
        s = self.source
        return f"{s['repository']} {s['release']}, {s['path']}"

    def for_gpu(self, gpu_type: str) -> tuple[SetWorkload, ...]:
        found = self.workloads.get(gpu_type)
        if not found:
            raise RunError(f"the {self.name} set has no workloads for gpu_type {gpu_type}; it "
                           f"has: {', '.join(self.workloads)}")
        return found


def check_name(text: str) -> str:
    if text not in SET_NAMES:
        raise UsageError(f"--set {values.brief(text)} is not a set; known: "
                         f"{', '.join(SET_NAMES)}")
    return text


def load(name: str, folder: Path = SETS_DIR) -> SuiteSet:
    """The set of this name (common/suites/<name>.yaml), checked; RunError naming a problem."""
    path = folder / f"{check_name(name)}.yaml"
    data = yamlfile.read_yaml(path, str(path), RunError)
    return parse(data, str(path))


def parse(data: object, where: str) -> SuiteSet:
    try:
        checked = records.check(SetFile, data)
    except records.BadRecord as exc:
        raise RunError(f"{where}: {exc.problem}") from None
    workloads: dict[str, tuple[SetWorkload, ...]] = {}
    for gpu, entries in checked["workloads"].items():
        seen: list[SetWorkload] = []
        for i, entry in enumerate(entries):
            at = f"{where}: workloads.{values.brief(gpu)}[{i}]"
            if len(entry) != 1:
                raise RunError(f"{at} has {len(entry)} keys; give one: the workload's name")
            ((text, body),) = entry.items()
            found = WORKLOAD_RE.fullmatch(text)
            dtypes = tuple(body["dtypes"])
            if not found:
                raise RunError(f"{at} is {values.brief(text)}, not <upstream workload>_<size> "
                               "(e.g. pretrain_llama3.1_70b)")
            if not dtypes or len(set(dtypes)) != len(dtypes) or \
                    not all(NAME_RE.fullmatch(d) for d in dtypes):
                raise RunError(f"{at} ({text}): dtypes {values.brief(dtypes)}; give distinct "
                               "dtype names, e.g. [bf16, fp8]")
            if text in (w.name for w in seen):
                raise RunError(f"{at}: {text} is given twice for {gpu}; keep one")
            seen.append(SetWorkload(text, found.group(1), found.group(2), dtypes))
        workloads[str(gpu)] = tuple(seen)
    config = checked["config"]
    for key, value in (("scale", config["scale"]), ("repeats", config["repeats"])):
        if value < 1:
            raise RunError(f"{where}: config.{key} is {value}; give a whole number from 1")
    return SuiteSet(checked["name"], checked["source"], config["scale"], config["repeats"],
                    config["profile"], workloads)


def upstream_of(recipe: catalog.Recipe) -> tuple[str, str] | None:
    """A recipe's upstream workload key and release (metadata `upstream`), None without."""
    up = recipe.data.get("upstream")
    if not isinstance(up, Mapping):
        return None
    return str(up.get("workload")), str(up.get("release"))


def _why_missing(cfg: ClusterConfig, the_set: SuiteSet, w: SetWorkload, dtype: str,
                 recipe: catalog.Recipe | None, others: list[str], scale: int,
                 smoke: bool) -> str | None:
    if recipe is None:
        also = (f" (only release(s) {', '.join(others)}, not {the_set.source['release']})"
                if others else "")
        return (f"no llmb recipe carries upstream workload {w.key} with size {w.size}{also}; "
                "add it (bridge/)")
    gpu = cfg.gpu_type
    if recipe.workload not in cfg.workloads:
        return (f"{recipe.workload} is not installed here (installed: "
                f"{', '.join(cfg.workloads) or 'none'}); rerun the installer with it")
    dtypes = sorted({c.dtype for c in recipe.rows(w.size, gpu_type=gpu)})
    if dtype not in dtypes:
        return (f"{recipe.workload} {w.size} publishes no {dtype} on {gpu} (published: "
                f"{', '.join(dtypes) or 'none'})")
    scales = recipe.scales(w.size, dtype, gpu)
    if scale not in scales and not smoke:
        return (f"{recipe.workload} {w.size} {dtype} publishes no {scale}-GPU row on {gpu} "
                f"(published: {', '.join(map(str, scales)) or 'none'})")
    return None


def resolve(the_set: SuiteSet, w: SetWorkload) -> tuple[catalog.Recipe | None, list[str]]:
    """The recipe a set's workload resolves to (None when none), and the other releases of
    its upstream workload that recipes carry (to say why none matched)."""
    others: list[str] = []
    for recipe in catalog.all_recipes():
        up = upstream_of(recipe)
        if up is None or up[0] != w.key or w.size not in recipe.sizes:
            continue
        if up[1] == the_set.source["release"]:
            return recipe, []
        others.append(up[1])
    return None, others


def plan_set(cfg: ClusterConfig, the_set: SuiteSet, scale: int, environ: Mapping[str, str],
             smoke: bool = False) -> tuple[list[SuiteConfig], SetRecord]:
    """The suite's configurations for the install's GPU type, and the set's record (every
    workload x dtype: its configuration, or why it has none); RunError when none can run.
    smoke: a row is planned at a scale it does not publish too."""
    if not 1 <= scale <= the_set.scale:
        raise UsageError(f"--scale {scale} is not a rehearsal scale of the {the_set.name} "
                         f"set; give 1 to {the_set.scale} (the set's scale)")
    configs: list[SuiteConfig] = []
    entries: list[SetEntry] = []
    for w in the_set.for_gpu(cfg.gpu_type):
        recipe, others = resolve(the_set, w)
        for dtype in w.dtypes:
            why = _why_missing(cfg, the_set, w, dtype, recipe, others, scale, smoke)
            entry = SetEntry(workload=w.name, dtype=dtype, config=None, missing=why,
                             recipe=recipe.workload if recipe else None)
            if recipe is not None and why is None:
                ref = recipe.reference(w.size, dtype, cfg.gpu_type, scale)
                entry["config"] = len(configs)
                configs.append(SuiteConfig(
                    recipe.workload, w.size, dtype, "weak", scale,
                    ref.step_time if ref else None,
                    plan.time_limit_of(cfg, recipe, w.size, environ)))
            entries.append(entry)
    if not configs:
        first = entries[0]
        raise RunError(f"no workload of the {the_set.name} set can run on {cfg.gpu_type} here "
                       f"(e.g. {first['workload']} {first['dtype']}: {first['missing']})")
    return configs, SetRecord(name=the_set.name, source=the_set.source, scale=the_set.scale,
                              planned_scale=scale, gpu_type=cfg.gpu_type, entries=entries)


def missing_lines(record: SetRecord) -> list[str]:
    """One line per workload x dtype of the set that was not planned."""
    return [f"not planned: {e['workload']} {e['dtype']}: {e['missing']}"
            for e in record["entries"] if e["config"] is None]
