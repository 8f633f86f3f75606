"""What llmb-run is asked to run: tasks from flags or a bulk file, validated before submission.

A Task is one run (workload, size, dtype, scale, repeat, profile, env overrides, placement).
`tasks_from_bulk` expands a bulk file (sizes x dtypes x scales x repeats) and collects every
structural error at once; `validate_all` checks every task against the recipe's metadata.yaml
(the scale rules: above the largest published scale is a warning, an unvalidated run;
below the smallest, or between published scales, an error). Nothing is submitted until every
task passes. Booleans (profile, SMOKE_TEST, ENABLE_CHECKPOINT, ...) go through the one strict
parser (llmb.shared.values): `profile: "false"` is false, `SMOKE_TEST: "maybe"` an error.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from llmb.launch import placement
from llmb.launch.placement import Placement, PlacementError
from llmb.llmbrun.clusterconfig import ClusterConfig, check_env_value
from llmb.llmbrun.errors import RunError
from llmb.recipes import catalog
from llmb.shared import values
from llmb.shared.errors import UsageError

PLURALS = (("size", "sizes"), ("dtype", "dtypes"), ("scale", "scales"))
TASK_KEYS = {"workload", "size", "sizes", "dtype", "dtypes", "scale", "scales", "repeats",
             "profile", "env"}
# launch.sh booleans a task's env may set; normalised to "true"/"false" here, so that what
# llmb-run records is what launch.sh runs.
BOOL_ENV = ("SMOKE_TEST", "ENABLE_GPU_METRICS", "ENABLE_NCCLTRACE", "ENABLE_CHECKPOINT")
# launch.sh settings llmb-run does not choose itself: given by a task's env, cluster_config.yaml
# launcher.env or the calling shell. Whatever their source, the history records the values the
# run was launched with, so that `status` and `rerun` know what ran.
LAUNCH_KNOBS = (*BOOL_ENV, "MAX_STEPS", "TIME_LIMIT", "PROFILE_START_STEP",
                "PROFILE_STOP_STEP", "LOAD_CHECKPOINT_PATH", "RUN_CONF_IMAGE")
MAX_SCALE = 1 << 20  # GPUs; more than any cluster has
# Runs one bulk file may ask for: each is validated, launched (a dry run too: ~1 s of launch.sh
# and nemo-run each) and recorded; a sweep of thousands is a mistake (100 sizes x 100 dtypes x
# 100 scales x 10 repeats is ten million), counted before anything is expanded.
MAX_BULK_RUNS = 1000


@dataclass(frozen=True)
class Task:
    workload: str
    size: str
    dtype: str
    scale: int
    profile: bool = False
    repeat: int = 1
    env: Mapping[str, str] = field(default_factory=dict)
    placement: Placement = field(default_factory=Placement)
    scaling: str = "weak"  # strong: a published strong-scaling row (launch.sh STRONG_SCALING)
    # size and dtype as the person wrote them (15B, FP8): what a refusal quotes
    given: tuple[str, str] | None = field(default=None, compare=False)

    def label(self) -> str:
        brief = values.brief
        return (f"{brief(self.workload)} {brief(self.size)} {brief(self.dtype)} x{self.scale}"
                + (f" {brief(self.scaling)}-scaling" if self.scaling != "weak" else "")
                + (" profile" if self.profile else "") + f" (repeat {self.repeat})")


def normalize_env(label: str, env: Iterable[tuple[object, object]]) -> dict[str, str]:
    """A task's env overrides (a mapping's items, as a file gave them), each checked
    (llmb-run's own variables are refused) and the booleans normalised; `label` names where
    they came from (--env, a bulk task)."""
    out = {}
    for name, value in env:
        text = check_env_value(label, name, value)
        if name in BOOL_ENV:
            try:
                text = "true" if values.parse_bool(name, text) else "false"
            except values.BadValue as exc:
                raise RunError(f"{label} {exc}") from None
        out[str(name)] = text
    return out


def parse_env_overrides(items: list[str]) -> dict[str, str]:
    """--env NAME=VALUE items of the command line."""
    env: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--env {values.shown(item)} is not NAME=VALUE")
        env[key] = value
    try:
        return normalize_env("--env", env.items())
    except RunError as exc:
        raise UsageError(str(exc)) from None


def smoke_of(env: Mapping[str, str]) -> bool:
    """Whether a launch environment runs the smoke workload (strictly parsed)."""
    return values.parse_bool("SMOKE_TEST", env.get("SMOKE_TEST", "false"))


# --- validation -------------------------------------------------------------------------------

def _scale_check(recipe: catalog.Recipe, task: Task, gpu: str, smoke: bool
                 ) -> tuple[list[str], list[str], bool]:
    """The scale rules: above the largest published scale a warning (an unvalidated run),
    below the smallest or between published scales an error; a smoke run allows any scale
    with a warning, as launch.sh does with SMOKE_TEST=true."""
    what = task.label()
    scales = recipe.scales(task.size, task.dtype, gpu, task.scaling)
    listed = ", ".join(map(str, scales))
    above = task.scale > max(scales)
    unlisted = task.scale < min(scales) or (not above and task.scale not in scales)
    errors: list[str] = []
    warnings: list[str] = []
    if unlisted and not smoke:
        where = (f"below the smallest published scale {min(scales)}"
                 if task.scale < min(scales) else "not a published scale")
        return [f"{what}: --scale {task.scale} is {where}; published: {listed}"], [], above
    try:
        recipe.resolve(task.size, task.dtype, gpu, task.scale, task.scaling,
                       allow_unpublished=above or unlisted)
    except catalog.CatalogError as exc:
        return [f"{what}: --scale {task.scale}: {exc}"], [], above
    if unlisted:
        warnings.append(f"{what}: --scale {task.scale} is not a published scale (published: "
                        f"{listed}); a smoke run uses the nearest published layout, no "
                        "reference applies")
    elif above:
        warnings.append(f"{what}: --scale {task.scale} is above the largest published scale "
                        f"{max(scales)}: an unvalidated configuration, no reference applies")
    return errors, warnings, above


def check_task(cfg: ClusterConfig, task: Task, smoke: bool = False
               ) -> tuple[list[str], list[str], bool]:
    """(errors, warnings, above_max) for one run; nothing is submitted until all pass.
    `smoke`: --smoke was given (a task's own SMOKE_TEST=true counts too)."""
    what = task.label()
    recipes = catalog.all_recipes()
    if task.workload not in {r.workload for r in recipes}:
        known = ", ".join(r.workload for r in recipes)
        return [f"{what}: -w {values.brief(task.workload)} is not a workload; known: "
                f"{known}"], [], False
    if task.workload not in cfg.workloads:
        return [f"{what}: {task.workload} is not installed here (installed: "
                f"{', '.join(cfg.workloads) or 'none'}); rerun the installer with it"], [], False
    recipe = catalog.find_recipe(task.workload)
    gpu = cfg.gpu_type
    try:  # a GPU type only the analyzer and the screen know (h200, b300, ...)
        catalog.require_gpu_type(recipe, gpu)
    except catalog.CatalogError as exc:
        return [f"{what}: gpu_type {exc}"], [], False
    size, dtype = task.given or (task.size, task.dtype)
    if task.size not in recipe.sizes:
        return [f"{what}: -s {values.brief(size)} is not a size of {task.workload}; "
                f"allowed: {', '.join(recipe.sizes)}"], [], False
    dtypes = sorted({c.dtype for c in recipe.rows(task.size, gpu_type=gpu)})
    if task.dtype not in dtypes:
        return [f"{what}: --dtype {values.brief(dtype)} is not published for "
                f"{task.workload} {task.size} on {gpu}; allowed: {', '.join(dtypes) or 'none'}"
                ], [], False
    if task.scaling not in catalog.SCALINGS:
        return [f"{what}: scaling {values.shown(task.scaling)} is not one of "
                f"{', '.join(catalog.SCALINGS)}"], [], False
    if not recipe.scales(task.size, task.dtype, gpu, task.scaling):
        return [f"{what}: {task.workload} {task.size} {task.dtype} publishes no "
                f"{task.scaling}-scaling scale on {gpu}"], [], False
    smoke = smoke or task.env.get("SMOKE_TEST") == "true"
    errors, warnings, above = _scale_check(recipe, task, gpu, smoke)
    if task.repeat < 1:
        errors.append(f"{what}: repeats must be a positive integer")
    if not errors and task.placement:
        nodes = task.scale // cfg.gpus_per_node
        try:
            placement.check_segment(task.placement, nodes)
            placement.check_nodelist_size(task.placement, nodes)
        except PlacementError as exc:
            errors.append(f"{what}: {exc}")
    return errors, warnings, above


def validate_all(cfg: ClusterConfig, tasks: list[Task], smoke: bool = False
                 ) -> tuple[list[str], list[str], set[int]]:
    """Every error and warning of every task; `above` holds the indexes of above-max tasks."""
    errors: list[str] = []
    warnings: list[str] = []
    above: set[int] = set()
    for i, task in enumerate(tasks):
        e, w, a = check_task(cfg, task, smoke)
        errors.extend(e)
        warnings.extend(w)
        if a:
            above.add(i)
    return list(dict.fromkeys(errors)), list(dict.fromkeys(warnings)), above


# --- bulk files -------------------------------------------------------------------------------

def _as_list(entry: Mapping[str, object], one: str, many: str, where: str) -> list[object]:
    if one in entry and many in entry:
        raise RunError(f"{where}: give {one} or {many}, not both")
    value = entry.get(many, entry.get(one))
    if value is None:
        raise RunError(f"{where}: {one} (or {many}) is required")
    items = value if isinstance(value, list) else [value]
    for item in items:
        if isinstance(item, (dict, list)) or item is None:
            raise RunError(f"{where}: {many}={values.brief(repr(item))} is not a plain value")
    return items


def _int_scale(where: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise RunError(f"{where}: scales must be integers (GPUs), got "
                       f"{values.brief(repr(value))}")
    if not 1 <= value <= MAX_SCALE:
        raise RunError(f"{where}: scale {values.brief(value)} must be a whole number of GPUs "
                       f"from 1 to {MAX_SCALE}")
    return value


BULK_SHAPE = "a YAML mapping with tasks (and defaults), or a YAML list of tasks"


def bulk_shape_problem(data: object) -> str | None:
    """What a file that is not shaped as a bulk file holds, described, never shown (a file
    given by mistake, /etc/shadow, holds secrets); None for a bulk file's shape."""
    if isinstance(data, list) or (isinstance(data, dict) and {"tasks", "defaults"} & set(data)):
        return None
    if isinstance(data, dict):
        return f"a YAML mapping of {len(data)} key(s), none of them tasks or defaults"
    if data is None:
        return "empty"
    return f"a single YAML {'text' if isinstance(data, str) else type(data).__name__}"


def tasks_from_bulk(data: object, source: str,
                    place: Placement | None = None) -> tuple[list[Task], list[str]]:
    """Expand a bulk file into tasks; every structural error is collected, not just the first."""
    errors: list[str] = []
    defaults: Mapping[str, object] = {}
    if isinstance(data, dict):
        unknown = set(data) - {"defaults", "tasks"}
        if unknown:
            errors.append(f"{source}: unknown top-level key(s) "
                          f"{', '.join(values.brief(k) for k in sorted(map(str, unknown))[:5])}"
                          f"{' ...' if len(unknown) > 5 else ''}; allowed: defaults, tasks")
        defaults = data.get("defaults") or {}
        if not isinstance(defaults, dict):
            errors.append(f"{source}: defaults must be a mapping")
            defaults = {}
        entries = data.get("tasks")
    else:
        entries = data
    if not isinstance(entries, list) or not entries:
        return [], [*errors, f"{source}: no tasks (a list of tasks, or a mapping with 'tasks')"]
    counts = [_runs(defaults, raw) for raw in entries if isinstance(raw, dict)]
    if sum(counts) > MAX_BULK_RUNS:
        most = max(range(len(counts)), key=counts.__getitem__)
        return [], [f"{source} asks for {sum(counts)} runs (task {most + 1} alone "
                    f"{counts[most]}: its sizes x dtypes x scales x repeats); a bulk file runs "
                    f"at most {MAX_BULK_RUNS}: split the sweep into files of fewer runs"]
    tasks: list[Task] = []
    for i, raw in enumerate(entries, 1):
        where = f"{source}: task {i}"
        if not isinstance(raw, dict):
            errors.append(f"{where}: must be a mapping")
            continue
        try:
            tasks.extend(_expand(where, defaults, raw, place or Placement()))
        except RunError as exc:
            errors.append(str(exc))
    return tasks, errors


def _runs(defaults: Mapping[str, object], raw: Mapping[str, object]) -> int:
    """How many runs a task asks for (its sizes x dtypes x scales x repeats), counted without
    expanding it or checking it (a value that is not a list counts as one)."""
    entry = {**defaults, **raw}
    count = 1
    for one, many in PLURALS:
        value = raw.get(many, raw.get(one)) if one in raw or many in raw else \
            entry.get(many, entry.get(one))
        count *= len(value) if isinstance(value, list) and value else 1
    repeats = entry.get("repeats", 1)
    if isinstance(repeats, int) and 1 < repeats <= 1000:  # else: _expand says why
        return count * repeats
    return count


def _expand(where: str, defaults: Mapping[str, object], raw: Mapping[str, object],
            place: Placement) -> list[Task]:
    env_default, env_task = defaults.get("env") or {}, raw.get("env") or {}
    if not isinstance(env_default, dict) or not isinstance(env_task, dict):
        raise RunError(f"{where}: env must be a mapping of NAME: value")
    # a task's own size/sizes (dtype/dtypes, scale/scales) replaces the defaults' either spelling
    base = {k: v for k, v in defaults.items()
            if not any(k in pair and (pair[0] in raw or pair[1] in raw) for pair in PLURALS)}
    env_given = {**env_default, **env_task}
    entry = {**base, **raw, "env": env_given}
    unknown = set(entry) - TASK_KEYS
    if unknown:
        raise RunError(f"{where}: unknown key(s) {', '.join(sorted(map(str, unknown)))}; "
                       f"allowed: {', '.join(sorted(TASK_KEYS))}")
    workload = entry.get("workload")
    if workload is None:
        raise RunError(f"{where}: workload is required")
    if not isinstance(workload, str):
        raise RunError(f"{where}: workload={values.brief(repr(workload))} is not a name")
    sizes = _as_list(entry, "size", "sizes", where)
    dtypes = _as_list(entry, "dtype", "dtypes", where)
    scales = [_int_scale(where, s) for s in _as_list(entry, "scale", "scales", where)]
    repeats = entry.get("repeats", 1)
    if not isinstance(repeats, int) or isinstance(repeats, bool) or not 1 <= repeats <= 1000:
        raise RunError(f"{where}: repeats={values.brief(repr(repeats))} must be a whole "
                       "number from 1 to 1000")
    try:
        profile = values.parse_bool("profile", entry.get("profile", False))
    except values.BadValue as exc:
        raise RunError(f"{where}: {exc}") from None
    env = normalize_env(f"{where}: env", env_given.items())
    return [Task(workload, str(size).lower(), str(dtype).lower(), scale, profile, rep, env,
                 place, given=(str(size), str(dtype)))
            for size, dtype, scale, rep in itertools.product(sizes, dtypes, scales,
                                                             range(1, repeats + 1))]
