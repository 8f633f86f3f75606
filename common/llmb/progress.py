"""Progress for the long waits: creating a venv, importing an image, waiting for a job.

Two forms, chosen by where the output goes:
- a terminal (isatty, TERM not "dumb"): one line redrawn in place, a spinner, what is
  happening now (a job's state, the last line a command printed) and the time so far; when the
  wait ends the line is replaced by a final one. A command's own output is kept back (its last
  lines are shown if it fails), so the screen stays readable.
- anything else (a log file, CI, a pipe): plain lines only, no carriage returns or escape
  codes: one when the wait starts, one whenever the state changes, a heartbeat every
  HEARTBEAT_S while nothing changes, and one at the end. A command's output passes through.
"""

from __future__ import annotations

import collections
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import TextIO

from llmb import values

HEARTBEAT_S = 60.0
REFRESH_S = 0.2
SPINNER = "|/-\\"
TAIL_LINES = 20


def is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty() and os.environ.get("TERM", "") != "dumb"
    except (AttributeError, ValueError):
        return False


def elapsed_text(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    minutes, sec = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{sec:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


class Progress:
    """`with Progress("job 12") as p: p.update("PENDING (Resources)")`."""

    def __init__(self, label: str, stream: TextIO | None = None, tty: bool | None = None,
                 heartbeat_s: float = HEARTBEAT_S, refresh_s: float = REFRESH_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.label = label
        self.stream = stream or sys.stderr
        self.tty = is_terminal(self.stream) if tty is None else tty
        self.heartbeat_s = heartbeat_s
        self.refresh_s = refresh_s
        self.clock = clock
        self.status = "starting"
        self._start = self._last_line = 0.0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._frame = 0
        self._outcome: str | None = None

    # -- life cycle --
    def __enter__(self) -> Progress:
        self._start = self._last_line = self.clock()
        if not self.tty:
            self._line(f"{self.label}: {self.status}")
        self._thread = threading.Thread(target=self._tick, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if kind is KeyboardInterrupt:
            outcome = "interrupted"
        elif kind is not None:
            outcome = "failed"
        else:
            outcome = self._outcome or "done"
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        took = elapsed_text(self.clock() - self._start)
        with self._lock:
            if self.tty:
                self.stream.write("\r\x1b[K")
            self.stream.write(f"{self.label}: {outcome} after {took}\n")
            self.stream.flush()

    def update(self, status: str) -> None:
        status = " ".join(values.shown(status).split()) or self.status
        with self._lock:
            changed = status != self.status
            self.status = status
        if changed and not self.tty:
            self._line(f"{self.label}: {status}")
        elif changed:
            self._draw()

    def finish(self, outcome: str) -> None:
        """The word(s) the final line ends with (default: done)."""
        self._outcome = outcome

    # -- drawing --
    def _line(self, text: str) -> None:
        with self._lock:
            self.stream.write(text + "\n")
            self.stream.flush()
            self._last_line = self.clock()

    def _draw(self) -> None:
        with self._lock:
            self._frame += 1
            took = elapsed_text(self.clock() - self._start)
            text = f"{SPINNER[self._frame % len(SPINNER)]} {self.label}: {self.status} [{took}]"
            width = shutil.get_terminal_size((100, 20)).columns - 1
            self.stream.write("\r\x1b[K" + text[:width])
            self.stream.flush()

    def _tick(self) -> None:
        while not self._stop.wait(self.refresh_s if self.tty else min(1.0, self.heartbeat_s)):
            if self.tty:
                self._draw()
            elif self.clock() - self._last_line >= self.heartbeat_s:
                took = elapsed_text(self.clock() - self._start)
                self._line(f"{self.label}: {self.status} (still waiting, {took})")


def run_command(argv: list[str], env: Mapping[str, str] | None, label: str,
                stream: TextIO | None = None, tty: bool | None = None,
                heartbeat_s: float = HEARTBEAT_S) -> int:
    """Run a command with progress; its exit status. On a terminal its output is shown as the
    progress line's status (and its last lines when it fails); otherwise it passes through."""
    stream = stream or sys.stderr
    tty = is_terminal(stream) if tty is None else tty
    env_dict = dict(env) if env is not None else None
    progress = Progress(label, stream, tty, heartbeat_s)
    if not tty:
        with progress:
            progress.update("running")
            rc = subprocess.run(argv, env=env_dict, check=False).returncode
            progress.finish("done" if rc == 0 else f"failed (exit {rc})")
        return rc
    tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
    with progress:
        proc = subprocess.Popen(argv, env=env_dict, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        assert proc.stdout is not None
        pending = b""
        try:
            while chunk := proc.stdout.read1(4096):
                pending += chunk
                *lines, pending = pending.replace(b"\r", b"\n").split(b"\n")
                for raw in lines:
                    line = raw.decode(errors="replace").rstrip()
                    if line:
                        tail.append(line)
                        progress.update(line)
        except KeyboardInterrupt:
            proc.wait()  # it got the SIGINT too; let it clean up (a partial image, ...)
            raise
        if pending.strip():
            tail.append(pending.decode(errors="replace").rstrip())
        rc = proc.wait()
        progress.finish("done" if rc == 0 else f"failed (exit {rc})")
        if rc != 0:
            with progress._lock:
                stream.write("\r\x1b[K" + "".join(f"  | {values.shown(t)}\n" for t in tail))
    return rc
