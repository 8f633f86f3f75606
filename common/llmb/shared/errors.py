"""The one base class of llmb's errors: a line for people and the exit status it ends with.

Every front prints `<prog>: <message>` on stderr and exits with `status`: 1 when something could
not be done, 2 for a bad option or value (`UsageError`). A message is one line that names the
variable, flag or file, the bad value and what would work; it never holds a secret.
Ctrl-C is not an error: each front turns KeyboardInterrupt into exit status 130 itself.
"""

from __future__ import annotations

EXIT_FAILED = 1
EXIT_USAGE = 2


class LlmbError(Exception):
    """str(error) is one line for people, without a program prefix; `status` the exit status."""

    status = EXIT_FAILED

    def __init__(self, message: str = "", status: int | None = None) -> None:
        super().__init__(message)
        if status is not None:
            self.status = status


class UsageError(LlmbError):
    """A bad option or value on a command line or in a file a person wrote: exit status 2."""

    status = EXIT_USAGE
