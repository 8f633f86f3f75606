"""Progress for the long waits: creating a venv, importing an image, waiting for a job.

Two forms, chosen by where the progress goes (stderr unless told otherwise):
- a terminal (isatty, TERM not "dumb"): one line redrawn in place, a spinner, what is
  happening now (a job's state, the last line a command printed) and the time so far; when the
  wait ends the line is replaced by a final one. A command's own output is kept back (its last
  lines are shown if it fails), so the screen stays readable.
- anything else (a log file, CI, a pipe, a batch job's output): plain lines only, no carriage
  returns or escape codes: one when the wait starts, one whenever the state changes, a
  heartbeat every HEARTBEAT_S while nothing changes, and one at the end. A command's output
  passes through unchanged.

Entry points: `Progress` (a context manager, `update(status)`), `wait(label, poll, interval)`
(poll until it says done), `run_command(argv, env, label)` (a command with progress; SIGTERM is
passed on to it), and for shell scripts:

    python3 -m llmb.shared.progress LABEL -- COMMAND [ARG...]    exit status: the command's

Standard library only (the shell scripts run it with whatever Python they found).
"""

from __future__ import annotations

import collections
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from types import FrameType, TracebackType
from typing import TextIO

from llmb.shared import values

HEARTBEAT_S = 60.0
REFRESH_S = 0.2
SPINNER = "|/-\\"
TAIL_LINES = 20
# Terminal escape sequences a command prints (colours, cursor moves, titles).
_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")


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


def one_line(text: str) -> str:
    """A command's or a scheduler's text as one printable line: escape sequences dropped,
    blanks (newlines and tabs too) collapsed, other control characters shown escaped."""
    return values.shown(" ".join(_ESCAPES.sub("", text).split()))


class Progress:
    """`with Progress("job 12") as p: p.update("PENDING (Resources)")`."""

    def __init__(self, label: str, stream: TextIO | None = None, tty: bool | None = None,
                 heartbeat_s: float = HEARTBEAT_S, refresh_s: float = REFRESH_S,
                 clock: Callable[[], float] = time.monotonic, status: str = "starting") -> None:
        self.label = one_line(label)
        self.stream = stream or sys.stderr
        self.tty = is_terminal(self.stream) if tty is None else tty
        self.heartbeat_s = heartbeat_s
        self.refresh_s = refresh_s
        self.clock = clock
        self.status = one_line(status)
        self._start = self._last_line = 0.0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._frame = 0
        self._outcome: str | None = None

    # -- life cycle --
    def __enter__(self) -> Progress:
        self._start = self._last_line = self.clock()
        if self.tty:
            self._draw()
        else:
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
        status = one_line(status) or self.status
        with self._lock:
            changed = status != self.status
            self.status = status
        if changed and not self.tty:
            self._line(f"{self.label}: {status}")
        elif changed:
            self._draw()

    def finish(self, outcome: str) -> None:
        """The word(s) the final line ends with (default: done)."""
        self._outcome = one_line(outcome)

    def print_above(self, lines: Iterable[str]) -> None:
        """Lines that stay on the screen (a failed command's last output), above the live
        line on a terminal."""
        with self._lock:
            if self.tty:
                self.stream.write("\r\x1b[K")
            self.stream.write("".join(f"  | {one_line(t)}\n" for t in lines))
            self.stream.flush()

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


def wait(label: str, poll: Callable[[], str | None], interval: float,
         stream: TextIO | None = None, tty: bool | None = None,
         sleep: Callable[[float], None] = time.sleep) -> None:
    """Call poll() every interval seconds while it returns a status to show; return once it
    returns None. Nothing is shown when there was nothing to wait for."""
    status = poll()
    if status is None:
        return
    with Progress(label, stream, tty, status=status) as progress:
        while status is not None:
            progress.update(status)
            sleep(interval)
            status = poll()


