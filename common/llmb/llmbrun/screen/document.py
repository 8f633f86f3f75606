"""What screen.json holds, and the files it is made of: the screen's document types.

Each record that travels between the screen's modules (the job's tasks' files, a node with its
GPUs, a pair, what the screen named, the comparison with the baseline) is one TypedDict here,
the same one its writer fills and its readers take; `checked` holds a screen.json read back
to ScreenDocument (llmb.shared.records) before any of it is used. The task's own files are
untrusted input: what they may hold in any form (a raw figure, nvidia-smi's strings) is
`object` and is narrowed where it is read (llmb.llmbrun.screen.results).
"""

from __future__ import annotations

from typing import Annotated, TypedDict

from llmb.shared import records
from llmb.shared.records import Bound

MAX_NODES = 16_384  # nodes of one screen (the largest clusters have some thousands)
MAX_GPUS = 64  # tasks (GPUs) of one node
MAX_FIGURE = 1e9  # the most a figure's magnitude may be: GB/s, TFLOPS, watts, seconds, ratios
NAME = Bound(text=256)  # a node's name, a figure's, a verdict, a stamp
Name = Annotated[str, NAME]
Names = Annotated[list[Name], Bound(items=MAX_NODES)]
# A number that is drawn, divided and printed: finite (records) and within +-MAX_FIGURE (a
# GPU's 1e308 overflows the plot's arithmetic); its repeats, and a baseline's [value, error]
Figure = Annotated[float, Bound(number=MAX_FIGURE)]
Figures = Annotated[list[Figure], Bound(items=4096)]


class _GpuKeys(TypedDict):
    figures: Annotated[dict[Name, Figure], Bound(items=MAX_GPUS)]


class GpuHealth(TypedDict, total=False):
    """A GPU's health facts (llmb.llmbrun.screen.health.facts of what nvidia-smi said)."""

    ecc_uncorrected: int | None
    retired_pages_pending: bool | None
    remapped_rows_pending: bool | None
    remapped_rows_failed: bool | None
    throttle: list[Name] | None
    power_limit_w: Figure | None
    power_default_w: Figure | None
    clock_sm_mhz: int | None
    clock_max_sm_mhz: int | None
    pcie_gen: list[int | None]
    pcie_width: list[int | None]
    temperature_c: int | None
    sampled: Name | None
    unknown_fields: list[Name]


class ScreenGpu(_GpuKeys, total=False):
    """One GPU (task) of a node in screen.json, with its identity (the task's `device`)."""

    rank: int
    local_rank: int | None
    index: int | None
    name: Name | None
    uuid: Name | None
    pci_bus_id: Name | None
    serial: Name | None
    verdict: Name | None
    error: str | None
    notes: list[str]
    reasons: list[str]
    repeats: Annotated[dict[Name, Figures], Bound(items=MAX_GPUS)]
    health: GpuHealth


class Size(TypedDict):
    """One size of an all-reduce sweep."""

    bytes: int
    busbw_gbps: Figure
    algbw_gbps: Figure


class Allreduce(TypedDict, total=False):
    """A group's all-reduce (`summary`), as a node's own, a pair's or all nodes'; as a task
    reports it, with its phase."""

    phase: Name
    sizes: Annotated[list[Size], Bound(items=64)]
    ranks: int | None
    bytes: int | None
    busbw_gbps: Figure | None
    algbw_gbps: Figure | None
    error: str | None
    verdict: Name | None
    link: bool
    floor: Figure | None
    peers_median: Figure | None
    repeats: Figures  # the figure at the largest size, repeated


class _NodesKeys(TypedDict):
    nodes: Names


class Group(_NodesKeys, Allreduce, total=False):
    """A group's all-reduce as a task reports it, and all nodes' in screen.json."""


class _PairKeys(_NodesKeys):
    round: int


class Pair(_PairKeys, Allreduce, total=False):
    """A pair of nodes and its all-reduce (screen.json's `pairs`)."""


# A node's pair: {"round", "with" (its partner), "busbw_gbps"}
NodePair = TypedDict("NodePair", {"round": int, "with": Name, "busbw_gbps": Figure | None})


