"""A screen's folder as the job's tasks leave it (llmb.container.screenrun's Record writes each
task's file), for the tests of what is made of it: the results module, the report, the archive.

`write_screen(folder)` writes a CPU screen of NODES x PER_NODE tasks; `screen_json(root)` also
judges it (llmb.llmbrun.screen.results) and writes $LLMB_INSTALL/screens/<stamp>/screen.json as
`llmb-run screen` does.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from llmb.container import screenrun
from llmb.llmbrun.screen import results as screenresults
from llmb.recipes import catalog

H100_GPU = catalog.get_gpu_type("h100")

NODES = ["node1", "node2", "node3", "node4"]
# The least a screen.json of its type holds (llmb.llmbrun.screen.results.ScreenDocument): what
# a test that needs only a screen's suspects writes, with them
LEAST = {"mode": "cpu", "gpus_per_node": 1, "backend": None, "measured_by": None, "nodes": [],
         "pairs": [], "rounds": [], "named": [], "suspects": []}
PER_NODE = 2


def sweep(busbw: float, ranks: int) -> list[dict[str, float]]:
    return [{"bytes": b, "time_us": 10.0, "algbw_gbps": busbw / (2 * (ranks - 1) / ranks) * f,
             "busbw_gbps": busbw * f} for b, f in ((65536, 0.5), (1 << 20, 1.0))]


def jitter(value: float, count: int, seed: int) -> list[float]:
    """`count` repeats of `value`, a few percent apart (a fixed pattern, no randomness)."""
    return [value * (1 + 0.02 * (((seed + k) * 7) % 5 - 2)) for k in range(count)]


# A GPU screen's healthy figures (an H100's, above gpus.yaml's floors): per GPU, per group
GPU_FIGURES = {"matmul_bf16_tflops": 700.0, "memory_gbps": 3000.0}
GPU_BUSBW = {"nodes": 360.0, "pairs": 45.0, "all": 44.0}


def host_of(node: str) -> str:
    """The host name a node's tasks see (NCCL's log lines carry it)."""
    return f"host-{node}"


def write_screen(folder: Path, nodes: list[str] = NODES, tool: str = screenrun.TORCH_TOOL,
                 slow: dict[str, float] | None = None, skip_groups: tuple[str, ...] = (),
                 silent: tuple[str, ...] = (), repeats: int = 0, mode: str = "cpu",
                 leaves: dict[str, str] | None = None) -> None:
    """Rank files as a CPU screen of `nodes` x PER_NODE tasks leaves them; `slow` sets a
    group's busbw ("pairs-1:node2,node3"), `skip_groups` drops results, `silent` nodes
    wrote nothing; `repeats`: each figure measured that many times (0: as a screen before
    repeats wrote them, the figures alone); `mode` "gpu": a GPU screen's figures (NCCL);
    `leaves`: each node's leaf switch, the map the job's plan paired by."""
    slow = slow or {}
    ranks = {n: [i * PER_NODE + k for k in range(PER_NODE)] for i, n in enumerate(nodes)}
    phases = screenrun.phases(nodes, screenrun.default_rounds(len(nodes)), leaves)
    for node, mine in ranks.items():
        if node in silent:
            continue
        for local, rank in enumerate(mine):
            task = screenrun.Task(rank, len(nodes) * PER_NODE, local, node, "9", "0", "0")
            record = screenrun.Record(folder, task)
            record.data["host"] = host_of(node)
            record.data["figures"] = {"matmul_fp32_tflops": 0.01 + 0.0001 * rank,
                                      "memory_gbps": 3.0} if mode == "cpu" else dict(GPU_FIGURES)
            if repeats:
                record.data["repeats"] = {f: jitter(v, repeats, rank)
                                          for f, v in record.data["figures"].items()}
            for phase in phases if tool == screenrun.TORCH_TOOL else []:
                for group in phase.groups:
                    key = f"{phase.name}:{','.join(group)}"
                    members = [r for n in group for r in ranks[n]]
                    if members[0] == rank and key not in skip_groups:
                        busbw = slow.get(key, 0.1 if mode == "cpu" else
                                         GPU_BUSBW[phase.name.split("-")[0]])
                        record.data["groups"].append({
                            "phase": phase.name, "nodes": list(group), "ranks": len(members),
                            "sizes": sweep(busbw, len(members)), "error": None,
                            **({"repeats": jitter(busbw, repeats, rank)} if repeats else {})})
            if rank == 0:
                record.data["run"] = {
                    "mode": mode, "backend": "gloo" if mode == "cpu" else "nccl", "tool": tool,
                    "torch": "2.13.0", "nccl": None if mode == "cpu" else "2.26.3",
                    "tasks": len(nodes) * PER_NODE, "nodes": nodes,
                    "ranks": ranks, "unmeasured": {}, "rounds": 2, "params": {},
                    "phases": [{"name": p, "wall_s": 1.5} for p in
                               ("gpus", *(ph.name for ph in phases))]}
            record.write()


def nccl_tests_row(nbytes: int, *cols: tuple[float, float, float, str]) -> str:
    """One size's line of all_reduce_perf's table, by nccl-tests v2.19.6 src/util.cu's printf
    formats: "%12li  %12li  %8s  %6s  %6s", then per column set (out of place, in place)
    "  %7s  %6s  %6s  %6s" (time us, algbw, busbw, #wrong or N/A)."""
    line = f"{nbytes:12d}  {nbytes // 4:12d}  {'float':>8}  {'sum':>6}  {-1:6d}"
    for time_us, algbw, busbw, wrong in cols:
        line += (f"  {float_str(time_us, 7)}  {float_str(algbw, 6)}  {float_str(busbw, 6)}  "
                 f"{wrong:>6}")
    return line


def float_str(value: float, width: int) -> str:
    """nccl-tests' getFloatStr: two decimals, fewer where the width needs it, else exponent."""
    for places in (2, 1, 0):
        text = f"{value:{width}.{places}f}"
        if len(text) <= width:
            return text
    return f"{value:{width}.{1 if width >= 7 else 0}e}"


def nccl_tests_rank(rank: int, host: str, device: int) -> str:
    """A rank's line of all_reduce_perf's header (src/util.cu: "#  Rank %2d Group %2d Pid %6d
    on %10s device %2d [%04x:%02x:%02x] %s")."""
    return (f"#  Rank {rank:2d} Group {0:2d} Pid {4000 + rank:6d} on {host:>10} device "
            f"{device:2d} [0000:{0x18 + device:02x}:00] NVIDIA H100 80GB HBM3")


def screen_json(root: Path, stamp: str = "20260102-030405", **kwargs: Any) -> dict[str, Any]:
    """A judged screen under root/screens/<stamp>/ (screen.json and the job's output)."""
    folder = root / "screens" / stamp
    write_screen(folder, **kwargs)
    doc = screenresults.document(folder, H100_GPU, NODES, PER_NODE)
    assert doc is not None
    output = folder / "screen-9.out"
    output.write_text("LLMB_SCREEN probe exit 0\n")
    doc.update(stamp=stamp, created="2026-01-02T03:04:05Z", job_id="9",
               job_state="COMPLETED", smoke=True, image=None, output=str(output))
    (folder / "screen.json").write_text(json.dumps(doc, indent=1))
    return doc
