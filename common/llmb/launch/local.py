"""The local backend (CLUSTER_TYPE=local): nemo-run's LocalExecutor with torchrun on this
machine, and the run in the foreground: run, stop on the first Ctrl-C, report.

nemo-run's local executor hands the job to torchx, which starts torchrun in a session of its own
(so a terminal's Ctrl-C reaches only this process). nemo-run 0.11.1 returns from `run()` right
after the launch and waits on leaving the Experiment's `with` block, in a thread pool: a first
Ctrl-C there only ends the wait for the pool, which keeps waiting for the job (the ranks train
on, the Ctrl-C looks ignored), and SIGTERM killed this process and left torchrun running.
`run_attached` waits itself and stops the job on the first signal (torchx: SIGTERM to
torchrun's process group, SIGKILL after 10 s), then says so.

nemo-run and torchx are imported inside the functions that need them.
"""

from __future__ import annotations

import contextlib
import json
import shlex
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any

from llmb.launch import job, jobenv
from llmb.launch.job import JobPaths
from llmb.launch.request import Request

POLL_S = 0.5
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def executor(req: Request):
    import nemo_run as run

    return run.LocalExecutor(ntasks_per_node=req.config.num_gpus, launcher="torchrun",
                             env_vars=jobenv.job_env(req.recipe, req.config, req.nccl_trace,
                                                     req.llmb_workload))


def task(req: Request, paths: JobPaths):
    import nemo_run as run

    cmd = job.train_command(req, paths)
    return run.Script(path=cmd[1], args=cmd[2:], entrypoint="python")


def render(req: Request, paths: JobPaths) -> str:
    from nemo_run.run.torchx_backend.packaging import package

    built = executor(req)
    built.assign(paths.run_id, str(paths.run_dir), paths.experiment, paths.experiment)
    app = package(paths.experiment, task(req, paths), built,
                  serialize_metadata_for_scripts=False)
    role = app.roles[0]
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(role.env.items()))
    return f"{env} {role.entrypoint} {' '.join(role.args)}"


class Interrupted(Exception):
    """A stop signal arrived while the local run was in the foreground."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.name = signal.Signals(signum).name


def run_attached(exp: Any, experiment: str) -> str | None:
    """Launch the experiment's local job and wait for it here, in the main thread, where a
    signal is seen within POLL_S; on SIGINT (Ctrl-C), SIGTERM or SIGHUP stop the job at once.

    nemo-run's own wait (on leaving the `with` block) sits in a thread pool's join, where
    Python sees a Ctrl-C only once the job has ended; after this function the job has ended,
    so that wait returns at once. Returns None when the job ended by itself, else the name of
    the signal that stopped it."""
    from torchx.specs.api import is_terminal

    def stop(signum: int, _frame: object) -> None:
        raise Interrupted(signum)

    previous = {s: signal.signal(s, stop) for s in STOP_SIGNALS}
    try:
        exp.run(detach=False, tail_logs=False)
        while not all(is_terminal(info["status"])
                      for info in exp.status(return_dict=True).values()):
            time.sleep(POLL_S)
        return None
    except (KeyboardInterrupt, Interrupted) as exc:
        name = exc.name if isinstance(exc, Interrupted) else "SIGINT"
        for s in STOP_SIGNALS:  # a second Ctrl-C must not cut the stopping short
            signal.signal(s, lambda *_: print("llmb: stopping, please wait (at most 10 s)",
                                              file=sys.stderr, flush=True))
        started = time.monotonic()
        print(f"llmb: {name}: stopping the local run of {experiment} (torchrun and its ranks)",
              file=sys.stderr, flush=True)
        for job in exp.jobs:
            exp.cancel(job.id)
        print(f"llmb: stopped in {time.monotonic() - started:.1f} s", file=sys.stderr,
              flush=True)
        return name
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def collect_log(job_dir: Path, experiment: str) -> Path:
    """torchrun's combined log (nemo-run's local scheduler writes it under
    <job dir>/nemo_run/<app id>/<role>/0/combined.log) copied to the experiments layout's
    log-<exp>_local_0.out, where the analyzer looks."""
    combined = sorted((job_dir / "nemo_run").glob(f"*/{experiment}/0/combined.log"))
    target = job_dir / f"log-{experiment}_local_0.out"
    with target.open("w") as out:
        for log in combined:
            with log.open() as src:
                shutil.copyfileobj(src, out)
    return target


def final_state(job_dir: Path) -> str:
    """The SUCCESS file torchx writes holds the final state; without one the run failed."""
    state = "FAILED"
    for marker in (job_dir / "nemo_run").glob("*/SUCCESS"):
        with contextlib.suppress(OSError, ValueError):
            state = json.loads(marker.read_text()).get("final_state", state)
    return state


def finish(job_dir: Path, experiment: str, interrupted: str | None, analyze: str) -> int:
    """Report the run; the exit status: 0 succeeded, 1 failed, 128 + N stopped by signal N
    (130 for Ctrl-C)."""
    log = collect_log(job_dir, experiment)
    if interrupted:
        print(f"llmb: local run of {experiment} stopped by {interrupted}; its log so far: {log}",
              file=sys.stderr)
        return 128 + signal.Signals[interrupted].value
    state = final_state(job_dir)
    print(f"llmb: local run of {experiment} finished: {state}")
    print(f"llmb: log: {log}")
    print(f"llmb: analyze with: {analyze}")
    return 0 if state == "SUCCEEDED" else 1