class _Forward:
    """While installed: SIGTERM (and SIGHUP) to this process go to the command's whole process
    group as SIGTERM, so what the command started (pip under setup.sh, enroot under its
    progress line) stops with it instead of writing on as an orphan. Installed before the
    command starts: a signal that comes while it is being started is passed on once it has."""

    SIGNALS = (signal.SIGTERM, signal.SIGHUP)

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.received: int | None = None
        self.saved: dict[int, object] = {}

    def attach(self, proc: subprocess.Popen[bytes]) -> None:
        """The command started: signals go to its group from now on (one already received
        goes now)."""
        self.proc = proc
        if self.received is not None:
            signal_group(proc, signal.SIGTERM)

    def __enter__(self) -> _Forward:
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                self.saved[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.received = signum
        if self.proc is not None:
            signal_group(self.proc, signal.SIGTERM)

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self.saved.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]


GROUP_GRACE_S = 10.0


def signal_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    """Send sig to the command's process group (it leads one of its own)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


def end_group(proc: subprocess.Popen[bytes], grace_s: float = GROUP_GRACE_S) -> None:
    """After a signal stopped the command: what is left of its process group (a grandchild
    that ignored or outlived SIGTERM) gets grace_s seconds, then SIGKILL."""
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        try:
            os.killpg(proc.pid, 0)
        except (ProcessLookupError, PermissionError):
            return
        time.sleep(0.1)
    signal_group(proc, signal.SIGKILL)


def run_command(argv: list[str], env: Mapping[str, str] | None, label: str,
                stream: TextIO | None = None, tty: bool | None = None,
                heartbeat_s: float = HEARTBEAT_S) -> int:
    """Run a command with progress; its exit status (128+N when a signal N stopped it, or
    stopped us: the command's process group got SIGTERM and was waited for). The command leads
    a process group of its own, so a stop reaches everything it started; a Ctrl-C at the
    terminal is passed on to that group too. On a terminal its output is shown as the progress
    line's status (and its last lines when it fails); otherwise it passes through."""
    stream = stream or sys.stderr
    tty = is_terminal(stream) if tty is None else tty
    env_dict = dict(env) if env is not None else None
    tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
    with Progress(label, stream, tty, heartbeat_s, status="running") as progress:
        with _Forward() as forward:
            proc = subprocess.Popen(argv, env=env_dict, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE if tty else None,
                                    stderr=subprocess.STDOUT if tty else None,
                                    start_new_session=True)
            forward.attach(proc)
            try:
                if proc.stdout is not None:
                    _follow_output(proc.stdout, tail, progress)
                rc = proc.wait()
            except KeyboardInterrupt:
                signal_group(proc, signal.SIGINT)  # not in our group: the terminal's Ctrl-C
                proc.wait()  # let it clean up (a partial image, ...)
                end_group(proc)
                raise
        if forward.received is not None:
            end_group(proc)
            rc = 128 + forward.received
        elif rc < 0:
            rc = 128 - rc
        progress.finish("done" if rc == 0 else f"failed (exit {rc})")
        if rc != 0 and tail:
            progress.print_above(tail)
    return rc


def _follow_output(pipe, tail: collections.deque[str], progress: Progress) -> None:
    pending = b""
    while chunk := pipe.read1(4096):
        pending += chunk
        *lines, pending = pending.replace(b"\r", b"\n").split(b"\n")
        for raw in lines:
            line = one_line(raw.decode(errors="replace"))
            if line:
                tail.append(line)
                progress.update(line)
    last = one_line(pending.decode(errors="replace"))  # a last line without a newline
    if last:
        tail.append(last)


USAGE = "usage: python3 -m llmb.shared.progress LABEL -- COMMAND [ARG...]"


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--" or not argv[0].strip():
        print(USAGE, file=sys.stderr)
        return 2
    try:
        return run_command(argv[2:], None, argv[0])
    except FileNotFoundError:
        print(f"llmb: {values.shown(argv[2])}: command not found", file=sys.stderr)
        return 127
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