class _NodeKeys(TypedDict):
    node: Name
    gpus: Annotated[list[ScreenGpu], Bound(items=MAX_GPUS)]
    pairs: Annotated[list[NodePair], Bound(items=MAX_NODES)]
    reasons: list[str]
    verdict: Name | None


class ScreenNode(_NodeKeys, total=False):
    """One node of screen.json (its partner in each pair under `with`)."""

    error: str | None
    allreduce: Allreduce | None
    leaf: Name | None  # its leaf switch, where Slurm's topology gives it


class _NamedKeys(TypedDict):
    kind: Name
    name: Name
    why: str


class Named(_NamedKeys, total=False):
    """What the screen named: a GPU, a node, a link, the cluster (what report prints of it)."""

    figure: Name | None
    value: Figure | None
    floor: Figure | None
    expected: Figure | None
    peers_median: Figure | None
    explained_by: list[str]  # what the health facts say explains it
    again: Figure | None  # the figure the confirm pass measured of it (None: not measured)


class Round(TypedDict):
    name: Name
    wall_s: Figure


class Scheduled(TypedDict):
    """One phase of all-reduces as the job's tasks ran it: its name and its groups of nodes
    (llmb.container.screenrun)."""

    name: Name
    groups: Annotated[list[Names], Bound(items=MAX_NODES)]


class Confirm(TypedDict):
    """screen.json's `confirm`: the confirm pass of the same job (llmb.llmbrun.screen.confirm):
    the nodes measured again (the peers among them: healthy nodes, the pass's own reference),
    how many named elements it measured again, those it cleared (the first pass's entries,
    each with `again`), its phases' wall times, and why it left no verdict (None: it did)."""

    nodes: Names
    peers: Names
    measured: int
    cleared: list[Named]
    rounds: list[Round]
    error: str | None


class _ExpectationKeys(TypedDict):
    expected: Figure
    tolerance: Figure
    floor: Figure


class Expectation(_ExpectationKeys, total=False):
    """What gpus.yaml expects of a figure, and the floor it is held to (the plot draws it)."""

    source: str


class Params(TypedDict, total=False):
    """What a task measures, and how (llmb.llmbrun.screen.job's GPU_PARAMS, CPU_PARAMS)."""

    sizes: list[int]
    iters: int
    warmup: int
    window_s: Figure
    matmul_n: int
    memory_bytes: int
    dtypes: list[Name]
    repeats: int
    allreduce_repeats: int
    allreduce_window_s: Figure
    serial: bool


class Peers(TypedDict):
    """How a figure is held to its peers: K robust sigmas, the mode's fixed tolerance."""

    k: Figure
    tolerance: Figure | None


class NodeTransport(TypedDict):
    """A node's network between nodes as NCCL said (llmb.llmbrun.screen.transport)."""

    transport: Name
    networks: list[Name]
    channels: list[Name]
    plugin: str | None


# llmb.llmbrun.screen.precision.Resolution.as_dict: its figure, kind and numbers
Resolution = dict[Name, Figure | int | str]


class BaselineFigure(TypedDict):
    """One figure as a baseline keeps it: the noise pooled over its repeats, their most,
    and each element's value and relative standard error (null without repeats)."""

    noise: Figure | None
    repeats: int
    values: dict[Name, Annotated[list[Figure | None], Bound(items=2)]]


class Below(TypedDict):
    """An element of a figure below its own baseline more than the rest of the cluster."""

    element: str
    ratio: Figure
    others: Figure
    threshold: Figure
    value: Figure
    baseline: Figure


class _FigureComparisonKeys(TypedDict):
    figure: Name
    elements: int
    ratio: Figure
    threshold: Figure
    dropped: bool
    baseline_median: Figure
    median: Figure
    below: list[Below]
    new: list[str]


class FigureComparison(_FigureComparisonKeys, total=False):
    """One figure now against its baseline (llmb.llmbrun.screen.baseline.compare_figure):
    `resolves`, the drop of one element that is named with 95 % probability."""

    kind: Name  # gpu | node | network | link | all
    resolves: Figure


