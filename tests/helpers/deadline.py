"""`with deadline(seconds):` fails the test (AssertionError) when the block has not finished in
time: for reads that must never wait on a FIFO or a device, and for readers that must run in
time linear in their input (`what`: what a block still running says). SIGALRM (which also
stops a regular expression at work), so main thread only."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator


@contextlib.contextmanager
def deadline(seconds: int = 10, what: str = "it waits (a FIFO, a device)") -> Iterator[None]:
    def expired(_signum: int, _frame: object) -> None:
        raise AssertionError(f"still running after {seconds} s: {what}")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
