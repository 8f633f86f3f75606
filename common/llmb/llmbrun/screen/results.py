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
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

from llmb.container import probe, screenrun
from llmb.llmbrun.screen import health, judge, precision, transport
from llmb.llmbrun.screen.document import (
    MAX_FIGURE,
    Allreduce,
    Device,
    Group,
    NodePair,
    Pair,
    RankRecord,
    Round,
    RunInfo,
    ScreenDocument,
    ScreenGpu,
    ScreenNode,
    Size,
)
from llmb.llmbrun.screen.document import MAX_GPUS as MAX_GPUS
from llmb.llmbrun.screen.document import MAX_NODES as MAX_NODES
from llmb.llmbrun.screen.document import checked as checked
from llmb.recipes import catalog, screenfacts
from llmb.shared import files, records

SCHEMA = 1
MAX_RANK_BYTES = 1 << 20
MAX_NCCL_OUTPUT = 16 << 20
MAX_REPEATS = 4096  # a figure's repeats kept (document.Figures)
MAX_ERROR = 4096  # characters of a task's error kept
BUSBW: Final = "busbw_gbps"
ALGBW: Final = "algbw_gbps"
GroupKey = tuple[str, tuple[str, ...]]  # a group's phase and nodes


def read_ranks(folder: Path) -> list[RankRecord]:
    """Every task's record that can be read (a half-written or foreign file is skipped)."""
    out = []
    for path in sorted((folder / screenrun.RANKS_DIR).glob("rank-*.json")):
        try:
            data = json.loads(files.read_bounded(path, MAX_RANK_BYTES))
        except (files.FileRefused, ValueError, RecursionError):  # RecursionError: nested deep
            continue
        try:
            out.append(records.check(RankRecord, data))
        except records.BadRecord:
            continue
    return out


def summary(result: Allreduce) -> Allreduce:
    """A group's all-reduce: its figures at the largest size (where bandwidth has risen to
    what the link carries), from their repeats where it has them (the task's, or nccl-tests'
    cycles: its table once per cycle), and the whole sweep."""
    sizes = list(result.get("sizes") or [])
    out = Allreduce(ranks=result.get("ranks"), error=result.get("error"), bytes=None,
                    busbw_gbps=None, algbw_gbps=None, sizes=sizes)
    if sizes and not out["error"]:
        largest = max(s["bytes"] for s in sizes)
        rows = [s for s in sizes if s["bytes"] == largest]
        repeats = [float(r) for r in result.get("repeats") or []] or (
            [float(r[BUSBW]) for r in rows] if len(rows) > 1 else [])
        out.update({"bytes": largest, BUSBW: rows[0][BUSBW], ALGBW: rows[0][ALGBW]})
        if repeats:
            ratio = rows[0][ALGBW] / rows[0][BUSBW] if rows[0][BUSBW] else 0.0
            busbw = precision.value_of(repeats)
            out.update({"repeats": repeats, BUSBW: busbw, ALGBW: busbw * ratio})
    elif not out["error"]:
        out["error"] = "no all-reduce result"
    return out


