"""llmb-run's name in its messages and the error of every llmb-run command."""

from __future__ import annotations

from llmb.shared.errors import LlmbError

PROG = "llmb-run"


class RunError(LlmbError):
    """A llmb-run operation that cannot be done: one line for the user (printed as
    `llmb-run: <message>`); exit status 1. A bad flag value is a shared.errors.UsageError."""
