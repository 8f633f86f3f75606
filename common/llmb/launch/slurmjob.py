"""What a Slurm job of llmb asks of Slurm: one settings type, one GRES rule, one set of directives.

Every job llmb submits (a benchmark through nemo-run's SlurmExecutor, llmb-run's screen and
preflight) is charged to an account, runs in a partition and requests its GPUs one way:

- `SlurmSettings`: the account, the partition and the GPU request as GRES (`Gres`, parsed into
  type and count) or None where the cluster needs none (then `--gpus-per-node=N`). The cluster
  config (launcher.slurm), launch.sh's variables (SBATCH_ACCOUNT, SBATCH_PARTITION,
  SBATCH_GPUS_PER_NODE) and the installer all end in it;
- `parse_gres`: the GRES rule, `gpu:N` or `gpu:TYPE:N`, N the GPU type's GPUs per node (every
  task drives one GPU of a whole node); `GresError` says what is wrong in words the caller puts
  after the field and its value;
- `directives`: the job's GPU, task, exclusive, segment and placement options, the default
  segment decided here (above a GPU type's NVLink domain, the largest divisor of the node
  count that fits in one). `Directives.argv()` is sbatch's command line; the benchmark hands
  the same fields to nemo-run, which writes them as #SBATCH lines.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from llmb.launch.placement import Placement
from llmb.recipes.catalog import GpuType
from llmb.shared.errors import LlmbError

GRES_FORMS = "gpu:N or gpu:TYPE:N"
_GRES = re.compile(r"gpu(?::([A-Za-z0-9_.-]+))?:([1-9][0-9]{0,2})")
OptionValue = str | int | bool  # an sbatch option's value; True: an option without one


class GresError(LlmbError):
    """A GRES request that breaks the rule: str() is what is wrong and what works, written to
    follow `FIELD=VALUE ` in the caller's one line (which may add its own way out)."""


@dataclass(frozen=True)
class Gres:
    """A GPU GRES request per node: `gpu:8` (count only) or `gpu:h100:8` (type and count)."""

    count: int
    type: str | None = None

    def __str__(self) -> str:
        return f"gpu:{self.type}:{self.count}" if self.type else f"gpu:{self.count}"


def parse_gres(value: str, gpu: GpuType | None, per_node: int | None = None) -> Gres:
    """The GRES of `value`; GresError when it is not `gpu:N`/`gpu:TYPE:N` or (`gpu` given) N is
    not the GPUs per node: the GPU type's, or `per_node` where the job sets its own."""
    m = _GRES.fullmatch(value.strip())
    if m is None:
        raise GresError(f"is not a GPU GRES request; use {GRES_FORMS} (e.g. gpu:8)")
    gres = Gres(int(m.group(2)), m.group(1))
    need = per_node or (gpu.gpus_per_node if gpu is not None else None)
    if gpu is not None and gres.count != need:
        kind = f"gpu:{gres.type}:" if gres.type else "gpu:"
        raise GresError(f"asks for {gres.count} GPUs per node, but a {gpu.name} job runs "
                        f"{need} tasks per node, each on one GPU: use {kind}{need}")
    return gres


@dataclass(frozen=True)
class SlurmSettings:
    """Where a job goes and how it requests GPUs: the account, the partition, the GRES."""

    account: str
    partition: str
    gres: Gres | None = None  # None: the job requests --gpus-per-node

    def record(self) -> dict[str, str | None]:
        """As cluster_config.yaml's launcher.slurm holds them (account, partition, gres)."""
        return {"account": self.account, "partition": self.partition,
                "gres": str(self.gres) if self.gres else None}


@dataclass(frozen=True)
class Directives:
    """A job's GPU, task, exclusive, segment and placement options (`directives`)."""

    nodes: int
    tasks_per_node: int
    gres: str | None  # --gres, where the settings name one
    gpus_per_node: int | None  # --gpus-per-node, where they do not
    exclusive: bool  # --exclusive --mem=0
    segment: int | None
    placement: dict[str, OptionValue] = field(default_factory=dict)  # long option -> value

    def argv(self) -> list[str]:
        """These directives as sbatch's command-line options."""
        return self.request_argv() + self.placement_argv()

    def request_argv(self) -> list[str]:
        """The nodes, tasks and GPUs: --nodes, --ntasks-per-node, --gres or --gpus-per-node,
        and --exclusive --mem=0 for an exclusive job."""
        out = [f"--nodes={self.nodes}", f"--ntasks-per-node={self.tasks_per_node}",
               f"--gres={self.gres}" if self.gres else f"--gpus-per-node={self.gpus_per_node}"]
        return out + (["--exclusive", "--mem=0"] if self.exclusive else [])

    def placement_argv(self) -> list[str]:
        """The placement options, then --segment where the job uses one."""
        out = [f"--{key.replace('_', '-')}" + ("" if value is True else f"={value}")
               for key, value in self.placement.items()]
        return out + ([f"--segment={self.segment}"] if self.segment is not None else [])


def segment_size(nodes: int, max_nodes: int | None) -> int | None:
    """Above max_nodes nodes (an NVLink domain), the largest divisor of the node count that is
    <= max_nodes; else None (no --segment)."""
    if not max_nodes or nodes <= max_nodes:
        return None
    return max(d for d in range(1, max_nodes + 1) if nodes % d == 0)


def directives(gpu: GpuType, settings: SlurmSettings, nodes: int, tasks_per_node: int,
               exclusive: bool, place: Placement, gpus_per_node: int | None = None
               ) -> Directives:
    """The options of a job on `nodes` nodes of this GPU type: the GRES where the settings
    name one, else every GPU of the node (`gpus_per_node` where the job sets its own), the
    placement given, and the segment given or the GPU type's default."""
    segment = place.segment if place.segment is not None else \
        segment_size(nodes, gpu.segment_max_nodes)
    return Directives(nodes, tasks_per_node,
                      str(settings.gres) if settings.gres else None,
                      None if settings.gres else gpus_per_node or gpu.gpus_per_node,
                      exclusive, segment, dict(place.sbatch_options()))