def _figure(value: object) -> float | None:
    """A task's number as a figure: finite, not negative (a rate or a bandwidth; a ratio to
    a negative one would read as a drop of more than 100%) and at most MAX_FIGURE (never a
    boolean, a 401-digit whole number, JSON's Infinity or NaN); None for anything else."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    if isinstance(value, int) and abs(value) > MAX_FIGURE:
        return None
    got = float(value)
    return got if math.isfinite(got) and 0 <= got <= MAX_FIGURE else None


def _numbers(value: object) -> list[float]:
    """A list of figures as JSON holds it (what is not one left out); [] for anything else."""
    if not isinstance(value, list):
        return []
    return [got for v in value[:MAX_REPEATS] if (got := _figure(v)) is not None]


def _text(parts: Sequence[str]) -> str:
    """Texts joined into one a record holds (a task's errors may be many, and long)."""
    joined = "; ".join(parts)
    return joined if len(joined) <= MAX_ERROR else f"{joined[:MAX_ERROR]}... (cut)"


def torch_groups(ranks: Sequence[RankRecord]) -> dict[GroupKey, Group]:
    """(phase, nodes) -> result, from the tasks that led each group."""
    return {(phase, tuple(g["nodes"])): g for r in ranks for g in r.get("groups") or []
            if (phase := g.get("phase")) is not None}


def nccl_tests_groups(folder: Path, phases: Sequence[screenrun.Phase], per_node: int
                      ) -> tuple[dict[GroupKey, Group], list[Round]]:
    """The groups all_reduce_perf measured (its in-place columns) and the phases' walls."""
    where = folder / screenrun.NCCL_TESTS_DIR
    out = {}
    for phase in phases:
        for index, nodes in enumerate(phase.groups):
            expected = len(nodes) * per_node
            result = Group(phase=phase.name, nodes=list(nodes), ranks=expected, sizes=[],
                           error=None)
            try:
                raw = files.read_bounded(where / f"{phase.name}.{index}.out", MAX_NCCL_OUTPUT)
                parsed = probe.parse_nccl_tests(raw.decode("utf-8", "replace"))
            except files.FileRefused as exc:
                result["error"] = f"all_reduce_perf's output {exc.reason}"
            else:
                result["sizes"] = [Size(bytes=int(s["bytes"]), busbw_gbps=s["busbw_gbps"],
                                        algbw_gbps=s["algbw_gbps"]) for s in parsed["sizes"]]
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
            walls.append(Round(name=m.group(1),
                               wall_s=round(float(m.group(3)) - float(m.group(2)), 3)))
    return out, walls


def gpu_entry(rank: RankRecord) -> ScreenGpu:
    device: Device = rank.get("device") or {}
    figures = {k: number for k, v in (rank.get("figures") or {}).items()
               if (number := _figure(v)) is not None}
    repeats = {k: got for k, v in (rank.get("repeats") or {}).items()
               if k in figures and (got := _numbers(v))}
    for figure, series in repeats.items():
        figures[figure] = precision.value_of(series)
    entry = ScreenGpu(rank=rank["rank"], local_rank=rank.get("local_rank"),
                      index=device.get("index"), name=device.get("name"),
                      uuid=device.get("uuid"), pci_bus_id=device.get("pci_bus_id"),
                      serial=device.get("serial"), figures=figures,
                      notes=[_text([e]) for e in rank.get("errors") or []], error=None)
    if repeats:
        entry["repeats"] = repeats
    if (raw := rank.get("health")) is not None:
        entry["health"] = health.facts(raw)
    return entry


def node_entries(ranks: Sequence[RankRecord], run: RunInfo,
                 allocated: Sequence[str], per_node: int) -> list[ScreenNode]:
    """One entry per node of the job: its GPUs (a task that never reported is a failed GPU),
    or why it was not measured."""
    by_node: dict[str, list[RankRecord]] = {}
    for r in ranks:
        by_node.setdefault(r["node"], []).append(r)
    placed = run.get("ranks") or {}
    # every node the run names has an entry, reported or not: its groups are placed on it
    names = sorted(set(allocated) | set(placed) | set(by_node) | set(run.get("nodes") or []))
    unmeasured = run.get("unmeasured") or {}
    out = []
    for name in names:
        mine = sorted(by_node.get(name, []), key=lambda r: r.get("local_rank") or 0)
        gpus = [gpu_entry(r) for r in mine]
        expected = len(placed.get(name, [])) or per_node
        error = unmeasured.get(name)
        if not mine:
            error = error or "none of its tasks reported (they did not start, or died first)"
        elif len(mine) < expected:
            error = error or f"{expected - len(mine)} of its {expected} tasks never reported"
        out.append(ScreenNode(node=name, verdict=None, reasons=[], error=error, gpus=gpus,
                              allreduce=None, pairs=[]))
    return out


def mark_missing_figures(nodes: Sequence[ScreenNode]) -> None:
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
            gpu["error"] = _text(gpu["notes"]) or _text([f"no {', '.join(missing) or 'figure'}"])


def place_groups(nodes: list[ScreenNode], phases: Sequence[screenrun.Phase],
                 results: Mapping[GroupKey, Allreduce]) -> tuple[list[Pair], Group | None]:
    """Each node's own all-reduce into its entry; the pairs; the all-nodes all-reduce."""
    by_name = {n["node"]: n for n in nodes}
    pairs: list[Pair] = []
    everyone = None
    for phase in phases:
        for group in phase.groups:
            result = summary(results.get((phase.name, group)) or {"error": "no result (the "
                             "task that led this group did not report it)"})
            if phase.name == "nodes":
                by_name[group[0]]["allreduce"] = result
            elif phase.name == "all":
                everyone = Group(nodes=list(group), **result)
            else:
                pair = Pair(round=int(phase.name.rsplit("-", 1)[1]), nodes=list(group),
                            **result)
                pairs.append(pair)
                for n in group:
                    partner = next(m for m in group if m != n)
                    by_name[n]["pairs"].append(NodePair({"round": pair["round"], "with": partner,
                                                         BUSBW: pair[BUSBW]}))
    return pairs, everyone


def document(folder: Path, gpu: catalog.GpuType, allocated: Sequence[str], per_node: int,
             leaves: Mapping[str, str] | None = None) -> ScreenDocument | None:
    """screen.json's content from the job's files; None when no task described the run
    (the job never got as far as meeting). `leaves`: each node's leaf switch, the map the
    job's plan paired by (None: one tier)."""
    ranks = read_ranks(folder)
    run = next((r["run"] for r in ranks if r["rank"] == 0 and "run" in r), None)
    if run is None:
        return None
    nodes = node_entries(ranks, run, allocated, per_node)
    mark_missing_figures(nodes)
    phases = [screenrun.Phase(p["name"], tuple(tuple(g) for g in p["groups"]))
              for p in run["schedule"]] if "schedule" in run else \
        screenrun.phases(list(run.get("nodes") or []), int(run.get("rounds") or 0), leaves)
    if leaves:
        for node in nodes:
            node["leaf"] = leaves.get(node["node"])
    rounds = list(run.get("phases") or [])
    results: dict[GroupKey, Group]
    if run.get("tool") == screenrun.NCCL_TESTS_TOOL:
        results, walls = nccl_tests_groups(folder, phases, per_node)
        rounds += walls
    else:
        results = torch_groups(ranks)
    pairs, everyone = place_groups(nodes, phases, results)
    mode = str(run.get("mode"))
    expectations = screenfacts.expectations(gpu) if mode == "gpu" else {}
    verdicts = judge.judge(nodes, pairs, mode, expectations, leaves)
    named, suspects = verdicts["named"], verdicts["suspects"]
    links = None
    if mode == "gpu":
        hosts = {r["host"]: r["node"] for r in ranks if "host" in r}
        links = transport.summary(transport.read(folder, hosts), list(run.get("nodes") or []))
        found = transport.named(links)
        named, suspects = [*named, *found], judge.mark(nodes, found)
        sick = health.named(nodes)
        health.explain(named, nodes)
        named, suspects = [*named, *sick], judge.mark(nodes, sick, "unhealthy")
    return ScreenDocument(
        schema=SCHEMA, gpu_type=gpu.name, mode=mode, backend=run.get("backend"),
        measured_by=run.get("tool"), torch=run.get("torch"), nccl=run.get("nccl"),
        driver=run.get("driver"),
        tasks=run.get("tasks"), gpus_per_node=per_node, params=run.get("params"),
        nodes=nodes, pairs=pairs, all_nodes=everyone, rounds=rounds,
        expectations={k: {"expected": e.expected, "tolerance": e.tolerance, "floor": e.floor,
                          "source": e.source} for k, e in expectations.items()},
        peers={"k": judge.PEER_K, "tolerance": judge.PEER_TOLERANCE.get(mode)},
        resolution=judge.resolution(nodes, pairs, mode, leaves), transport=links,
        named=named, suspects=suspects, stragglers=verdicts.get("stragglers", []))
