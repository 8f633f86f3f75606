"""How each Python front of llmb ends: one rule for llmb-run, the analyzer, the installer and
launch.sh's entrypoint (llmb.entrypoint).

`run(prog, body)` runs a front's work (`body`, which returns the exit status) and turns what
ends it into at most one line on stderr and an exit status, the same in all four:

- the work done: nothing more, and the status it returned;
- an LlmbError: `<prog>: <message>` (secrets in it masked), and the error's own `status` (2
  for a UsageError, 1 for most, whatever else one carries: an archive stopped by SIGTERM ends
  143);
- Ctrl-C: `<prog>: interrupted`, and 130 (128 + SIGINT);
- a broken pipe, the reader of stdout gone (`llmb-run list | head`,
  `parse_train_timing.sh | head`): nothing, and 141 (128 + SIGPIPE).

A broken pipe ends the way it ends every Unix tool that SIGPIPE stops: silently, with 128 +
SIGPIPE. Not 0: the analyzer's status carries meaning (`--check` exits 3, and 0 says the check
passed), and output that nobody read whole is no success to claim; a shell reports
`... | head` by head's status anyway, unless `pipefail` asks for every command's. The signal
itself is not let through (Python ignores SIGPIPE and raises BrokenPipeError instead): a front
killed by it would skip its own clean-up (an archive's staging directory, a temporary file),
for the same status. Python flushes stdout once more when it exits, into the same closed pipe,
and would print "Exception ignored ... BrokenPipeError" and exit 120; so stdout's descriptor is
pointed at /dev/null first, and that last flush goes there.

What else ends a front, the same in all four:

- SIGTERM or SIGHUP (a closed terminal, a `kill`): what Ctrl-C does, so every clean-up that
  Ctrl-C runs runs (a Slurm job of llmb-run's own is cancelled), then `<prog>: stopped by
  SIGTERM` and 128 + N (143, 129). A signal the caller ignores (`nohup`) stays ignored;
- stdout closed (`>&-`): `<prog>: stdout is closed ...` before any work, and 1: nothing it
  would print could be read, and nothing is done unseen. stderr closed (`2>&-`): the work is
  done, its lines go nowhere (never into stdout), and its status. A closed descriptor is held
  on /dev/null meanwhile, so that no file opened later takes its number;
- a character the output's encoding cannot show (`PYTHONIOENCODING=ascii`, a node name in
  another script): written escaped (`\\u0661`), never a UnicodeEncodeError;
- a full disk (ENOSPC, EDQUOT) under stdout or a file being written: `<prog>: cannot write
  <file>: No space left on device`, and 1;
- an option given `--` as its value (`--output=--`): a UsageError (see `ArgParser`).
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import io
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import NoReturn

from llmb.shared.errors import LlmbError, UsageError
from llmb.shared.redact import for_people
from llmb.shared.values import shown

EXIT_FAILED = 1  # stdout closed, a full disk
EXIT_INTERRUPTED = 130  # 128 + SIGINT
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
FULL = (errno.ENOSPC, errno.EDQUOT)


class Stopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP arrived: a KeyboardInterrupt, so that every clean-up written for
    Ctrl-C runs for it too (a job of llmb-run's is cancelled); the front ends 128 + N."""

    def __init__(self, signum: int) -> None:
        self.name = signal.Signals(signum).name
        self.status = 128 + signum
        super().__init__(self.name)


def run(prog: str, body: Callable[[], int], interrupted: str = "interrupted") -> int:
    """The exit status of a front whose work is `body`; `prog` starts every line it prints,
    `interrupted` is what it says on Ctrl-C (the installer adds how to resume)."""
    stdout_closed = _steady_streams()
    try:
        with stoppable():
            if stdout_closed:
                return _say(prog, "stdout is closed (>&-): nothing printed could be read; "
                            "send it somewhere, e.g. >/dev/null to discard it", EXIT_FAILED)
            status = body()
            sys.stdout.flush()  # a reader that went away shows here, not at interpreter exit
    except BrokenPipeError:
        quiet_stdout()
        return EXIT_BROKEN_PIPE
    except OSError as exc:
        if exc.errno not in FULL:
            raise
        quiet_stdout()  # stdout's own buffer may be what cannot be written
        where = shown(exc.filename) if exc.filename else "the output"
        return _say(prog, f"cannot write {where}: {exc.strerror}", EXIT_FAILED)
    except LlmbError as exc:
        return _say(prog, str(exc), exc.status)
    except Stopped as exc:
        return _say(prog, f"stopped by {exc.name}{interrupted.removeprefix('interrupted')}",
                    exc.status)
    except KeyboardInterrupt:
        return _say(prog, interrupted, EXIT_INTERRUPTED)
    return status


