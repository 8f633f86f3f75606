"""What a suite runs: every published configuration of the installed workloads on this
install's GPU type within the scale bounds, each `repeats` times, largest scales first, and
the GPU-hours that will take.

The configurations come from each recipe's metadata.yaml (catalog `Recipe.rows`): every size,
dtype, weak- and strong-scaling row published for the GPU type. The default largest scale is
what the partition offers: sinfo's nodes of cluster_config.yaml's partition that can take a
job (not down, drained or failed) times the GPU type's GPUs per node.

The GPU-hours estimate, per run:

    GPUs x min(time limit, STARTUP_S + steps x reference step time) / 3600

- reference step time: the configuration's published step time (catalog `reference`);
- steps: MAX_STEPS as the launch gets it (cluster_config.yaml launcher.env, else the calling
  shell, else launch.sh's default of 50);
- STARTUP_S: 600 s, an allowance for what a job spends before its first step: the container
  started on every node, NeMo imported, the model built and its parallel groups formed. It is
  an allowance, not a measurement: a 2048-GPU 340b job can take longer, an 8b one less;
- a configuration without a published step time is counted at its whole time limit (TIME_LIMIT
  of launcher.env or the shell, else the size's `time_limit`): an upper bound. So is the time
  limit for any run: Slurm ends the job there.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Annotated, Literal, TypedDict, cast

from llmb.launch import request
from llmb.llmbrun.clusterconfig import ClusterConfig
from llmb.llmbrun.errors import RunError
from llmb.recipes import catalog
from llmb.shared import shellsafe, slurmquery, values
from llmb.shared.errors import UsageError
from llmb.shared.records import Bound

STARTUP_S = 600
SECONDS_PER_HOUR = 3600
NAME_LEN = 256  # characters of a name, an id or a time in a suite's record


class ConfigRecord(TypedDict):
    """One configuration of suite.json: SuiteConfig.to_json()."""

    workload: Annotated[str, Bound(text=NAME_LEN)]
    size: Annotated[str, Bound(text=NAME_LEN)]
    dtype: Annotated[str, Bound(text=NAME_LEN)]
    scaling: Literal["weak", "strong"]
    scale: int  # GPUs
    reference: float | None
    time_limit_s: int


class ConfigRowKey(TypedDict):
    """What names a configuration in the rows `suite status` and `suite report` print."""

    key: str
    workload: str
    size: str
    dtype: str
    scaling: str
    scale: int


@dataclass(frozen=True)
class SuiteConfig:
    """One published configuration of a suite."""

    workload: str
    size: str
    dtype: str
    scaling: str
    scale: int  # GPUs
    reference: float | None  # the published step time (s), None when none is published
    time_limit_s: int

    @property
    def key(self) -> str:
        return f"{self.workload}/{self.size}/{self.dtype}/{self.scaling}/{self.scale}"

    def label(self) -> str:
        return (f"{self.workload} {self.size} {self.dtype} x{self.scale}"
                + (f" {self.scaling}-scaling" if self.scaling != "weak" else ""))

    def run_seconds(self, steps: int) -> float:
        """The wall time one run is counted at (see the module's docstring)."""
        if self.reference is None:
            return float(self.time_limit_s)
        return min(float(self.time_limit_s), STARTUP_S + steps * self.reference)

    def gpu_hours(self, steps: int) -> float:
        """GPU-hours of one run."""
        return self.scale * self.run_seconds(steps) / SECONDS_PER_HOUR

    def to_json(self) -> ConfigRecord:
        """Its entry in suite.json (held to ConfigRecord when the record is read: parse)."""
        return cast(ConfigRecord, asdict(self))


@dataclass(frozen=True)
class Run:
    """One run of a suite: its number (1-based, the submission order), its configuration
    (an index into the suite's configurations) and which repeat it is."""

    number: int
    config: int
    repeat: int


@dataclass(frozen=True)
class Selection:
    """What `suite submit` was asked for: -w, --dtype, --min-scale, --max-scale."""

    workloads: tuple[str, ...] = ()  # () = every installed workload
    dtypes: tuple[str, ...] = ()  # () = every published dtype
    min_scale: int = 1
    max_scale: int | None = None


def time_limit_seconds(text: str) -> int:
    """A Slurm time (HH:MM:SS or D-HH:MM:SS) in seconds."""
    found = shellsafe.TIME_RE.fullmatch(text)
    if not found:
        raise RunError(f"TIME_LIMIT={values.shown(text)} is not a Slurm time; use HH:MM:SS or "
                       "D-HH:MM:SS, e.g. 00:45:00")
    days, hours, minutes, seconds = (int(g or 0) for g in found.groups())
    return ((days * 24 + hours) * 60 + minutes) * 60 + seconds


def launch_settings(cfg: ClusterConfig, environ: Mapping[str, str]) -> dict[str, str]:
    """The launch settings in effect: cluster_config.yaml launcher.env over the shell's."""
    return {**environ, **cfg.env}


def steps_per_run(cfg: ClusterConfig, environ: Mapping[str, str]) -> int:
    try:
        return request.parse_positive_int(launch_settings(cfg, environ), "MAX_STEPS",
                                          request.DEFAULT_MAX_STEPS)
    except values.BadValue as exc:
        raise RunError(str(exc)) from None


def check_selection(cfg: ClusterConfig, sel: Selection) -> None:
    """-w and --dtype values, and the bounds: UsageError naming the first bad one."""
    known = [r.workload for r in catalog.all_recipes()]
    for w in sel.workloads:
        if w not in known:
            raise UsageError(f"-w {values.brief(w)} is not a workload; known: {', '.join(known)}")
        if w not in cfg.workloads:
            raise UsageError(f"-w {w} is not installed here (installed: "
                             f"{', '.join(cfg.workloads) or 'none'}); rerun the installer with it")
    for d in sel.dtypes:
        if d not in catalog.DTYPES:
            raise UsageError(f"--dtype {values.shown(d)} is not a dtype; allowed: "
                             f"{', '.join(catalog.DTYPES)}")
    if sel.max_scale is not None and sel.min_scale > sel.max_scale:
        raise UsageError(f"--min-scale {sel.min_scale} is above --max-scale {sel.max_scale}; "
                         "give a range that holds at least one scale")


def partition_gpus(cfg: ClusterConfig) -> tuple[int, str]:
    """The GPUs the install's partition offers (sinfo), and where that figure comes from."""
    if cfg.slurm is None:
        raise RunError(f"cluster_type {cfg.cluster_type} has no sinfo to ask for the cluster's "
                       "size; give --max-scale N")
    name = cfg.slurm.partition
    try:
        facts = slurmquery.partition_facts(name)
    except slurmquery.SlurmUnavailable as exc:
        raise RunError(f"cannot ask how many GPUs partition {name} has ({exc}); give "
                       "--max-scale N") from None
    if facts is None:
        raise RunError(f"sinfo does not list partition {values.shown(name)} (launcher.slurm."
                       f"partition of {cfg.path}); fix it or give --max-scale N")
    if facts.usable < 1:
        raise RunError(f"partition {name} has no node that can take a job (sinfo lists "
                       f"{facts.nodes}, none up); give --max-scale N")
    gpus = facts.usable * cfg.gpus_per_node
    return gpus, (f"partition {name}: {facts.usable} node(s) x {cfg.gpus_per_node} "
                  f"{cfg.gpu_type} GPUs")


def time_limit_of(cfg: ClusterConfig, recipe: catalog.Recipe, size: str,
                  environ: Mapping[str, str]) -> int:
    text = launch_settings(cfg, environ).get("TIME_LIMIT") or str(recipe.size(size)["time_limit"])
    return time_limit_seconds(text)


def published(cfg: ClusterConfig, sel: Selection, environ: Mapping[str, str] | None = None
              ) -> list[SuiteConfig]:
    """Every published configuration of the selection, largest scale first (then in the
    catalog's order); RunError when none is within the bounds."""
    environ = os.environ if environ is None else environ
    check_selection(cfg, sel)
    gpu = cfg.gpu_type
    found: list[SuiteConfig] = []
    scales: set[int] = set()
    for recipe in catalog.all_recipes():
        if recipe.workload not in cfg.workloads or (sel.workloads
                                                    and recipe.workload not in sel.workloads):
            continue
        for row in recipe.rows(gpu_type=gpu):
            if sel.dtypes and row.dtype not in sel.dtypes:
                continue
            scales.add(row.num_gpus)
            if row.num_gpus < sel.min_scale or (sel.max_scale is not None
                                                and row.num_gpus > sel.max_scale):
                continue
            ref = recipe.reference(row.model_size, row.dtype, gpu, row.num_gpus, row.scaling)
            found.append(SuiteConfig(
                recipe.workload, row.model_size, row.dtype, row.scaling, row.num_gpus,
                ref.step_time if ref else None, time_limit_of(cfg, recipe, row.model_size,
                                                              environ)))
    if not found:
        bounds = f"{sel.min_scale} to {sel.max_scale if sel.max_scale else 'any'} GPUs"
        offered = ", ".join(map(str, sorted(scales))) or "none"
        raise RunError(f"no published configuration of the selected workloads on {gpu} is "
                       f"within {bounds}; their published scales: {offered}")
    unique = list(dict.fromkeys(found))
    return sorted(unique, key=lambda c: -c.scale)


def order_runs(configs: list[SuiteConfig], repeats: int) -> list[Run]:
    """Largest scales first (they wait longest in a queue); at each scale the first repeat of
    every configuration, then the second, ... so that each has a verdict early."""
    keyed = sorted(((-c.scale, rep, i) for i, c in enumerate(configs)
                    for rep in range(1, repeats + 1)))
    return [Run(n, i, rep) for n, (_, rep, i) in enumerate(keyed, 1)]


def total_gpu_hours(configs: list[SuiteConfig], repeats: int, steps: int) -> float:
    return sum(c.gpu_hours(steps) for c in configs) * repeats


def render_plan(configs: list[SuiteConfig], repeats: int, steps: int) -> str:
    """The plan's table: one line per configuration, with its runs and GPU-hours."""
    head = ("WORKLOAD", "SIZE", "DTYPE", "SCALING", "GPUS", "RUNS", "REF_STEP_S", "GPU_HOURS")
    rows = [head] + [(c.workload, c.size, c.dtype, c.scaling, str(c.scale), str(repeats),
                      f"{c.reference:g}" if c.reference is not None else "-",
                      f"{c.gpu_hours(steps) * repeats:.1f}") for c in configs]
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    return "".join("  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True))
                   .rstrip() + "\n" for row in rows)


def estimate_line(configs: list[SuiteConfig], repeats: int, steps: int) -> str:
    hours = total_gpu_hours(configs, repeats, steps)
    unreferenced = sum(c.reference is None for c in configs)
    note = (f"; {unreferenced} configuration(s) without a published step time counted at "
            "their time limit" if unreferenced else "")
    return (f"GPU-hours: {hours:.1f} (per run: GPUs x ({STARTUP_S} s start-up + {steps} "
            f"steps x the reference step time), at most the time limit{note})")