class Comparison(TypedDict):
    """screen.json's `baseline`: what was compared with what, and how it came out."""

    path: str
    screen: Name | None
    saved: Name | None
    comparable: bool
    why_not: str | None
    changed: list[str]
    figures: list[FigureComparison]


class _ScreenKeys(TypedDict):
    mode: Name  # gpu | cpu
    gpus_per_node: int
    backend: Name | None  # nccl | gloo
    measured_by: Name | None  # torch.distributed | nccl-tests all_reduce_perf
    nodes: Annotated[list[ScreenNode], Bound(items=MAX_NODES)]
    pairs: Annotated[list[Pair], Bound(items=MAX_NODES * 8)]
    rounds: list[Round]
    named: list[Named]
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
    params: Params | None
    all_nodes: Group | None
    expectations: dict[Name, Expectation]
    peers: Peers
    stamp: Name  # llmb.shared.clock.stamp(): the screen's folder
    created: Name  # llmb.shared.clock.iso()
    job_id: Name
    job_state: Name
    smoke: bool
    image: str | None
    output: str  # the job's output file
    resolution: list[Resolution]  # per figure measured in repeats
    transport: dict[Name, NodeTransport] | None  # per node: NCCL's network between nodes (GPU)
    driver: Name | None  # the GPU driver (nvidia-smi), None on the CPU
    baseline: Comparison  # llmb.llmbrun.screen.baseline.compare: held to which, and how
    saved_baseline: str  # --save-baseline: where this screen was kept as the baseline
    stragglers: Annotated[list[Straggler], Bound(items=4096)]  # each figure's slowest
    confirm: Confirm  # the confirm pass, where the first pass named something to measure again
    topology: str  # where each node's leaf switch came from, or why there is one tier


class RunInfo(TypedDict, total=False):
    """What task 0 says of the run (llmb.container.screenrun's description)."""

    mode: Name
    backend: Name | None
    tool: Name | None
    torch: Name | None
    nccl: Name | None
    driver: Name | None
    tasks: int
    nodes: Names
    ranks: Annotated[dict[Name, list[int]], Bound(items=MAX_NODES)]
    unmeasured: Annotated[dict[Name, str], Bound(items=MAX_NODES)]
    rounds: int
    params: Params
    phases: list[Round]
    schedule: Annotated[list[Scheduled], Bound(items=1024)]  # the all-reduce phases run


class Device(TypedDict, total=False):
    """A task's GPU: its index, name, UUID, PCI bus id, serial and driver
    (llmb.container.devices.gpu_identity)."""

    index: int | None
    name: Name | None
    uuid: Name | None
    pci_bus_id: Name | None
    serial: Name | None
    driver: Name | None


class _RankKeys(TypedDict):
    rank: int
    node: Name


class RankRecord(_RankKeys, total=False):
    """What one task writes (llmb.container.screenrun.Record); a file that is not one is
    skipped, as a task that wrote nothing."""

    local_rank: int | None
    host: Name
    device: Device | None
    figures: Annotated[dict[Name, object], Bound(items=MAX_GPUS)]  # numbers are kept
    repeats: Annotated[dict[Name, object], Bound(items=MAX_GPUS)]  # lists of numbers are kept
    health: dict[Name, object] | None  # nvidia-smi's fields as the task read them
    errors: list[str]
    groups: list[Group]
    run: RunInfo


class Straggler(TypedDict):
    """One of a figure's slowest elements (llmb.llmbrun.screen.stragglers): its value, the
    figure's median, how far below it (0.05 is 5 %), and whether beyond the acceptance's
    tolerance."""

    figure: Name
    kind: Name  # gpu | node | network | link
    element: Name
    value: Figure
    median: Figure
    below: Figure
    beyond: bool


class _VerdictKeys(TypedDict):
    named: list[Named]
    suspects: list[str]


class Verdicts(_VerdictKeys, total=False):
    """What the judge named, the nodes that did not pass, and each figure's slowest
    (llmb.llmbrun.screen.judge)."""

    stragglers: list[Straggler]


def checked(data: object) -> ScreenDocument:
    """data held to ScreenDocument; records.BadRecord (naming the field) when it is not one."""
    return records.check(ScreenDocument, data)


