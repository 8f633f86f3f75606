"""A Slurm job of llmb-run's own (preflight, screen, and any later command that runs one): its
sbatch options, its submission, the wait with progress, its cancellation and its final state.

One owner, so that every such command behaves alike:
- options: the install's account and partition, the benchmark's GPU request (`--gres=<gres>`
  where cluster_config.yaml names one, else `--gpus-per-node=N`), the node count, the tasks
  per node, the time limit, the name and output file, `--exclusive --mem=0` where the job
  measures the nodes, then the placement flags (GB200's default segment as a benchmark gets
  it). They go on sbatch's command line, never through #SBATCH parsing, and sbatch's own
  SBATCH_* input variables are dropped from its environment so that these options are the
  job's;
- a placement that does not fit the node count is a bad option: UsageError, exit status 2,
  before anything is written or submitted;
- sbatch refusing the job is `SubmitRefused` (exit status 1, with sbatch's first line);
- the wait shows progress on stderr; at its time-out the job is cancelled and the wait says so
  (`Ended.timed_out`); Ctrl-C cancels the job too (a job of llmb-run's should not hold nodes
  for nobody: the screen's job holds them exclusively), says so, and goes on as an interrupt
  (exit status 130); so do SIGTERM and SIGHUP (a closed terminal, a `kill`), which the front
  raises as llmb.shared.front.Stopped, a KeyboardInterrupt (exit status 143, 129).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from llmb.launch import placement
from llmb.launch import slurmjob as directives
from llmb.launch.placement import Placement
from llmb.llmbrun.clusterconfig import ClusterConfig
from llmb.llmbrun.errors import PROG, RunError
from llmb.llmbrun.status import summary as jobs_summary
from llmb.shared import slurmquery
from llmb.shared.errors import UsageError
from llmb.shared.progress import Progress

SUBMIT_TIMEOUT_S = 60
CANCEL_TIMEOUT_S = 30
POLL_S = 2.0


class SubmitRefused(RunError):
    """sbatch refused the job (or printed no job id); str() says what it said."""


@dataclass(frozen=True)
class JobSpec:
    """What one of llmb-run's jobs asks of Slurm besides the install's settings."""

    name: str  # --job-name, e.g. llmb-screen
    nodes: int
    tasks_per_node: int
    time: str  # --time, Slurm's [D-]HH:MM:SS
    output: Path  # --output; %j stands for the job id
    exclusive: bool = False  # --exclusive --mem=0: the job measures whole nodes

    def output_of(self, job: str) -> Path:
        return Path(str(self.output).replace("%j", job))


@dataclass(frozen=True)
class Ended:
    """How the wait ended: the job's last known state, and whether it was cancelled at the
    time-out (then `info.final` may be False: Slurm had not ended it yet)."""

    info: slurmquery.JobInfo
    timed_out: bool


def gpu_request(cfg: ClusterConfig) -> str:
    """The GPU request every job of the install makes: its GRES, else --gpus-per-node."""
    slurm = cfg.require_slurm("a job of llmb-run's")
    return directives.directives(cfg.gpu, slurm, 1, 1, False, Placement()).request_argv()[2]


def check_placement(place: Placement, nodes: int) -> None:
    """UsageError (exit 2) when the placement flags cannot hold `nodes` nodes."""
    try:
        placement.check_nodelist_size(place, nodes)
        placement.check_segment(place, nodes)
    except placement.PlacementError as exc:
        raise UsageError(str(exc)) from None


def sbatch_options(cfg: ClusterConfig, spec: JobSpec, place: Placement) -> list[str]:
    """sbatch's options for the job: the install's account and partition, the job's nodes,
    tasks and GPUs as a benchmark asks for them (llmb.launch.slurmjob, which decides the
    default segment), the spec's time, name and output, then the placement flags."""
    slurm = cfg.require_slurm("a job of llmb-run's")
    ask = directives.directives(cfg.gpu, slurm, spec.nodes, spec.tasks_per_node,
                                spec.exclusive, place)
    return [f"--account={slurm.account}", f"--partition={slurm.partition}",
            *ask.request_argv(), f"--time={spec.time}", f"--job-name={spec.name}",
            f"--output={spec.output}", *ask.placement_argv()]


def sbatch_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The environment without sbatch's input variables: the options above are the job's."""
    drop = {*placement.READ_SBATCH_VARS, *placement.SBATCH_INPUT_VARS}
    return {k: v for k, v in environ.items() if k not in drop}


def _first_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[0] if lines else ""


def submit(script: Path, options: list[str]) -> str:
    """sbatch the script with these options; the job id, or SubmitRefused."""
    try:
        proc = subprocess.run(["sbatch", "--parsable", *options, str(script)],
                              capture_output=True, text=True, errors="replace",
                              timeout=SUBMIT_TIMEOUT_S, check=False, stdin=subprocess.DEVNULL,
                              env=sbatch_env(os.environ))
    except (OSError, subprocess.SubprocessError) as exc:
        raise SubmitRefused(f"sbatch could not run: {exc}") from None
    if proc.returncode != 0:
        raise SubmitRefused(_first_line(proc.stderr) or f"sbatch exit {proc.returncode}")
    job = proc.stdout.strip().split(";")[0]
    if not slurmquery.JOB_ID.fullmatch(job):
        raise SubmitRefused(f"sbatch printed no job id ({job[:40]!r})")
    return job


def cancel(job: str) -> None:
    """scancel the job; a job that has ended meanwhile is no error."""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        subprocess.run(["scancel", job], capture_output=True, timeout=CANCEL_TIMEOUT_S,
                       check=False, stdin=subprocess.DEVNULL)


def wait(job: str, timeout_s: float, what: str, poll_s: float = POLL_S,
         announce: str | None = None) -> Ended:
    """Wait for the job to end (progress on stderr); cancel it after timeout_s, or on Ctrl-C,
    SIGTERM or SIGHUP (then say so and raise the KeyboardInterrupt on). `what` names it:
    "screen job". `announce`: a line for stderr once the job is in hand (a Ctrl-C prompted by
    it cancels the job)."""
    deadline = time.monotonic() + timeout_s
    try:
        if announce is not None:  # one write: the line whole
            sys.stderr.write(announce + "\n")
            sys.stderr.flush()
        with Progress(f"{PROG}: {what} {job}") as progress:
            while True:
                info = slurmquery.job_infos([job])[job]
                if info.final:
                    progress.finish(info.state)
                    return Ended(info, False)
                progress.update(jobs_summary([info]))
                if time.monotonic() > deadline:
                    cancel(job)
                    progress.finish("cancelled")
                    return Ended(info, True)
                time.sleep(poll_s)
    except KeyboardInterrupt:
        cancel(job)
        print(f"{PROG}: {what} {job} cancelled", file=sys.stderr)
        raise
