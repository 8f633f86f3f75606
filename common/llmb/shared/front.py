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
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable
from typing import NoReturn

from llmb.shared.errors import LlmbError
from llmb.shared.redact import for_people
from llmb.shared.values import shown

EXIT_INTERRUPTED = 130  # 128 + SIGINT
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE


def run(prog: str, body: Callable[[], int], interrupted: str = "interrupted") -> int:
    """The exit status of a front whose work is `body`; `prog` starts every line it prints,
    `interrupted` is what it says on Ctrl-C (the installer adds how to resume)."""
    try:
        status = body()
        sys.stdout.flush()  # a reader that went away shows here, not at interpreter exit
    except BrokenPipeError:
        quiet_stdout()
        return EXIT_BROKEN_PIPE
    except LlmbError as exc:
        return _say(prog, str(exc), exc.status)
    except KeyboardInterrupt:
        return _say(prog, interrupted, EXIT_INTERRUPTED)
    return status


def leave(status: int) -> NoReturn:
    """End the process with `status` (a front's `if __name__ == "__main__"`). PYTHONINSPECT set
    in the caller's shell would have Python print the SystemExit as a traceback and wait for
    input after the front's one line; then the process ends here, its output flushed."""
    if sys.flags.inspect:
        with contextlib.suppress(OSError, ValueError):
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


def _say(prog: str, message: str, status: int) -> int:
    """`<prog>: <message>` as one line on stderr (a newline in it shows as \\n, a secret in it as
    stars), and `status`."""
    try:
        print(f"{prog}: {for_people(shown(message))}", file=sys.stderr)
        sys.stdout.flush()
    except BrokenPipeError:  # stdout's reader (or stderr's) went away too: the status says it
        quiet_stdout()
    return status
