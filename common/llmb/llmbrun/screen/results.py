"""The screen's results: what the job's tasks wrote, put together and judged.

The job's tasks (llmb.container.screenrun) leave, in the screen's folder:
    ranks/rank-NNNNN.json     one per task: its node, GPU identity, figures, errors, and the
                              all-reduces it led (task 0 also the run: mode, tool, nodes, the
                              phases' wall times)
    nccl-tests/NAME.I.out     where nccl-tests measured: all_reduce_perf's output per group,
    nccl-tests/walls.txt      and each phase's start and end (the job script writes these)
`document` turns them into screen.json's content: top-level `nodes` (each with `node`,
`verdict`, its GPUs and figures), `pairs`, `all_nodes`, `rounds` (each phase's wall time),
`named` and `suspects` (llmb.llmbrun.screen.judge), and what measured (`measured_by`).
Every file is read with a bound; a task that wrote nothing, a node none of whose tasks
reported, a group without a result are verdicts (`fail`, with why), never a traceback.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, TypedDict

from llmb.container import probe, screenrun
from llmb.llmbrun.screen import health, judge, precision, transport
from llmb.recipes import catalog, screenfacts
from llmb.shared import files, records
from llmb.shared.records import Bound, Shape

SCHEMA = 1


# --- what screen.json and the tasks' files hold: every reader holds them to it first --------

MAX_NODES = 16_384  # nodes of one screen (the largest clusters have some thousands)
MAX_GPUS = 64  # tasks (GPUs) of one node
NAME = Bound(text=256)  # a node's name, a figure's, a verdict, a stamp
Name = Annotated[str, NAME]
Names = Annotated[list[Name], Bound(items=MAX_NODES)]


class _GpuKeys(TypedDict):
    figures: Annotated[dict[Name, float], Bound(items=MAX_GPUS)]


class ScreenGpu(_GpuKeys, total=False):
    """One GPU (task) of a node in screen.json."""

    rank: int
    local_rank: int | None
    verdict: Name | None
    error: str | None
    notes: list[str]
    reasons: list[str]


class Size(TypedDict):
    """One size of an all-reduce sweep."""

    bytes: int
    busbw_gbps: float
    algbw_gbps: float


class Allreduce(TypedDict, total=False):
    """A group's all-reduce (`summary`), as a node's own, a pair's or all nodes'; as a task
    reports it, with its phase."""

    phase: Name
    sizes: Annotated[list[dict[str, Any]], Shape(Size), Bound(items=64)]
    ranks: int | None
    bytes: int | None
    busbw_gbps: float | None
    algbw_gbps: float | None
    error: str | None
    verdict: Name | None
    link: bool
    floor: float | None
    peers_median: float | None


class _NodesKeys(TypedDict):
    nodes: Names


class Group(_NodesKeys, Allreduce, total=False):
    """A group's all-reduce as a task reports it, and all nodes' in screen.json."""


class _PairKeys(_NodesKeys):
    round: int


class Pair(_PairKeys, Allreduce, total=False):
    """A pair of nodes and its all-reduce (screen.json's `pairs`)."""


# A node's pair: {"round", "with" (its partner), "busbw_gbps"}
NodePair = TypedDict("NodePair", {"round": int, "with": Name, "busbw_gbps": float | None})


class _NodeKeys(TypedDict):
    node: Name
    gpus: Annotated[list[dict[str, Any]], Shape(ScreenGpu), Bound(items=MAX_GPUS)]
    pairs: Annotated[list[dict[str, Any]], Shape(NodePair), Bound(items=MAX_NODES)]
    reasons: list[str]
    verdict: Name | None


class ScreenNode(_NodeKeys, total=False):
    """One node of screen.json (its partner in each pair under `with`)."""

    error: str | None
    allreduce: Annotated[dict[str, Any], Shape(Allreduce)] | None


class _NamedKeys(TypedDict):
    kind: Name
    name: Name
    why: str


class Named(_NamedKeys, total=False):
    """What the screen named: a GPU, a node, a link, the cluster (what report prints of it)."""

    figure: Name | None
    value: float | None
    floor: float | None
    expected: float | None
    peers_median: float | None


class Round(TypedDict):
    name: Name
    wall_s: float


class Expectation(TypedDict, total=False):
    expected: float
    tolerance: float
    floor: float
    source: str


class _ScreenKeys(TypedDict):
    mode: Name  # gpu | cpu
    gpus_per_node: int
    backend: Name | None  # nccl | gloo
    measured_by: Name | None  # torch.distributed | nccl-tests all_reduce_perf
    nodes: Annotated[list[dict[str, Any]], Shape(ScreenNode), Bound(items=MAX_NODES)]
    pairs: Annotated[list[dict[str, Any]], Shape(Pair), Bound(items=MAX_NODES * 8)]
    rounds: Annotated[list[dict[str, Any]], Shape(Round)]
    named: Annotated[list[dict[str, Any]], Shape(Named)]
    suspects: Names


class ScreenDocument(_ScreenKeys, total=False):
    """screen.json: what `document` makes of the job's files, with what `llmb-run screen` adds
    (stamp .. output). report, archive, verify-archive and --exclude-suspect read it back,
    each through `checked`."""

    schema: int
    gpu_type: Name
    torch: Name | None
    nccl: Name | None
    tasks: int | None
    params: dict[str, Any] | None
    all_nodes: Annotated[dict[str, Any], Shape(Group)] | None
    expectations: dict[Name, Annotated[dict[str, Any], Shape(Expectation)]]
    peers: dict[str, Any]
    stamp: Name  # llmb.shared.clock.stamp(): the screen's folder
    created: Name  # llmb.shared.clock.iso()
    job_id: Name
    job_state: Name
    smoke: bool
    image: str | None
    output: str  # the job's output file
    resolution: list[dict[str, Any]]  # precision.Resolution per figure measured in repeats
    transport: dict[Name, dict[str, Any]] | None  # per node: NCCL's network between nodes (GPU)
    driver: Name | None  # the GPU driver (nvidia-smi), None on the CPU
    baseline: dict[str, Any]  # llmb.llmbrun.screen.baseline.compare: held to which, and how
    saved_baseline: str  # --save-baseline: where this screen was kept as the baseline


class RunInfo(TypedDict, total=False):
    """What task 0 says of the run (llmb.container.screenrun's description)."""

    mode: Name
    backend: Name | None
    tool: Name | None
    torch: Name | None
    nccl: Name | None
    tasks: int
    nodes: Names
    ranks: Annotated[dict[Name, list[int]], Bound(items=MAX_NODES)]
    unmeasured: Annotated[dict[Name, str], Bound(items=MAX_NODES)]
    rounds: int
    params: dict[str, Any]
    phases: Annotated[list[dict[str, Any]], Shape(Round)]


class _RankKeys(TypedDict):
    rank: int
    node: Name


class RankRecord(_RankKeys, total=False):
    """What one task writes (llmb.container.screenrun.Record); a file that is not one is
    skipped, as a task that wrote nothing."""

    local_rank: int | None
    device: dict[str, Any] | None
    figures: Annotated[dict[Name, Any], Bound(items=MAX_GPUS)]
    errors: list[str]
    groups: Annotated[list[dict[str, Any]], Shape(Group)]
    run: Annotated[dict[str, Any], Shape(RunInfo)]


def checked(data: Any) -> ScreenDocument:
    """data held to ScreenDocument; records.BadRecord (naming the field) when it is not one."""
    return records.check(ScreenDocument, data)


MAX_RANK_BYTES = 1 << 20
MAX_NCCL_OUTPUT = 16 << 20
BUSBW, ALGBW = "busbw_gbps", "algbw_gbps"


def read_ranks(folder: Path) -> list[dict[str, Any]]:
    """Every task's record that can be read (a half-written or foreign file is skipped)."""
    out = []
    for path in sorted((folder / screenrun.RANKS_DIR).glob("rank-*.json")):
        try:
            data = json.loads(files.read_bounded(path, MAX_RANK_BYTES))
        except (files.FileRefused, ValueError, RecursionError):  # RecursionError: nested deep
            continue
        if records.problem(RankRecord, data) is None:
            out.append(data)
    return out


def summary(result: Mapping[str, Any]) -> dict[str, Any]:
    """A group's all-reduce: its figures at the largest size (where bandwidth has risen to
    what the link carries), from their repeats where it has them (the task's, or nccl-tests'
    cycles: its table once per cycle), and the whole sweep."""
    sizes = [s for s in result.get("sizes") or [] if isinstance(s, dict)]
    out: dict[str, Any] = {"ranks": result.get("ranks"), "error": result.get("error"),
                           "bytes": None, BUSBW: None, ALGBW: None, "sizes": sizes}
    if sizes and not out["error"]:
        largest = max(s["bytes"] for s in sizes)
        rows = [s for s in sizes if s["bytes"] == largest]
        repeats = _numbers(result.get("repeats")) or (
            [float(r[BUSBW]) for r in rows] if len(rows) > 1 else [])
        out.update(bytes=largest, **{k: rows[0][k] for k in (BUSBW, ALGBW)})
        if repeats:
            ratio = rows[0][ALGBW] / rows[0][BUSBW] if rows[0][BUSBW] else 0.0
            busbw = precision.value_of(repeats)
            out.update(repeats=repeats, **{BUSBW: busbw, ALGBW: busbw * ratio})
    elif not out["error"]:
        out["error"] = "no all-reduce result"
    return out


def _numbers(value: Any) -> list[float]:
    """A list of numbers as JSON holds it; [] for anything else."""
    if not isinstance(value, list):
        return []
    return [float(v) for v in value if isinstance(v, (int, float)) and not isinstance(v, bool)]


def torch_groups(ranks: Sequence[Mapping[str, Any]]) -> dict[tuple[str, tuple[str, ...]],
                                                            dict[str, Any]]:
    """(phase, nodes) -> result, from the tasks that led each group."""
    return {(str(g["phase"]), tuple(g["nodes"])): g for r in ranks for g in r.get("groups") or []
            if isinstance(g, dict) and "phase" in g and isinstance(g.get("nodes"), list)}


def nccl_tests_groups(folder: Path, phases: Sequence[screenrun.Phase], per_node: int
                      ) -> tuple[dict[tuple[str, tuple[str, ...]], dict[str, Any]],
                                 list[dict[str, Any]]]:
    """The groups all_reduce_perf measured (its in-place columns) and the phases' walls."""
    where = folder / screenrun.NCCL_TESTS_DIR
    out = {}
    for phase in phases:
        for index, nodes in enumerate(phase.groups):
            expected = len(nodes) * per_node
            result: dict[str, Any] = {"phase": phase.name, "nodes": list(nodes),
                                      "ranks": expected, "sizes": [], "error": None}
            try:
                raw = files.read_bounded(where / f"{phase.name}.{index}.out", MAX_NCCL_OUTPUT)
                parsed = probe.parse_nccl_tests(raw.decode("utf-8", "replace"))
            except files.FileRefused as exc:
                result["error"] = f"all_reduce_perf's output {exc.reason}"
            else:
                result["sizes"] = parsed["sizes"]
                if parsed["ranks"] != expected:
                    result["error"] = (f"all_reduce_perf reported {parsed['ranks']} rank(s), "
                                       f"not {expected}")
            out[(phase.name, tuple(nodes))] = result
    walls = []
    try:
        walls_text = files.read_bounded(where / "walls.txt", MAX_RANK_BYTES).decode(
            "utf-8", "replace")
    except files.FileRefused:
        walls_text = ""
    for line in walls_text.splitlines():
        if m := re.fullmatch(r"(\S+) ([0-9.]+) ([0-9.]+)", line.strip()):
            walls.append({"name": m.group(1),
                          "wall_s": round(float(m.group(3)) - float(m.group(2)), 3)})
    return out, walls


def gpu_entry(rank: Mapping[str, Any]) -> dict[str, Any]:
    device = rank.get("device")
    if not isinstance(device, dict):
        device = {}
    figures = {k: float(v) for k, v in (rank.get("figures") or {}).items()
               if isinstance(v, (int, float)) and not isinstance(v, bool)}
    raw = rank.get("repeats")
    repeats = {k: got for k, v in (raw.items() if isinstance(raw, dict) else [])
               if k in figures and (got := _numbers(v))}
    for figure, series in repeats.items():
        figures[figure] = precision.value_of(series)
    errors = [str(e) for e in rank.get("errors") or []]
    entry = {"rank": rank["rank"], "local_rank": rank.get("local_rank"),
             **{k: device.get(k) for k in ("index", "name", "uuid", "pci_bus_id", "serial")},
             "figures": figures, "notes": errors, "error": None}
    if repeats:
        entry["repeats"] = repeats
    if isinstance(rank.get("health"), dict):
        entry["health"] = health.facts(rank["health"])
    return entry


def node_entries(ranks: Sequence[Mapping[str, Any]], run: Mapping[str, Any],
                 allocated: Sequence[str], per_node: int) -> list[dict[str, Any]]:
    """One entry per node of the job: its GPUs (a task that never reported is a failed GPU),
    or why it was not measured."""
    by_node: dict[str, list[Mapping[str, Any]]] = {}
    for r in ranks:
        by_node.setdefault(r["node"], []).append(r)
    names = sorted(set(allocated) | set(run.get("ranks") or {}) | set(by_node))
    unmeasured = run.get("unmeasured") or {}
    out = []
    for name in names:
        mine = sorted(by_node.get(name, []), key=lambda r: r.get("local_rank") or 0)
        gpus = [gpu_entry(r) for r in mine]
        expected = len((run.get("ranks") or {}).get(name, [])) or per_node
        error = unmeasured.get(name)
        if not mine:
            error = error or "none of its tasks reported (they did not start, or died first)"
        elif len(mine) < expected:
            error = error or f"{expected - len(mine)} of its {expected} tasks never reported"
        out.append({"node": name, "verdict": None, "reasons": [], "error": error,
                    "gpus": gpus, "allreduce": None, "pairs": []})
    return out


def mark_missing_figures(nodes: Sequence[dict[str, Any]]) -> None:
    """A figure the other GPUs have and this one lacks: this GPU failed to measure it."""
    for node in nodes:
        if node["error"]:
            for gpu in node["gpus"]:
                gpu["error"] = "not measured"
    gpus = [g for n in nodes if not n["error"] for g in n["gpus"]]
    seen = {f for g in gpus for f in g["figures"]}
    for gpu in gpus:
        missing = sorted(seen - set(gpu["figures"]))
        if not gpu["figures"] or missing:
            gpu["error"] = "; ".join(gpu["notes"]) or f"no {', '.join(missing) or 'figure'}"


def place_groups(nodes: list[dict[str, Any]], phases: Sequence[screenrun.Phase],
                 results: Mapping[tuple[str, tuple[str, ...]], Mapping[str, Any]]
                 ) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """Each node's own all-reduce into its entry; the pairs; the all-nodes all-reduce."""
    by_name = {n["node"]: n for n in nodes}
    pairs: list[dict[str, Any]] = []
    everyone = None
    for phase in phases:
        for group in phase.groups:
            result = summary(results.get((phase.name, group)) or {"error": "no result (the "
                             "task that led this group did not report it)"})
            if phase.name == "nodes":
                by_name[group[0]]["allreduce"] = result
            elif phase.name == "all":
                everyone = {"nodes": list(group), **result}
            else:
                pair = {"round": int(phase.name.rsplit("-", 1)[1]), "nodes": list(group),
                        **result}
                pairs.append(pair)
                for n in group:
                    partner = next(m for m in group if m != n)
                    by_name[n]["pairs"].append({"round": pair["round"], "with": partner,
                                                BUSBW: pair[BUSBW]})
    return pairs, everyone


def document(folder: Path, gpu_type: str, allocated: Sequence[str], per_node: int
             ) -> ScreenDocument | None:
    """screen.json's content from the job's files; None when no task described the run
    (the job never got as far as meeting)."""
    ranks = read_ranks(folder)
    run = next((r["run"] for r in ranks if r["rank"] == 0 and isinstance(r.get("run"), dict)),
               None)
    if run is None:
        return None
    nodes = node_entries(ranks, run, allocated, per_node)
    mark_missing_figures(nodes)
    phases = screenrun.phases(list(run.get("nodes") or []), int(run.get("rounds") or 0))
    rounds = [p for p in run.get("phases") or [] if isinstance(p, dict)]
    if run.get("tool") == screenrun.NCCL_TESTS_TOOL:
        results, walls = nccl_tests_groups(folder, phases, per_node)
        rounds += walls
    else:
        results = torch_groups(ranks)
    pairs, everyone = place_groups(nodes, phases, results)
    mode = str(run.get("mode"))
    expectations = screenfacts.expectations(catalog.get_gpu_type(gpu_type)) if mode == "gpu" else {}
    verdicts = judge.judge(nodes, pairs, mode, expectations)
    named, suspects = verdicts["named"], verdicts["suspects"]
    links = None
    if mode == "gpu":
        hosts = {str(r["host"]): r["node"] for r in ranks if isinstance(r.get("host"), str)}
        links = transport.summary(transport.read(folder, hosts), list(run.get("nodes") or []))
        found = transport.named(links)
        named, suspects = [*named, *found], judge.mark(nodes, found)
        sick = health.named(nodes)
        health.explain(named, nodes)
        named, suspects = [*named, *sick], judge.mark(nodes, sick, "unhealthy")
    return ScreenDocument(
        schema=SCHEMA, gpu_type=gpu_type, mode=mode, backend=run.get("backend"),
        measured_by=run.get("tool"), torch=run.get("torch"), nccl=run.get("nccl"),
        driver=run.get("driver"),
        tasks=run.get("tasks"), gpus_per_node=per_node, params=run.get("params"),
        nodes=nodes, pairs=pairs, all_nodes=everyone, rounds=rounds,
        expectations={k: {"expected": e.expected, "tolerance": e.tolerance, "floor": e.floor,
                          "source": e.source} for k, e in expectations.items()},
        peers={"k": judge.PEER_K, "tolerance": judge.PEER_TOLERANCE.get(mode)},
        resolution=judge.resolution(nodes, pairs, mode), transport=links,
        named=named, suspects=suspects)
