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

The mode: `gpu` (NCCL for the all-reduces) when every task sees a CUDA device and the plan
does not force the CPU (--smoke); otherwise `cpu` (gloo, the plan's small sizes). Where only
some nodes have CUDA, the others are not measured and say why. The all-reduces are measured
with nccl-tests' all_reduce_perf when the image has one built with MPI (then this program only
writes the groups, `nccl-tests/groups.txt`, and the job script runs them), with
torch.distributed otherwise. Control (meeting, barriers, gathering) always goes over gloo.

Each task writes what it knows to ranks/rank-NNNNN.json in the screen's folder after every
phase (task 0 also the plan as resolved and each phase's wall time), so a job that dies half
way still leaves what it measured. torch is imported inside the functions.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llmb.container import probe
from llmb.shared import files
from llmb.shared.errors import LlmbError

PLAN_FILE = "plan.json"
RANKS_DIR = "ranks"
RENDEZVOUS_DIR = "rendezvous"
NCCL_TESTS_DIR = "nccl-tests"
GROUPS_FILE = "groups.txt"
NCCL_TESTS_BINARY = "all_reduce_perf"
TORCH_TOOL = "torch.distributed"
NCCL_TESTS_TOOL = "nccl-tests all_reduce_perf"
MAX_PLAN_BYTES = 1 << 20
POLL_S = 0.2
MODE_KEYS = {"sizes", "iters", "warmup", "window_s", "matmul_n", "memory_bytes", "dtypes"}


class ScreenError(LlmbError):
    """Something this task cannot work with; its message is the one line printed."""


# --- who meets whom ---------------------------------------------------------------------------

def max_rounds(nodes: int) -> int:
    """How many rounds give every node a new partner each time (an odd count sits one out)."""
    return 0 if nodes < 2 else nodes - 1 if nodes % 2 == 0 else nodes


def default_rounds(nodes: int) -> int:
    """Rounds enough for every node to meet two partners: 2 for an even count, 3 for an odd
    one (each node sits out at most once), fewer where there are not that many partners."""
    return min(max_rounds(nodes), 2 if nodes % 2 == 0 else 3)


def pair_rounds(nodes: Sequence[str], rounds: int) -> list[list[tuple[str, str]]]:
    """Disjoint pairs, round by round, by the circle method of a round-robin tournament: the
    first node stays, the others turn one place per round, and place i meets place m-1-i. With
    an odd count an empty place joins, and whoever meets it sits the round out."""
    places: list[str | None] = [*nodes, *([None] if len(nodes) % 2 else [])]
    m = len(places)
    out = []
    for _ in range(min(rounds, max_rounds(len(nodes)))):
        pairs = [(a, b) for i in range(m // 2)
                 if (a := places[i]) is not None and (b := places[m - 1 - i]) is not None]
        out.append(pairs)
        places = [places[0], places[-1], *places[1:-1]]
    return out


@dataclass(frozen=True)
class Phase:
    name: str
    groups: tuple[tuple[str, ...], ...]


def phases(nodes: Sequence[str], rounds: int) -> list[Phase]:
    """The all-reduce phases over these nodes: each node, the pair rounds, then all nodes
    (left out where it would repeat a group: one or two nodes)."""
    out = [Phase("nodes", tuple((n,) for n in nodes))] if nodes else []
    for number, pairs in enumerate(pair_rounds(nodes, rounds), 1):
        out.append(Phase(f"pairs-{number}", tuple(pairs)))
    if len(nodes) >= 3:
        out.append(Phase("all", (tuple(nodes),)))
    return out


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
    return plan


def has_cuda() -> bool:
    import torch

    return bool(torch.cuda.is_available() and torch.cuda.device_count() > 0)


def gpu_identity(index: int) -> dict[str, Any]:
    """Name, UUID, PCI bus id and serial of CUDA device `index`, so that a bad one can be
    found in the machine: PyTorch's device properties, completed from nvidia-smi."""
    import torch

    props = torch.cuda.get_device_properties(index)
    uuid = getattr(props, "uuid", None)
    ident: dict[str, Any] = {"index": index, "name": props.name,
                             "uuid": f"GPU-{uuid}" if uuid is not None else None,
                             "pci_bus_id": None, "serial": None}
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")
    mine = visible[index].strip() if index < len(visible) else str(index)
    for row in nvidia_smi_rows():
        if row["uuid"] == ident["uuid"] or (ident["uuid"] is None and mine in (row["index"],
                                                                               row["uuid"])):
            ident.update(uuid=row["uuid"], pci_bus_id=row["pci_bus_id"], serial=row["serial"])
    return ident


def nvidia_smi_rows() -> list[dict[str, str]]:
    """nvidia-smi's index, UUID, PCI bus id and serial of every GPU ([] without it)."""
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=index,uuid,pci.bus_id,serial",
                              "--format=csv,noheader"], capture_output=True, text=True,
                             timeout=60, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    rows = [[c.strip() for c in line.split(",")] for line in out.splitlines() if line.strip()]
    return [dict(zip(("index", "uuid", "pci_bus_id", "serial"), r, strict=True))
            for r in rows if len(r) == 4]


def nccl_tests_binary() -> str | None:
    """all_reduce_perf on PATH, when it was built with MPI (without MPI each process would
    run an all-reduce of its own, one rank each); None otherwise."""
    path = shutil.which(NCCL_TESTS_BINARY)
    if path is None:
        return None
    try:
        return path if b"libmpi" in Path(path).read_bytes() else None
    except OSError:
        return None


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
                                     "figures": {}, "errors": [], "groups": []}

    def error(self, where: str, exc: BaseException) -> None:
        text = " ".join(str(exc).split())[:400] or type(exc).__name__
        self.data["errors"].append(f"{where}: {type(exc).__name__}: {text}")

    def write(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        files.atomic_write(self.path, json.dumps(self.data, indent=1) + "\n")


# --- the run ----------------------------------------------------------------------------------

def rendezvous(folder: Path, task: Task, timeout_s: float) -> Any:
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
        cuda = not self.plan.get("force_cpu") and has_cuda()
        binary = nccl_tests_binary() if cuda else None
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
            self.record.data["device"] = gpu_identity(self.device.index)
        self.tool = self.layout.tool(everyone)
        binary = binary if self.tool == NCCL_TESTS_TOOL else None
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
                "nccl": nccl, "tasks": self.task.world, "nodes": self.layout.nodes,
                "ranks": self.layout.ranks, "unmeasured": self.layout.unmeasured,
                "rounds": rounds, "params": dict(self.params), "phases": [],
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

    def gpu_figures(self) -> None:
        p = self.params
        figures = self.record.data["figures"]
        for dtype in p["dtypes"]:
            try:
                figures[f"matmul_{dtype}_tflops"] = probe.matmul_tflops(
                    self.device, dtype, int(p["matmul_n"]), float(p["window_s"]))
            except Exception as exc:  # fp8 where GPU or PyTorch lack it; a broken GPU
                self.record.error(f"matmul {dtype}", exc)
        try:
            figures["memory_gbps"] = probe.memory_gbps(self.device, int(p["memory_bytes"]),
                                                       float(p["window_s"]))
        except Exception as exc:
            self.record.error("memory", exc)

    def make_groups(self, phase: Phase) -> list[tuple[list[int], Any]]:
        """The process groups of a phase, each group's ranks with it. Every task creates every
        group, in the same order (torch.distributed.new_group's rule)."""
        import torch.distributed as dist

        out = []
        for nodes in phase.groups:
            ranks = self.layout.group_ranks(nodes)
            if self.backend == "gloo" and len(ranks) == self.task.world:
                out.append((ranks, None))  # the default group
            else:
                out.append((ranks, dist.new_group(ranks, backend=self.backend)))
        return out

    def allreduce(self, phase: Phase) -> None:
        for nodes, (ranks, group) in zip(phase.groups, self.make_groups(phase), strict=True):
            if self.task.rank not in ranks:
                continue
            result: dict[str, Any] = {"phase": phase.name, "nodes": list(nodes),
                                      "ranks": len(ranks), "sizes": [], "error": None}
            try:
                p = self.params
                result["sizes"] = probe.allreduce_sweep(
                    self.device, group, len(ranks), p["sizes"], int(p["iters"]),
                    int(p["warmup"]))
            except Exception as exc:
                result["error"] = f"{type(exc).__name__}: {' '.join(str(exc).split())[:400]}"
            if self.task.rank == ranks[0]:
                self.record.data["groups"].append(result)

    def write_nccl_tests_groups(self, plan_phases: Sequence[Phase]) -> None:
        lines = [f"{ph.name} {i} {len(g)} {','.join(g)}\n"
                 for ph in plan_phases for i, g in enumerate(ph.groups)]
        path = self.folder / NCCL_TESTS_DIR / GROUPS_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        files.atomic_write(path, "".join(lines))

    def run(self) -> None:
        import torch.distributed as dist

        self.start()
        with self.phase("gpus"):
            if self.measured:
                self.gpu_figures()
        rounds = self.plan.get("rounds") or default_rounds(len(self.layout.nodes))
        plan_phases = phases(self.layout.nodes, int(rounds))
        if self.tool == NCCL_TESTS_TOOL:
            if self.task.rank == 0:
                self.write_nccl_tests_groups(plan_phases)
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
