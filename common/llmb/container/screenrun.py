"""One task of `llmb-run screen`'s job: `python -m llmb.container.screenrun --plan FILE`.

srun starts it once per GPU on every node, in the benchmark's image, with the benchmark's
environment. The tasks meet (a TCPStore on task 0, whose address task 0 writes into the
screen's folder, which every node sees: no port to agree on beforehand), agree on what can be
measured and how, then go through the phases together, a barrier between two phases:

    gpus      every task alone: matrix multiply and memory bandwidth (llmb.container.probe)
    nodes     an all-reduce over the GPUs of each node, every node at once
    pairs-R   R = 1, 2, ...: the nodes in disjoint pairs (`pair_rounds`), every pair at once,
              an all-reduce over the GPUs of both nodes; a new partner for every node each round
    all       one all-reduce over every node screened

Every figure is measured in repeats (the plan's `repeats`, `allreduce_repeats`; llmb.container.
probe), after one warm-up pass that is not recorded (each of the task's figures measured once
first: a GPU's clocks ramp up, caches and allocators fill; an all-reduce's sweep is the warm-up
of its repeats). A plan may state the phases to run (`phases`: each a name and its groups of
nodes; the confirm pass's, llmb.llmbrun.screen.confirm); a group with a node that is not
measured is left out. On the CPU (`serial` in the plan) one task measures at a time in the
`gpus` phase, and one group at a time in each all-reduce phase: a CPU screen's processes share
cores (on the test cluster every "node" shares the same two), so figures measured side by side
would measure how the scheduler shared them, not the node; one at a time, they compare.

The mode: `gpu` (NCCL for the all-reduces) when every task sees a CUDA device and the plan
does not force the CPU (--smoke); otherwise `cpu` (gloo, the plan's small sizes). Where only
some nodes have CUDA, the others are not measured and say why. The all-reduces are measured
with nccl-tests' all_reduce_perf when the image has one built with MPI (then this program only
writes the groups, `nccl-tests/groups.txt`, and the job script runs them), with
torch.distributed otherwise (all_reduce_perf's cycles, -N, are its repeats where the build
has the option: `nccl-tests/cycles.txt`). Control (meeting, barriers, gathering) always goes
over gloo.

On a GPU, each task has NCCL write its INFO lines (the job sets NCCL_DEBUG=INFO and
NCCL_DEBUG_SUBSYS=INIT,NET) to nccl-logs/rank-NNNNN.log: which network it used between nodes.
On a GPU, each task also asks nvidia-smi how its GPU is, while it works (llmb.container.
gpuhealth: ECC errors, pending remaps, throttling, power and clock limits, the PCIe link).
Each task writes what it knows to ranks/rank-NNNNN.json in the screen's folder after every
phase (task 0 also the plan as resolved and each phase's wall time), so a job that dies half
way still leaves what it measured. torch is imported inside the functions.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import functools
import json
import os
import socket
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llmb.container import devices, gpuhealth, probe
from llmb.container.devices import NCCL_TESTS_BINARY as NCCL_TESTS_BINARY
from llmb.container.pairing import Phase as Phase
from llmb.container.pairing import default_rounds as default_rounds
from llmb.container.pairing import max_rounds as max_rounds
from llmb.container.pairing import pair_rounds as pair_rounds
from llmb.container.pairing import phases as phases
from llmb.shared import files
from llmb.shared.errors import LlmbError

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup, TCPStore

PLAN_FILE = "plan.json"
RANKS_DIR = "ranks"
RENDEZVOUS_DIR = "rendezvous"
NCCL_TESTS_DIR = "nccl-tests"
GROUPS_FILE = "groups.txt"
NCCL_LOGS_DIR = "nccl-logs"  # NCCL's INFO lines, per task (llmb.llmbrun.screen.transport)
CYCLES_FILE = "cycles.txt"
TORCH_TOOL = "torch.distributed"
NCCL_TESTS_TOOL = "nccl-tests all_reduce_perf"
MAX_PLAN_BYTES = 1 << 20
POLL_S = 0.2
MODE_KEYS = {"sizes", "iters", "warmup", "window_s", "matmul_n", "memory_bytes", "dtypes"}


class ScreenError(LlmbError):
    """Something this task cannot work with; its message is the one line printed."""


# --- this task --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Task:
    rank: int
    world: int
    local_rank: int
    node: str
    job: str
    step: str
    restart: str


def task_from_env(env: Mapping[str, str]) -> Task:
    """This task as srun describes it (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, ...)."""
    missing = [v for v in ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID") if v not in env]
    if missing:
        raise ScreenError(f"{', '.join(missing)} not set: run this under srun (llmb-run "
                          "screen writes the job)")
    try:
        rank, world, local = (int(env[v]) for v in ("SLURM_PROCID", "SLURM_NTASKS",
                                                     "SLURM_LOCALID"))
    except ValueError:
        raise ScreenError("SLURM_PROCID, SLURM_NTASKS and SLURM_LOCALID must be whole "
                          "numbers") from None
    return Task(rank, world, local, env.get("SLURMD_NODENAME") or socket.gethostname(),
                env.get("SLURM_JOB_ID", "nojob"), env.get("SLURM_STEP_ID", "0"),
                env.get("SLURM_RESTART_COUNT", "0"))


def read_plan(path: Path) -> dict[str, Any]:
    """The plan llmb-run screen wrote; ScreenError naming what is wrong with it."""
    try:
        plan = json.loads(files.read_bounded(path, MAX_PLAN_BYTES))
    except files.FileRefused as exc:
        raise ScreenError(f"plan {exc}") from None
    except (ValueError, RecursionError):
        raise ScreenError(f"plan {path} is not JSON") from None
    if not isinstance(plan, dict) or not all(isinstance(plan.get(m), dict) and
                                             set(plan[m]) >= MODE_KEYS for m in ("gpu", "cpu")):
        raise ScreenError(f"plan {path} lacks gpu/cpu settings ({', '.join(sorted(MODE_KEYS))})"
                          "; run llmb-run screen again")
    planned_phases(plan, [])  # its phases, where it states them, are what they must be
    return plan


def planned_phases(plan: Mapping[str, Any], nodes: Sequence[str]) -> list[Phase]:
    """The all-reduce phases over the measured `nodes`: the plan's own (`phases`, each
    {"name", "groups"}; a group with a node not measured left out, a phase left empty
    dropped), else every node, the pair rounds and all nodes (pairing.phases; pairs under one
    leaf switch first where the plan holds each node's leaf)."""
    stated = plan.get("phases")
    if stated is None:
        leaves = plan.get("leaves")
        return phases(nodes, int(plan.get("rounds") or default_rounds(len(nodes))),
                      leaves if isinstance(leaves, dict) else None)
    if not isinstance(stated, list) or not all(
            isinstance(p, dict) and isinstance(p.get("name"), str) and
            isinstance(p.get("groups"), list) and
            all(isinstance(g, list) and g and all(isinstance(n, str) for n in g)
                for g in p["groups"]) for p in stated):
        raise ScreenError("the plan's phases are not a list of {name, groups: [[node, ...]]}"
                          "; run llmb-run screen again")
    here = set(nodes)
    out = [Phase(p["name"], tuple(tuple(g) for g in p["groups"] if set(g) <= here))
           for p in stated]
    return [p for p in out if p.groups]


# --- what the tasks agree on ------------------------------------------------------------------

@dataclass
class Layout:
    """Who is where, and what is measured how (the same on every task: built from what
    every task said about itself)."""

    mode: str  # gpu | cpu
    nodes: list[str]  # measured, in name order
    ranks: dict[str, list[int]]  # node -> its tasks' ranks
    unmeasured: dict[str, str] = field(default_factory=dict)  # node -> why not

    @classmethod
    def of(cls, everyone: Sequence[Mapping[str, Any]], force_cpu: bool) -> Layout:
        ranks: dict[str, list[int]] = {}
        for info in everyone:
            ranks.setdefault(str(info["node"]), []).append(int(info["rank"]))
        lacking = {str(i["node"]) for i in everyone if not i["cuda"]}
        mode = "cpu" if force_cpu or len(lacking) == len(ranks) else "gpu"
        unmeasured = {} if mode == "cpu" else {
            n: "no CUDA device visible to its task(s) " + ", ".join(
                str(i["rank"]) for i in everyone if i["node"] == n and not i["cuda"])
            for n in sorted(lacking)}
        nodes = sorted(n for n in ranks if n not in unmeasured)
        return cls(mode, nodes, {n: sorted(r) for n, r in ranks.items()}, unmeasured)

    def tool(self, everyone: Sequence[Mapping[str, Any]]) -> str:
        """What measures the all-reduces: nccl-tests where every measured task found an
        all_reduce_perf built with MPI (GPU mode), torch.distributed otherwise. Decided from
        what all tasks said, so that all decide alike."""
        measured = [i for i in everyone if i["node"] in self.nodes]
        if self.mode == "gpu" and measured and all(i.get("nccl_tests") for i in measured):
            return NCCL_TESTS_TOOL
        return TORCH_TOOL

    def group_ranks(self, nodes: Sequence[str]) -> list[int]:
        return sorted(r for n in nodes for r in self.ranks[n])


class Record:
    """What this task knows, rewritten whole after every phase."""

    def __init__(self, folder: Path, task: Task) -> None:
        self.path = folder / RANKS_DIR / f"rank-{task.rank:05d}.json"
        self.data: dict[str, Any] = {"rank": task.rank, "node": task.node,
                                     "local_rank": task.local_rank, "device": None,
                                     "host": socket.gethostname(), "figures": {},
                                     "repeats": {}, "errors": [], "groups": []}

    def error(self, where: str, exc: BaseException) -> None:
        text = " ".join(str(exc).split())[:400] or type(exc).__name__
        self.data["errors"].append(f"{where}: {type(exc).__name__}: {text}")

    def write(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        files.atomic_write(self.path, json.dumps(self.data, indent=1) + "\n")


# --- the run ----------------------------------------------------------------------------------

def rendezvous(folder: Path, task: Task, timeout_s: float) -> TCPStore:
    """The TCPStore every task of this job step meets at: task 0 opens it on a free port and
    writes `host port` into the screen's folder; the others read that and connect."""
    import torch.distributed as dist

    timeout = datetime.timedelta(seconds=timeout_s)
    path = folder / RENDEZVOUS_DIR / f"{task.job}.{task.step}.r{task.restart}"
    if task.rank == 0:
        host = socket.gethostname()
        store = dist.TCPStore(host, 0, task.world, is_master=True, timeout=timeout,
                              wait_for_workers=False)
        path.parent.mkdir(parents=True, exist_ok=True)
        files.atomic_write(path, f"{host} {store.port}\n")
        return store
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() > deadline:
            raise ScreenError(f"task 0 did not open the rendezvous ({path}) within "
                              f"{timeout_s:.0f} s")
        time.sleep(POLL_S)
    host, port = path.read_text().split()
    return dist.TCPStore(host, int(port), task.world, is_master=False, timeout=timeout)


class Run:
    """The phases of one task; every task runs the same sequence."""

    def __init__(self, plan: Mapping[str, Any], task: Task, folder: Path) -> None:
        self.plan, self.task, self.folder = plan, task, folder
        self.record = Record(folder, task)

    def start(self) -> None:
        import torch
        import torch.distributed as dist

        store = rendezvous(self.folder, self.task, float(self.plan["timeout_s"]))
        dist.init_process_group("gloo", store=store, rank=self.task.rank,
                                world_size=self.task.world,
                                timeout=datetime.timedelta(seconds=float(self.plan["timeout_s"])))
        cuda = not self.plan.get("force_cpu") and devices.has_cuda()
        binary = devices.nccl_tests_binary() if cuda else None
        everyone: list[Any] = [None] * self.task.world
        dist.all_gather_object(everyone, {"rank": self.task.rank, "node": self.task.node,
                                          "cuda": cuda, "nccl_tests": binary})
        self.layout = Layout.of(everyone, bool(self.plan.get("force_cpu")))
        self.measured = self.task.node in self.layout.nodes
        self.params = self.plan[self.layout.mode]
        self.backend = "nccl" if self.layout.mode == "gpu" else "gloo"
        self.device = probe.Device("cpu")
        if self.layout.mode == "cpu":
            torch.set_num_threads(1)  # one CPU process stands for one GPU: no threads competing
        elif self.measured:
            self.device = probe.Device("cuda", self.task.local_rank % torch.cuda.device_count())
            torch.cuda.set_device(self.device.index)
            self.record.data["device"] = devices.gpu_identity(self.device.index)
        if self.layout.mode == "gpu":  # before NCCL's first communicator reads its settings
            logs = self.folder / NCCL_LOGS_DIR
            logs.mkdir(parents=True, exist_ok=True)
            os.environ["NCCL_DEBUG_FILE"] = str(logs / f"rank-{self.task.rank:05d}.log")
        self.tool = self.layout.tool(everyone)
        binary = binary if self.tool == NCCL_TESTS_TOOL else None
        self.binary = binary
        if self.task.rank == 0:
            self.record.data["run"] = self.description(binary)
        self.record.write()

    def description(self, binary: str | None) -> dict[str, Any]:
        import torch

        nccl = None
        if self.layout.mode == "gpu":
            with contextlib.suppress(Exception):
                nccl = ".".join(map(str, torch.cuda.nccl.version()))
        rounds = self.plan.get("rounds") or default_rounds(len(self.layout.nodes))
        return {"mode": self.layout.mode, "backend": self.backend,
                "tool": self.tool, "nccl_tests_binary": binary, "torch": torch.__version__,
                "nccl": nccl, "driver": (self.record.data["device"] or {}).get("driver"),
                "tasks": self.task.world, "nodes": self.layout.nodes,
                "ranks": self.layout.ranks, "unmeasured": self.layout.unmeasured,
                "rounds": rounds, "params": dict(self.params), "phases": [],
                "schedule": [{"name": ph.name, "groups": [list(g) for g in ph.groups]}
                             for ph in planned_phases(self.plan, self.layout.nodes)],
                "host": socket.gethostname()}

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Everyone starts together and waits for the slowest; task 0 keeps the wall time."""
        import torch.distributed as dist

        dist.barrier()
        start = time.perf_counter()
        yield
        dist.barrier()
        if self.task.rank == 0:
            self.record.data["run"]["phases"].append(
                {"name": name, "wall_s": round(time.perf_counter() - start, 3)})
        self.record.write()

    def measures(self) -> list[tuple[str, Callable[[], float]]]:
        """This task's figures, each a measurement of one window."""
        p = self.params
        window, device = float(p["window_s"]), self.device
        out: list[tuple[str, Callable[[], float]]] = [
            (f"matmul_{dtype}_tflops", functools.partial(
                probe.matmul_tflops, device, dtype, int(p["matmul_n"]), window))
            for dtype in p["dtypes"]]
        out.append(("memory_gbps", functools.partial(
            probe.memory_gbps, device, int(p["memory_bytes"]), window)))
        return out

    def turns(self) -> Iterator[bool]:
        """Whether this task measures now, once per turn: every task at once; or, where the
        plan says `serial` (the CPU: processes share cores), one task after the other, a
        barrier between two turns (every task takes part in every turn)."""
        import torch.distributed as dist

        if not self.params.get("serial"):
            yield True
            return
        for turn in range(self.task.world):
            yield turn == self.task.rank
            dist.barrier()

    def gpu_figures(self) -> None:
        """Every figure in repeats, the repeats of all figures taken in turn (a passing
        disturbance hits one repeat of several figures, not every repeat of one), after one
        warm-up pass in this task's first turn that is not recorded."""
        series: dict[str, list[float]] = {}
        failed: set[str] = set()
        measures = self.measures() if self.measured else []
        sampler = None
        for repeat in range(max(1, int(self.params.get("repeats") or 1))):
            passes = (True, False) if repeat == 0 else (False,)  # True: the warm-up's
            for mine in self.turns():
                for warm in passes if mine else ():
                    for name, measure in measures:
                        if name in failed:
                            continue
                        if sampler is None and self.device.kind == "cuda":  # the GPU is busy
                            sampler = gpuhealth.Sampler((self.record.data["device"] or {}).get(
                                "uuid"))
                        try:
                            got = measure()
                        except Exception as exc:  # fp8 where GPU or PyTorch lack it; a bad GPU
                            self.record.error(name, exc)
                            failed.add(name)
                            series.pop(name, None)
                        else:
                            if not warm:
                                series.setdefault(name, []).append(got)
        self.record.data["figures"] = {n: probe.value_of(r) for n, r in series.items()}
        self.record.data["repeats"] = series
        if sampler is not None:
            self.record.data["health"] = sampler.facts()

    def make_groups(self, phase: Phase) -> list[tuple[list[int], ProcessGroup | None]]:
        """The process groups of a phase, each group's ranks with it. Every task creates every
        group, in the same order (torch.distributed.new_group's rule)."""
        import torch.distributed as dist

        out: list[tuple[list[int], ProcessGroup | None]] = []
        for nodes in phase.groups:
            ranks = self.layout.group_ranks(nodes)
            if self.backend == "gloo" and len(ranks) == self.task.world:
                out.append((ranks, None))  # the default group
            else:
                out.append((ranks, dist.new_group(ranks, backend=self.backend)))
        return out

    def allreduce(self, phase: Phase) -> None:
        """Each group's sweep, then its repeats at the largest size: every group at once; or,
        where the plan says `serial`, one group after the other (a barrier between two), the
        repeats taken in turn (every group's first, then every group's second, ...): a
        passing disturbance hits one repeat of several groups, not every repeat of one."""
        import torch.distributed as dist

        serial = bool(self.params.get("serial"))
        repeats = int(self.params.get("allreduce_repeats") or 0)
        groups = list(zip(phase.groups, self.make_groups(phase), strict=True))
        led: dict[tuple[str, ...], dict[str, Any]] = {}
        for turn in [None, *range(repeats if serial else 0)]:
            for nodes, (ranks, group) in groups:
                if self.task.rank in ranks:
                    result = led.setdefault(nodes, {
                        "phase": phase.name, "nodes": list(nodes), "ranks": len(ranks),
                        "sizes": [], "error": None})
                    self.measure_group(result, ranks, group, turn is not None,
                                       1 if serial else repeats)
                if serial:
                    dist.barrier()
        for nodes, (ranks, _) in groups:
            if self.task.rank == ranks[0]:
                self.record.data["groups"].append(led[nodes])

    def measure_group(self, result: dict[str, Any], ranks: list[int], group: ProcessGroup | None,
                      repeat: bool, count: int) -> None:
        """The group's sweep (repeat False), or `count` more repeats at its largest size."""
        p = self.params
        if result["error"] or (repeat and not result["sizes"]):
            return
        try:
            if not repeat:
                result["sizes"] = probe.allreduce_sweep(
                    self.device, group, len(ranks), p["sizes"], int(p["iters"]),
                    int(p["warmup"]))
                result["repeats"] = []
                if p.get("serial"):
                    return
            largest = result["sizes"][-1]
            more, result["repeat_iters"] = probe.allreduce_repeats(
                self.device, group, len(ranks), int(largest["bytes"]),
                float(largest["time_us"]) / 1e6, float(p.get("allreduce_window_s") or 0),
                int(p["iters"]), count)
            result["repeats"] += more
        except Exception as exc:
            result["error"] = f"{type(exc).__name__}: {' '.join(str(exc).split())[:400]}"

    def write_nccl_tests_groups(self, plan_phases: Sequence[Phase], binary: str | None
                                ) -> None:
        """The groups the job script runs all_reduce_perf for, and how many cycles each
        (its -N: the repeats, where this build of nccl-tests has the option)."""
        lines = [f"{ph.name} {i} {len(g)} {','.join(g)}\n"
                 for ph in plan_phases for i, g in enumerate(ph.groups)]
        where = self.folder / NCCL_TESTS_DIR
        where.mkdir(parents=True, exist_ok=True)
        cycles = int(self.params.get("allreduce_repeats") or 0)
        files.atomic_write(where / CYCLES_FILE,
                           f"{cycles}\n" if binary and devices.nccl_tests_cycles(binary) else "")
        files.atomic_write(where / GROUPS_FILE, "".join(lines))

    def run(self) -> None:
        import torch.distributed as dist

        self.start()
        with self.phase("gpus"):
            if self.measured:
                self.gpu_figures()
        plan_phases = planned_phases(self.plan, self.layout.nodes)
        if self.tool == NCCL_TESTS_TOOL:
            if self.task.rank == 0:
                self.write_nccl_tests_groups(plan_phases, self.binary)
        else:
            for ph in plan_phases:
                with self.phase(ph.name):
                    self.allreduce(ph)
        dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="screenrun", description="one task of llmb-run "
                                     "screen's job (srun runs it once per GPU)")
    parser.add_argument("--plan", required=True, type=Path)
    args = parser.parse_args(argv)
    os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")  # CUDA's numbering = nvidia-smi's
    run: Run | None = None
    try:
        plan = read_plan(args.plan)
        run = Run(plan, task_from_env(os.environ), args.plan.parent)
        run.run()
    except LlmbError as exc:
        print(f"llmb screen: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # noted in this task's results, then one line
        if run is not None:
            run.record.error("screen", exc)
            with contextlib.suppress(OSError):
                run.record.write()
        print(f"llmb screen: task {os.environ.get('SLURM_PROCID', '?')}: "
              f"{type(exc).__name__}: {' '.join(str(exc).split())[:400]}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
