"""Why a run failed: the lines Slurm, NCCL, PyTorch, Megatron and NeMo print, classified.

llmb.analysis.timing hands over every line that follows a run's last step line and holds one of the
GATES (a failure ends training, so what happened is written after the last step; a message
followed by more steps did not stop the run). `classify` turns such a line into Evidence;
`Findings` keeps what one stretch of log said, bounded however many ranks repeat it; `explain`
picks the root cause and writes the one-line reason.

The lines, as those programs print them (srun --label's `12: ` and PyTorch's `[rank12]:`
prefixes allowed), shortened here with `...`:

    slurmstepd: error: *** JOB 2201360 ON nid001301 CANCELLED AT 2025-04-11T16:18:45 DUE TO
        TIME LIMIT ***           (also PREEMPTION, JOB REQUEUE, NODE FAILURE, SEE SLURMCTLD ...;
                                  none of those: cancelled)
    srun: error: Node failure on nid001503
    srun: error: nid001240: tasks 32-39: Exited with exit code 1          (or Killed, Out Of Memory)
    slurmstepd: error: Detected 1 oom_kill event in StepId=2201361.0. Some of the step tasks ...
    [rank13]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.50 GiB. ...
    [rank37]:[E411 15:31:12.123456789 ProcessGroupNCCL.cpp:616] [Rank 37] Watchdog caught
        collective operation timeout: WorkNCCL(SeqNum=4242, OpType=ALLREDUCE, ...) ran for ...
    NVONLY RSBAR:SM 12 [3]:expecting 1337 got 1336          (TransformerEngine userbuffers)
    RuntimeError: Rank 13, node nid001420, device 5, iteration 42: Unexpected result ...
        (message='found NaN in local grad norm for bucket #0 in backward pass ...')

Suspect nodes are the ones a fault line names (a task's non-zero exit, an OOM, a node failure,
a NaN), never the batch host a time-limit or cancel line names.
Standard library only: it runs inside the log scan.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# Substrings that every line classified below contains (one of them). The scan searches only
# these, and only after the last step line, so looking for reasons costs next to nothing.
GATES = (b"rror", b"atchdog", b"xpecting")

# Kinds, root cause first: an out-of-memory rank makes the others time out in NCCL, a dead
# node makes its peers time out, a hang runs into the time limit. label: what people read.
KINDS = {
    "nan": "NaN/Inf in the gradients",
    "oom": "out of memory",
    "node_failure": "node failure",
    "userbuffers": "userbuffers hang (TP communication overlap)",
    "nccl_timeout": "NCCL timeout (collective hung)",
    "time_limit": "time limit",
    "preempted": "preempted",
    "cancelled": "cancelled",
    "requeued": "requeued",
    "exception": "error",
    "task_exit": "task exit",
}
ENDINGS = ("time_limit", "preempted", "cancelled")  # what ends a hung job: named after the cause
TEXT_MAX = 200  # characters of one evidence line kept for the reason
NODES_MAX = 32

# srun --label's `12: `, PyTorch's `[rank12]:`, then a glog header `[E411 15:31:12.1234 f.cpp:616]`
_PREFIX = re.compile(r"^(?:\s*\d{1,9}:\s)?(?:\[rank\d{1,9}\]:\s?)?"
                     r"(?:\[[EWIF]\d{4} [\d:.]{1,40} [^\]]*\]\s*)?")
_NODE = r"([A-Za-z0-9][A-Za-z0-9._-]*)"
# (the time stamp holds no `,`: one that could would let the `,` after it start anywhere in it,
# each start reading to the line's next `*`: time quadratic in the line's length)
_SLURM = re.compile(r"\*\*\* (?:JOB|STEP) \S+ (?:ON " + _NODE + r" )?CANCELLED AT [^\s,]+"
                    r"(?: DUE TO ([A-Z ]+?))?(?:,[^*]*)? \*\*\*")
_STEPD_STUCK = re.compile(r"\*\*\* (?:JOB|STEP) \S+ STEPD TERMINATED ON " + _NODE)
_NODE_FAILURE = re.compile(r"srun: error: Node failure on " + _NODE)
_TASKS = re.compile(r"srun: error: " + _NODE + r": tasks? [\d,\-\[\]]+: (.+)")
_SLURM_OOM = re.compile(r"oom[-_]kill event")
_OOM = re.compile(r"out of memory|OutOfMemoryError", re.I)
_GRAD = re.compile(r"found (?:NaN|Inf) in local grad norm|Unexpected result \S*(?:nan|inf)", re.I)
_MEGATRON_NODE = re.compile(r"\bnode:? " + _NODE)
_WATCHDOG = re.compile(r"Watchdog caught collective operation timeout|watchdog (?:got stuck|"
                       r"thread terminated)|Heartbeat monitor timed out", re.I)
# (one capital before BAR, not a run of them: found where a run would be, and a line of
# capitals is not tried from each of them to its end)
_USERBUFFERS = re.compile(r"[A-Z]BAR:SM \d{1,9} \[\d{1,9}\]:expecting -?\d{1,20} got -?\d")
_EXCEPTION = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?[A-Za-z_]\w*(?:Error|Exception)(?::|$)")
_EXIT_CODE = re.compile(r"Exited with exit code (\d{1,10})")  # (a code: 0-255)


@dataclass(frozen=True)
class Evidence:
    """One classified line: its kind, the text, and the nodes it names (fault: they are
    suspects, not bystanders such as the batch host named in a time-limit line)."""

    kind: str
    text: str
    nodes: tuple[str, ...] = ()
    fault: bool = False


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= TEXT_MAX else text[: TEXT_MAX - 3] + "..."


def classify(line: str) -> Evidence | None:
    """The Evidence one log line gives, or None when it is not about a failure."""
    text = _PREFIX.sub("", line.strip(), count=1).strip()
    if not text:
        return None
    if m := _SLURM.search(text):
        node, why = m.group(1), (m.group(2) or "").strip()
        if why.startswith("NODE FAIL"):
            return Evidence("node_failure", _short(text), (node,) if node else (), False)
        kind = {"TIME LIMIT": "time_limit", "PREEMPTION": "preempted",
                "JOB REQUEUE": "requeued"}.get(why, "cancelled")
        return Evidence(kind, _short(text))
    if m := _STEPD_STUCK.search(text):
        return Evidence("node_failure", _short(text), (m.group(1),), True)
    if m := _NODE_FAILURE.search(text):
        return Evidence("node_failure", _short(text), (m.group(1),), True)
    if m := _TASKS.search(text):  # srun names the node and what its tasks did
        node, what = m.group(1), m.group(2).strip()
        if what.lower().startswith("out of memory"):
            return Evidence("oom", _short(text), (node,), True)
        code = _EXIT_CODE.search(what)
        fault = (code is not None and code.group(1) != "0") or (
            code is None and not what.startswith(("Killed", "Terminated")))
        return Evidence("task_exit", _short(text), (node,), fault)
    if _SLURM_OOM.search(text):
        return Evidence("oom", _short(text))
    if _GRAD.search(text):
        m = _MEGATRON_NODE.search(text)
        return Evidence("nan", _short(text), (m.group(1).rstrip(",."),) if m else (), True)
    if _OOM.search(text) and ("rror" in text or "CUDA" in text):
        return Evidence("oom", _short(text))
    if _WATCHDOG.search(text):
        return Evidence("nccl_timeout", _short(text))
    if _USERBUFFERS.search(text):
        return Evidence("userbuffers", _short(text))
    if _EXCEPTION.match(text):
        return Evidence("exception", _short(text))
    return None


@dataclass
class Seen:
    """What one kind of evidence said: its first and last line, how often, which nodes."""

    first: Evidence
    last: Evidence
    count: int = 1
    nodes: dict[str, bool] = field(default_factory=dict)  # node -> named as a fault


@dataclass
class Findings:
    """Evidence of one stretch of log (after the last step, or before a restart)."""

    kinds: dict[str, Seen] = field(default_factory=dict)

    def add(self, ev: Evidence) -> None:
        seen = self.kinds.get(ev.kind)
        if seen is None:
            seen = self.kinds[ev.kind] = Seen(ev, ev, 0)
        seen.count += 1
        seen.last = ev
        for node in ev.nodes:
            if len(seen.nodes) < NODES_MAX or node in seen.nodes:
                seen.nodes[node] = seen.nodes.get(node, False) or ev.fault

    def merge(self, other: Findings) -> None:
        for kind, seen in other.kinds.items():
            mine = self.kinds.get(kind)
            if mine is None:
                self.kinds[kind] = Seen(seen.first, seen.last, seen.count, dict(seen.nodes))
                continue
            mine.count += seen.count
            mine.last = seen.last
            for node, fault in seen.nodes.items():
                if len(mine.nodes) < NODES_MAX or node in mine.nodes:
                    mine.nodes[node] = mine.nodes.get(node, False) or fault

    def __bool__(self) -> bool:
        return bool(self.kinds)

    def primary(self) -> tuple[str, Seen] | None:
        """The root cause: the first kind in KINDS order that was seen."""
        for kind in KINDS:
            if kind in self.kinds:
                return kind, self.kinds[kind]
        return None

    def suspects(self) -> list[str]:
        """Nodes a fault line named; when the only evidence is a task's exit, its nodes."""
        nodes = {n for s in self.kinds.values() for n, fault in s.nodes.items() if fault}
        found = self.primary()
        if not nodes and found and found[0] == "task_exit":
            nodes = set(found[1].nodes)
        if not nodes and found and found[0] == "node_failure":
            nodes = set(found[1].nodes)  # only the batch host's stepd line named one
        return sorted(nodes)[:NODES_MAX]

    def summary(self) -> str:
        """`label: evidence line`; for an exception the most telling line is the last one
        (the chained exception that ended the process), for the rest the first."""
        found = self.primary()
        if found is None:
            return ""
        kind, seen = found
        ev = seen.last if kind == "exception" else seen.first
        text = ev.text if kind == "task_exit" else f"{KINDS[kind]}: {ev.text}"
        ended = next((k for k in ENDINGS if k in self.kinds and k != kind), None)
        return text + (f" (then ended by the {KINDS[ended]})" if ended else "")


def explain(findings: Findings, *, complete: bool, last: int | None, final: int | None,
            steps: int, first: int = 0) -> str | None:
    """The reason for a run's outcome in one line (None when there is nothing to say); last
    and final are step indices, named as the log numbers them (its first iteration: first)."""
    if complete:
        if not findings:
            return None
        return f"finished all {final + 1 if final is not None else steps} iterations, then " \
               f"{findings.summary()}"
    where = ("before the first training step" if last is None else
             f"at iteration {last + first}" + (f" of {final + first}" if final is not None
                                               else ""))
    if not findings:
        if last is None:
            return "no training step in the log and no error line after the start-up"
        return f"stopped {where}; nothing after the last step line says why"
    return f"stopped {where}: {findings.summary()}"
