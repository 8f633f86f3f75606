"""The three Python fronts (llmb-run, the analyzer, the installer) as a shell runs them, to see
how each ends: its exit status and stderr when the process really exits.

`into_closed_pipe` runs a command whose stdout is a pipe nobody reads any more, as in
`llmb-run list | head` once head has gone. `failing_front` runs a front's own `main` in a fresh
Python with one function of its module made to raise an LlmbError of a given status: no input
of today makes a front fail with a status of its own choosing, and this shows the rule (the
error's own status) at the real process exit. `interrupted_front` has that function raise
KeyboardInterrupt instead, as Ctrl-C does in the middle of the work; `signalled_front` has it
send the process a signal (SIGTERM, SIGHUP), as `kill` or a closed terminal does;
`unicode_front` has it print UNICODE_LINE on stdout, then fail with it in the message.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from paths import COMMON

PROBE_MESSAGE = "the probe failed here"
UNICODE_LINE = "node-\u0661 \u2713"  # an Arabic-Indic digit one, a check mark

_PROBE = f"""
import importlib, json, os, signal, sys, time
from llmb.shared.errors import LlmbError
module_name, function, status, leading, *argv = sys.argv[1:]
for s in (signal.SIGTERM, signal.SIGHUP):  # as a shell starts it, whatever started the tests
    signal.signal(s, signal.SIG_DFL)
module = importlib.import_module(module_name)
def fail(*args, **kwargs):
    if status == "interrupt":
        raise KeyboardInterrupt
    if status.startswith("SIG"):
        os.kill(os.getpid(), signal.Signals[status])
        time.sleep(30)
    if status == "unicode":
        print({UNICODE_LINE!r})
        raise LlmbError({PROBE_MESSAGE!r} + " at " + {UNICODE_LINE!r}, status=7)
    raise LlmbError({PROBE_MESSAGE!r}, status=int(status))
setattr(module, function, fail)
sys.exit(module.main(*json.loads(leading), argv))
"""


def into_closed_pipe(cmd: Sequence[str], env: Mapping[str, str] | None = None,
                     cwd: Path | None = None,
                     timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run `cmd` with stdout a pipe whose reading end is already closed; stderr is captured."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run(list(cmd), stdout=write, stderr=subprocess.PIPE, text=True,
                              stdin=subprocess.DEVNULL, env=env, cwd=cwd, timeout=timeout)
    finally:
        os.close(write)


def failing_front(module: str, function: str, status: int, argv: Sequence[str],
                  env: Mapping[str, str] | None = None,
                  leading: Sequence[str] = ()) -> subprocess.CompletedProcess[str]:
    """`python -c` running `module.main(*leading, argv)` after `module.function` was made to
    raise LlmbError(PROBE_MESSAGE, status=status)."""
    return _probe(module, function, str(status), argv, env, leading)


def interrupted_front(module: str, function: str, argv: Sequence[str],
                      env: Mapping[str, str] | None = None,
                      leading: Sequence[str] = ()) -> subprocess.CompletedProcess[str]:
    """`python -c` running `module.main(*leading, argv)` after `module.function` was made to
    raise KeyboardInterrupt."""
    return _probe(module, function, "interrupt", argv, env, leading)


def signalled_front(module: str, function: str, signame: str, argv: Sequence[str],
                    env: Mapping[str, str] | None = None,
                    leading: Sequence[str] = ()) -> subprocess.CompletedProcess[str]:
    """`python -c` running `module.main(*leading, argv)` after `module.function` was made to
    send the process `signame` (SIGTERM, SIGHUP)."""
    return _probe(module, function, signame, argv, env, leading)


def unicode_front(module: str, function: str, argv: Sequence[str],
                  env: Mapping[str, str] | None = None,
                  leading: Sequence[str] = ()) -> subprocess.CompletedProcess[str]:
    """`python -c` running `module.main(*leading, argv)` after `module.function` was made to
    print UNICODE_LINE, then raise an LlmbError (status 7) that holds it."""
    return _probe(module, function, "unicode", argv, env, leading)


def _probe(module: str, function: str, raised: str, argv: Sequence[str],
           env: Mapping[str, str] | None,
           leading: Sequence[str]) -> subprocess.CompletedProcess[str]:
    full = {**(env if env is not None else os.environ), "PYTHONPATH": str(COMMON)}
    return subprocess.run([sys.executable, "-c", _PROBE, module, function, raised,
                           json.dumps(list(leading)), *argv],
                          capture_output=True, text=True, stdin=subprocess.DEVNULL, env=full,
                          timeout=120)