@contextlib.contextmanager
def stoppable() -> Iterator[None]:
    """While in it, SIGTERM and SIGHUP raise Stopped (where their action is the default one:
    a signal the caller ignores, as under nohup, stays ignored)."""
    def stop(signum: int, _frame: object) -> None:
        raise Stopped(signum)

    saved = {}
    if threading.current_thread() is threading.main_thread():
        saved = {s: signal.signal(s, stop) for s in STOP_SIGNALS
                 if signal.getsignal(s) == signal.SIG_DFL}
    try:
        yield
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)


def default_signals() -> None:
    """SIGTERM and SIGHUP back to their default action (they end the process at once): for
    work handed to code that handles them itself (training in a Slurm job)."""
    for s in STOP_SIGNALS:
        if signal.getsignal(s) not in (signal.SIG_IGN, None):
            signal.signal(s, signal.SIG_DFL)


def _steady_streams() -> bool:
    """Whether stdout was closed when the process started. A closed descriptor 0, 1 or 2 is
    held on /dev/null (a file opened later must not become stdout); stderr closed, its lines go
    there; stdout and stderr write what their encoding cannot show escaped."""
    closed = sys.stdout is None
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            _hold_on_devnull(fd)
    if sys.stderr is None:
        sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115 (the process's, never closed)
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            with contextlib.suppress(OSError, ValueError):
                stream.reconfigure(errors="backslashreplace")
    return closed


def _hold_on_devnull(fd: int) -> None:
    with contextlib.suppress(OSError):
        devnull = os.open(os.devnull, os.O_RDWR)
        if devnull != fd:
            os.dup2(devnull, fd)
            os.close(devnull)


def leave(status: int) -> NoReturn:
    """End the process with `status` (a front's `if __name__ == "__main__"`). PYTHONINSPECT set
    in the caller's shell would have Python print the SystemExit as a traceback and wait for
    input after the front's one line; then the process ends here, its output flushed."""
    if sys.flags.inspect:
        with contextlib.suppress(OSError, ValueError, AttributeError):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(status)
    sys.exit(status)


def quiet_stdout() -> None:
    """Point stdout's descriptor at /dev/null: what is still buffered for a reader that went
    away is flushed there at interpreter exit, without "Exception ignored" on stderr."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, sys.stdout.fileno())
        finally:
            os.close(devnull)


def bare_dashes(argv: Sequence[str]) -> None:
    """UsageError for an option given `--` as its value (`--output=--`, `-w=--`): argparse
    would take it for the end of the options and hand the option an empty list; no option of
    llmb's means anything by it. Arguments after a bare `--` are not options."""
    for arg in argv:
        if arg == "--":
            return
        name, eq, value = arg.partition("=")
        if eq and value == "--" and name.startswith("-"):
            raise UsageError(f"{name}=-- gives {name} no value ('--' marks the end of the "
                             f"options); write {name}=VALUE (a path named -- as ./--)")


class ArgParser(argparse.ArgumentParser):
    """argparse for llmb's fronts: an option's value is a string, whatever it looks like, and
    `--opt=--` is refused (bare_dashes) before argparse sees it."""

    def parse_known_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                         namespace: argparse.Namespace | None = None
                         ) -> tuple[argparse.Namespace, list[str]]:
        bare_dashes(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)


def one_line(message: str) -> str:
    """A message as the fronts print it: one line (a newline in it shows as \\n, a secret in it
    as stars)."""
    return for_people(shown(message))


def _say(prog: str, message: str, status: int) -> int:
    """`<prog>: <message>` as one line on stderr (a newline in it shows as \\n, a secret in it as
    stars), and `status`."""
    try:
        print(f"{prog}: {one_line(message)}", file=sys.stderr)
        sys.stdout.flush()
    except BrokenPipeError:  # stdout's reader (or stderr's) went away too: the status says it
        quiet_stdout()
    except (OSError, ValueError, AttributeError):  # nowhere to write: the status says it
        quiet_stdout()
    return status
