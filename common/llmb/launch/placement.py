"""Node placement of a Slurm job: which nodes, reservation, QOS, segment, extra sbatch options.

Two fronts give the same five settings plus extra sbatch options, and both are validated here:

    llmb-run single|bulk|rerun|preflight  --nodelist --exclude --reservation --qos --segment
                                          --slurm-arg=--KEY=VALUE (repeatable)
    launch.sh (environment)               LLMB_NODELIST LLMB_EXCLUDE LLMB_RESERVATION LLMB_QOS
                                          LLMB_SEGMENT LLMB_SLURM_ARGS='--KEY=VALUE ...'

The launch.sh names carry llmb's prefix on purpose. sbatch reads SBATCH_* variables itself
(SBATCH_RESERVATION, SBATCH_QOS, SBATCH_EXCLUSIVE, ...) and they OVERRIDE the #SBATCH lines of
the job script (sbatch(1), INPUT ENVIRONMENT VARIABLES), so a setting given that way would be
applied behind the script's back and never recorded. llmb therefore writes every placement
setting as an #SBATCH line (through nemo-run's SlurmExecutor), records it in the run manifest
and history, refuses SBATCH_* input variables it does not read itself (`sbatch_environment_
problem`), and removes the ones it does read (SBATCH_ACCOUNT, SBATCH_PARTITION,
SBATCH_GPUS_PER_NODE) from the environment sbatch runs in (`sbatch_environment`): the script is
the one place each setting lives. SBATCH_GPUS_PER_NODE shows why: launch.sh turns it into
`--gres=gpu:N`; left in sbatch's environment it also adds `--gpus-per-node=N`, and the job asks
for twice the GPUs a node has.

Every value must be safe on an #SBATCH line: sbatch splits those lines on blanks, honours quotes
and treats a backslash as an escape and an unquoted `#` as a comment, so values are limited to
what survives that unchanged, and control characters are refused. Standard library only: this
sits on launch.sh's validation path.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import shlex
from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, TypedDict, cast

from llmb.launch import hostlist
from llmb.shared import values
from llmb.shared.errors import UsageError
from llmb.shared.records import Bound

MAX_HOSTS = hostlist.MAX_NODES  # a node list that expands to more names is refused
MAX_VALUE_LEN = 1024

# launch.sh variable -> (llmb-run flag, Placement field)
ENV_VARS = {
    "LLMB_NODELIST": ("--nodelist", "nodelist"),
    "LLMB_EXCLUDE": ("--exclude", "exclude"),
    "LLMB_RESERVATION": ("--reservation", "reservation"),
    "LLMB_QOS": ("--qos", "qos"),
    "LLMB_SEGMENT": ("--segment", "segment"),
    "LLMB_SLURM_ARGS": ("--slurm-arg", "slurm_args"),
}

# Extra sbatch options a person may add with --slurm-arg / LLMB_SLURM_ARGS: site policy and
# scheduling options that change nothing llmb sets. True: the option takes a value.
SLURM_ARGS: dict[str, bool] = {
    "acctg-freq": True, "begin": True, "cluster-constraint": True, "clusters": True,
    "comment": True, "constraint": True, "contiguous": False, "core-spec": True,
    "cpu-freq": True, "cpus-per-task": True, "deadline": True, "delay-boot": True,
    "dependency": True, "gpu-bind": True, "gpu-freq": True, "gres-flags": True, "hint": True,
    "licenses": True, "mail-type": True, "mail-user": True, "mem-bind": True,
    "network": True, "nice": True, "power": True, "prefer": True, "priority": True,
    "profile": True, "reboot": False, "signal": True, "spread-job": False, "switches": True,
    "thread-spec": True, "tmp": True, "use-min-nodes": False, "wait-all-nodes": True,
    "wckey": True,
}
# sbatch options llmb sets itself (or that have their own flag): refused in --slurm-arg.
MANAGED_ARGS: dict[str, str] = {
    "account": "cluster_config.yaml slurm.account (launch.sh: SBATCH_ACCOUNT)",
    "partition": "cluster_config.yaml slurm.partition (launch.sh: SBATCH_PARTITION)",
    "nodes": "--scale (GPUs) and the GPUs per node (screen: --nodes)",
    "ntasks": "the GPUs per node", "ntasks-per-node": "the GPUs per node",
    "gpus": "the GPUs per node", "gpus-per-node": "the GPUs per node",
    "gpus-per-task": "the GPUs per node",
    "gres": "cluster_config.yaml slurm.gres (launch.sh: SBATCH_GPUS_PER_NODE)",
    "time": "TIME_LIMIT (--env TIME_LIMIT=...)", "mem": "llmb (--mem=0)",
    "exclusive": "llmb (jobs are exclusive)", "job-name": "llmb (the experiment name)",
    "output": "llmb (the experiments layout)", "error": "llmb (the experiments layout)",
    "open-mode": "llmb", "chdir": "llmb", "export": "llmb (the job inherits the environment)",
    "container-image": "the workload's image (RUN_CONF_IMAGE)",
    "container-mounts": "llmb", "array": "--repeats", "wrap": "llmb", "parsable": "llmb",
    "nodelist": "--nodelist", "exclude": "--exclude", "reservation": "--reservation",
    "qos": "--qos", "segment": "--segment", "requeue": "llmb", "no-requeue": "llmb",
}

# sbatch input environment variables (sbatch(1), Slurm 22.05) -> what to use instead. Those
# llmb reads itself are absent here (see READ_SBATCH_VARS).
READ_SBATCH_VARS = ("SBATCH_ACCOUNT", "SBATCH_PARTITION", "SBATCH_GPUS_PER_NODE")
_INSTEAD = {
    "SBATCH_RESERVATION": "LLMB_RESERVATION (llmb-run: --reservation)",
    "SBATCH_QOS": "LLMB_QOS (llmb-run: --qos)",
    "SBATCH_TIMELIMIT": "TIME_LIMIT",
    "SBATCH_CONSTRAINT": "LLMB_SLURM_ARGS='--constraint=...' (llmb-run: --slurm-arg)",
}
SBATCH_INPUT_VARS = (
    "SBATCH_ACCTG_FREQ", "SBATCH_ARRAY_INX", "SBATCH_BATCH", "SBATCH_CLUSTERS",
    "SBATCH_CONSTRAINT", "SBATCH_CONTAINER", "SBATCH_CORE_SPEC", "SBATCH_CPUS_PER_GPU",
    "SBATCH_DEBUG", "SBATCH_DELAY_BOOT", "SBATCH_DISTRIBUTION", "SBATCH_ERROR",
    "SBATCH_EXCLUSIVE", "SBATCH_EXPORT", "SBATCH_GET_USER_ENV", "SBATCH_GPU_BIND",
    "SBATCH_GPU_FREQ", "SBATCH_GPUS", "SBATCH_GPUS_PER_TASK", "SBATCH_GRES",
    "SBATCH_GRES_FLAGS", "SBATCH_HINT", "SBATCH_IGNORE_PBS", "SBATCH_INPUT", "SBATCH_JOB_NAME",
    "SBATCH_MEM_BIND", "SBATCH_MEM_PER_CPU", "SBATCH_MEM_PER_GPU", "SBATCH_MEM_PER_NODE",
    "SBATCH_NETWORK", "SBATCH_NO_KILL", "SBATCH_NO_REQUEUE", "SBATCH_OPEN_MODE",
    "SBATCH_OUTPUT", "SBATCH_OVERCOMMIT", "SBATCH_POWER", "SBATCH_PROFILE", "SBATCH_QOS",
    "SBATCH_REQ_SWITCH", "SBATCH_REQUEUE", "SBATCH_RESERVATION", "SBATCH_SIGNAL",
    "SBATCH_SPREAD_JOB", "SBATCH_THREAD_SPEC", "SBATCH_THREADS_PER_CORE", "SBATCH_TIMELIMIT",
    "SBATCH_USE_MIN_NODES", "SBATCH_WAIT", "SBATCH_WAIT_ALL_NODES", "SBATCH_WAIT4SWITCH",
    "SBATCH_WCKEY",
)

_NAME = r"[A-Za-z0-9][A-Za-z0-9._-]*"
_NAME_RE = re.compile(rf"{_NAME}(?:,{_NAME})*")
# What survives an #SBATCH line unchanged: printable ASCII without quotes, backslash, backquote.
_UNSAFE = re.compile(r"[^\x20-\x7e]|[\\'\"`]")


class PlacementRecord(TypedDict, total=False):
    """Placement.record(): the settings given, as the manifest, the history and a suite's
    record hold them (their values are validated again by `build` when read back)."""

    nodelist: Annotated[str, Bound(text=MAX_VALUE_LEN)]
    exclude: Annotated[str, Bound(text=MAX_VALUE_LEN)]
    reservation: Annotated[str, Bound(text=MAX_VALUE_LEN)]
    qos: Annotated[str, Bound(text=MAX_VALUE_LEN)]
    segment: int
    slurm_args: Annotated[list[Annotated[str, Bound(text=MAX_VALUE_LEN)]], Bound(items=64)]


class PlacementError(UsageError):
    """A placement value that cannot be used; str() is one line naming the flag or variable."""


@dataclass(frozen=True)
class Placement:
    nodelist: str | None = None
    exclude: str | None = None
    reservation: str | None = None
    qos: str | None = None
    segment: int | None = None
    slurm_args: tuple[str, ...] = field(default_factory=tuple)  # "--KEY=VALUE" or "--KEY"

    def __bool__(self) -> bool:
        return any((self.nodelist, self.exclude, self.reservation, self.qos,
                    self.segment is not None, self.slurm_args))

    def record(self) -> PlacementRecord:
        """The settings given, for the manifest and the history ({} when none)."""
        out: dict[str, Any] = {}
        for name in ("nodelist", "exclude", "reservation", "qos", "segment"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        if self.slurm_args:
            out["slurm_args"] = list(self.slurm_args)
        return cast(PlacementRecord, out)

    def to_env(self) -> dict[str, str]:
        """The launch.sh variables that carry this placement (llmb-run -> launch.sh)."""
        env = {}
        for var, (_, name) in ENV_VARS.items():
            value = getattr(self, name)
            if name == "slurm_args":
                if value:
                    env[var] = shlex.join(value)
            elif value is not None:
                env[var] = str(value)
        return env

    def sbatch_options(self) -> dict[str, str | bool]:
        """sbatch long option (snake case, as nemo-run's SlurmExecutor names them) -> value;
        True for an option without a value. `segment` is left to the caller (it has its own
        executor field and a default on GB200)."""
        opts: dict[str, str | bool] = {}
        for name in ("nodelist", "exclude", "reservation", "qos"):
            value: str | None = getattr(self, name)
            if value is not None:
                opts[name] = value
        for arg in self.slurm_args:
            key, eq, value = arg[2:].partition("=")
            opts[key.replace("-", "_")] = value if eq else True
        return opts

    def sbatch_argv(self, segment: int | None = None) -> list[str]:
        """These settings as sbatch command-line options (`segment`: the size to use when
        none was given, e.g. GB200's default)."""
        args = [f"--{key.replace('_', '-')}" + ("" if value is True else f"={value}")
                for key, value in self.sbatch_options().items()]
        size = self.segment if self.segment is not None else segment
        return args + ([f"--segment={size}"] if size is not None else [])

    def with_excluded(self, nodes: Sequence[str], label: str = "--exclude-suspect"
                      ) -> tuple[Placement, tuple[str, ...]]:
        """This placement with `nodes` added to --exclude, and the nodes that were new;
        PlacementError (naming `label`) when one of them is in --nodelist."""
        already = expand_hostlist("--exclude", self.exclude) if self.exclude else []
        known = set(already)
        new = tuple(n for n in dict.fromkeys(nodes) if n not in known)
        if not new:
            return self, ()
        if self.nodelist:
            required = set(expand_hostlist("--nodelist", self.nodelist))
            clash = [n for n in new if n in required]
            if clash:
                raise PlacementError(f"{label}: node {clash[0]} is to be left out but "
                                     f"--nodelist={self.nodelist} requires it; give "
                                     "--nodelist without it")
        # written as Slurm folds a node list (gpu[0000-0199]): 200 suspects fit an #SBATCH line
        exclude = hostlist.compressed([*already, *new])
        return build(**{**dataclasses.asdict(self), "exclude": exclude}), new

    def merged(self, other: Placement) -> Placement:
        """This placement with every setting `other` gives replacing ours."""
        return dataclasses.replace(self, **{k: getattr(other, k) for k in other.record()})


# --- validation -------------------------------------------------------------------------------

def _safe(label: str, value: str) -> str:
    """Refuse what cannot sit on an #SBATCH line; label names the flag or variable."""
    if not value.strip():
        raise PlacementError(f"{label} is empty; give a value or leave it out")
    found = values.control_characters(value)
    if found:
        raise PlacementError(f"{label}={values.shown(value)} contains control character(s) "
                             f"{' '.join(found)}; remove them")
    if len(value) > MAX_VALUE_LEN:
        raise PlacementError(f"{label} is {len(value)} characters long; at most "
                             f"{MAX_VALUE_LEN} fit on an #SBATCH line")
    bad = sorted(set(_UNSAFE.findall(value)))
    if bad:
        raise PlacementError(f"{label}={values.shown(value)} contains {' '.join(bad)}, which "
                             "sbatch's #SBATCH parser would change (quotes, backslash) or which "
                             "is not ASCII; allowed: printable ASCII without ' \" \\ `")
    return value.strip()


def expand_hostlist(label: str, value: str, bound: int = MAX_HOSTS) -> list[str]:
    """The node names of a Slurm hostlist expression (`gpu[01-03],login1`), validated, each
    once; PlacementError when it names more than `bound` nodes (llmb.launch.hostlist counts
    them from the ranges before writing one)."""
    value = _safe(label, value)
    try:
        return hostlist.expand(label, value, bound)
    except hostlist.HostlistError as exc:
        raise PlacementError(str(exc)) from None


def _names(label: str, value: str, what: str) -> str:
    value = _safe(label, value)
    if not _NAME_RE.fullmatch(value):
        raise PlacementError(f"{label}={values.shown(value)} is not a {what} name; allowed: "
                             "letters, digits, . _ - (several separated by commas)")
    return value


def _segment(label: str, value: str | int) -> int:
    text = str(value).strip()
    if isinstance(value, bool) or not re.fullmatch(r"[1-9][0-9]{0,5}", text):
        plain = re.fullmatch(r"\+?0*([1-9][0-9]{0,5})", text)
        hint = f"; write it as {plain.group(1)}" if plain else ""
        raise PlacementError(f"{label}={values.shown(value)} is not a positive whole number "
                             f"of nodes (the segment size){hint}")
    return int(text)


def _slurm_arg(label: str, arg: str) -> str:
    arg = _safe(label, arg)
    if not arg.startswith("--"):
        raise PlacementError(f"{label}={values.shown(arg)} is not --KEY=VALUE; give the long "
                             "form of an sbatch option, e.g. --constraint=h100")
    key, eq, value = arg[2:].partition("=")
    if key in MANAGED_ARGS:
        raise PlacementError(f"{label}={values.shown(arg)}: llmb sets --{key} itself; use "
                             f"{MANAGED_ARGS[key]}")
    if key not in SLURM_ARGS:
        raise PlacementError(f"{label}={values.shown(arg)}: --{key} is not an sbatch option "
                             f"llmb passes on; allowed: {', '.join(sorted(SLURM_ARGS))}")
    if SLURM_ARGS[key] and not (eq and value.strip()):
        raise PlacementError(f"{label}={values.shown(arg)}: --{key} needs a value "
                             f"(--{key}=VALUE)")
    if not SLURM_ARGS[key] and eq:
        raise PlacementError(f"{label}={values.shown(arg)}: --{key} takes no value; give "
                             f"--{key}")
    return f"--{key}={value}" if eq else f"--{key}"


def build(*, nodelist: str | None = None, exclude: str | None = None,
          reservation: str | None = None, qos: str | None = None,
          segment: str | int | None = None, slurm_args: Sequence[str] = (),
          labels: Mapping[str, str] | None = None) -> Placement:
    """A validated Placement; `labels` maps each field to the flag or variable to name in a
    message (default: the llmb-run flag)."""
    name = {field_: flag for flag, field_ in ENV_VARS.values()}
    if labels:
        name.update(labels)
    nodes = expand_hostlist(name["nodelist"], nodelist) if nodelist is not None else []
    excluded = expand_hostlist(name["exclude"], exclude) if exclude is not None else []
    left_out = set(excluded)
    both = [n for n in nodes if n in left_out]
    if both:
        raise PlacementError(f"{name['nodelist']}={values.shown(nodelist)} and "
                             f"{name['exclude']}={values.shown(exclude)} both name "
                             f"{', '.join(both[:5])}; a node cannot be required and excluded")
    args = [_slurm_arg(name["slurm_args"], a) for a in slurm_args]
    keys = [a[2:].partition("=")[0] for a in args]
    twice = sorted({k for k in keys if keys.count(k) > 1})
    if twice:
        raise PlacementError(f"{name['slurm_args']} gives --{twice[0]} more than once; give "
                             "each option once")
    return Placement(
        nodelist=nodelist.strip() if nodelist is not None else None,
        exclude=exclude.strip() if exclude is not None else None,
        reservation=(_names(name["reservation"], reservation, "reservation")
                     if reservation is not None else None),
        qos=_names(name["qos"], qos, "QOS") if qos is not None else None,
        segment=_segment(name["segment"], segment) if segment is not None else None,
        slurm_args=tuple(args),
    )


def from_env(env: Mapping[str, str]) -> Placement:
    """The placement launch.sh was given through LLMB_* variables (unset or blank: none)."""
    given: dict[str, Any] = {}
    for var, (_, name) in ENV_VARS.items():
        raw = env.get(var)
        if raw is None or raw.strip() == "":
            continue
        if name == "slurm_args":
            found = values.control_characters(raw)
            if found:
                raise PlacementError(f"{var}={values.shown(raw)} contains control "
                                     f"character(s) {' '.join(found)}; remove them")
            try:
                given[name] = shlex.split(raw)
            except ValueError as err:
                raise PlacementError(f"{var}={values.shown(raw)} cannot be split into "
                                     f"options ({err}); give --KEY=VALUE items separated "
                                     "by blanks") from None
        else:
            given[name] = raw
    return build(**given, labels={n: v for v, (_, n) in ENV_VARS.items()})


def check_segment(placement: Placement, nodes: int, label: str = "--segment") -> None:
    """The segment size must divide the job's node count (Slurm allocates whole segments)."""
    if placement.segment is not None and nodes % placement.segment:
        raise PlacementError(f"{label}={placement.segment} does not divide the job's {nodes} "
                             f"node(s); give a divisor of {nodes}")


def check_nodelist_size(placement: Placement, nodes: int, label: str = "--nodelist") -> None:
    """A node list longer than the job cannot be satisfied (sbatch would refuse it)."""
    if placement.nodelist is not None:
        names = expand_hostlist(label, placement.nodelist)
        if len(names) > nodes:
            raise PlacementError(f"{label}={placement.nodelist} names {len(names)} nodes but "
                                 f"the job runs on {nodes}; name at most {nodes}")


# --- the environment sbatch runs in -----------------------------------------------------------

def sbatch_environment_problem(env: Mapping[str, str]) -> str | None:
    """One line for the first SBATCH_* input variable llmb does not read, else None.

    sbatch would apply such a variable over the job script's #SBATCH lines, unrecorded."""
    for var in SBATCH_INPUT_VARS:
        if var in env:
            instead = _INSTEAD.get(var, "LLMB_SLURM_ARGS (llmb-run: --slurm-arg) or unset it")
            return (f"{var}={values.shown(env[var])} is set; sbatch would apply it over the job "
                    f"script's #SBATCH lines without llmb recording it; unset it (use "
                    f"{instead})")
    return None


@contextlib.contextmanager
def sbatch_environment(environ: MutableMapping[str, str] | None = None) -> Iterator[None]:
    """While submitting: no SBATCH_* input variable in the environment, so the job script's
    #SBATCH lines are the only source of each setting; restored afterwards."""
    environ = os.environ if environ is None else environ
    saved = {k: environ.pop(k) for k in (*READ_SBATCH_VARS, *SBATCH_INPUT_VARS) if k in environ}
    try:
        yield
    finally:
        environ.update(saved)


def for_launch(env: Mapping[str, str], cluster_type: str, nodes: int) -> Placement:
    """launch.sh's placement (request validation): LLMB_* variables apply to Slurm only, and
    no SBATCH_* input variable may override the job script behind llmb's back."""
    place = from_env(env)
    if cluster_type != "slurm":
        given = next((v for v in ENV_VARS if (env.get(v) or "").strip()), None)
        if given:
            raise PlacementError(f"{given}={values.shown(env[given])} applies to "
                                 f"CLUSTER_TYPE=slurm only, not {cluster_type}; unset it")
        return place
    problem = sbatch_environment_problem(env)
    if problem:
        raise PlacementError(problem)
    check_segment(place, nodes, "LLMB_SEGMENT")
    check_nodelist_size(place, nodes, "LLMB_NODELIST")
    return place
