"""llmb.shared.front: how every Python front ends (an error's own status, Ctrl-C, a reader that
went away)."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time

import pytest
from fronts import into_closed_pipe
from llmb.shared import front
from llmb.shared.errors import LlmbError, UsageError
from paths import COMMON


def test_the_work_done_ends_with_its_own_status(capsys) -> None:
    assert front.run("prog", lambda: print("table") or 3) == 3
    out, err = capsys.readouterr()
    assert (out, err) == ("table\n", "")


def raises(exc: BaseException):
    def body() -> int:
        raise exc
    return body


@pytest.mark.parametrize(("error", "status"), [
    (UsageError("--scale=3 is not allowed; allowed: 8, 16"), 2),
    (LlmbError("the history cannot be read"), 1),
    (LlmbError("archive stopped by SIGTERM; its staging was removed", status=143), 143),
])
def test_an_error_is_one_line_and_its_own_status(capsys, error, status) -> None:
    assert front.run("llmb-run", raises(error)) == status
    assert capsys.readouterr().err == f"llmb-run: {error}\n"


def test_an_error_stays_one_line_whatever_it_holds(capsys) -> None:
    assert front.run("prog", raises(LlmbError("bad name a\nb", status=4))) == 4
    assert capsys.readouterr().err == "prog: bad name a\\nb\n"


def test_ctrl_c_is_130_and_says_so(capsys) -> None:
    assert front.run("prog", raises(KeyboardInterrupt())) == 130
    assert capsys.readouterr().err == "prog: interrupted\n"
    assert front.run("install", raises(KeyboardInterrupt()), "interrupted; run it again") == 130
    assert capsys.readouterr().err == "install: interrupted; run it again\n"


def test_a_broken_pipe_is_141_silent_and_leaves_stdout_on_devnull(monkeypatch, capsys) -> None:
    read, write = os.pipe()
    os.close(read)
    stdout = os.fdopen(write, "w")
    monkeypatch.setattr(sys, "stdout", stdout)
    try:
        assert front.run("prog", lambda: print("row\n" * 10) or 0) == front.EXIT_BROKEN_PIPE == 141
        assert os.readlink(f"/proc/self/fd/{write}") == os.devnull
    finally:
        stdout.close()
    assert capsys.readouterr().err == ""


PROCESS = """
import sys
import time
from llmb.shared import front
def body():
    print("x" * int(sys.argv[1]))
    return 0
sys.exit(front.run("prog", body))
"""


@pytest.mark.parametrize("size", [10, 1 << 20])  # flushed by run, or broken while written
def test_a_process_whose_reader_went_away_exits_141_without_a_word(size) -> None:
    """Not 120 with "Exception ignored ... BrokenPipeError", as Python's own exit would."""
    proc = into_closed_pipe([sys.executable, "-c", PROCESS, str(size)],
                            env={**os.environ, "PYTHONPATH": str(COMMON)})
    assert (proc.returncode, proc.stderr) == (141, "")


def test_a_killed_reader_is_not_a_success_in_a_pipeline() -> None:
    """The status a shell's pipefail sees when the reader of a front's output stops early."""
    script = f"set -o pipefail; {sys.executable} -c '{PROCESS}' 1000000 | head -c 1 >/dev/null"
    proc = subprocess.run(["bash", "-c", script], env={**os.environ, "PYTHONPATH": str(COMMON)},
                          capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stderr) == (141, "")


LEAVING = """
from llmb.shared import front
from llmb.shared.errors import LlmbError
def body():
    raise LlmbError("refused")
front.leave(front.run("prog", body))
"""


def test_pythoninspect_in_the_callers_shell_adds_no_traceback_and_no_prompt() -> None:
    """PYTHONINSPECT=1 (which llmb refuses for a run) makes Python print SystemExit as a
    traceback and wait at a prompt after the program; a front still ends on its one line."""
    proc = subprocess.run([sys.executable, "-c", LEAVING], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(COMMON), "PYTHONINSPECT": "1"},
                          stdin=subprocess.DEVNULL, timeout=60)
    assert (proc.returncode, proc.stderr, proc.stdout) == (1, "prog: refused\n", "")


@pytest.mark.parametrize(("sig", "status"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_sigterm_and_sighup_end_the_work_as_ctrl_c_does(capsys, sig, status) -> None:
    cleaned = []

    def body() -> int:
        try:
            os.kill(os.getpid(), sig)
            time.sleep(5)
        except KeyboardInterrupt:  # what Ctrl-C's clean-up catches
            cleaned.append(sig)
            raise
        return 0

    saved = {s: signal.signal(s, signal.SIG_DFL) for s in front.STOP_SIGNALS}
    try:
        assert front.run("prog", body, "interrupted; run it again") == status
        assert all(signal.getsignal(s) == signal.SIG_DFL for s in front.STOP_SIGNALS)
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)
    assert cleaned == [sig]
    name = signal.Signals(sig).name
    assert capsys.readouterr().err == f"prog: stopped by {name}; run it again\n"


def test_a_signal_the_caller_ignores_stays_ignored() -> None:
    """nohup: SIGHUP is ignored, and the front leaves it so."""
    saved = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        assert front.run("prog", lambda: 0 if signal.getsignal(signal.SIGHUP) ==
                         signal.SIG_IGN else 1) == 0
    finally:
        signal.signal(signal.SIGHUP, saved)


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT])
def test_a_full_disk_is_one_line_naming_the_file(capsys, code) -> None:
    error = OSError(code, os.strerror(code), "/scratch/report/index.html")
    assert front.run("prog", raises(error)) == front.EXIT_FAILED == 1
    assert capsys.readouterr().err == (
        f"prog: cannot write /scratch/report/index.html: {os.strerror(code)}\n")


def test_another_os_error_is_not_taken_for_a_full_disk() -> None:
    with pytest.raises(PermissionError):
        front.run("prog", raises(PermissionError(errno.EACCES, "Permission denied", "/x")))


@pytest.mark.parametrize("argv", [["--output=--"], ["-w=--"], ["list", "--env=--", "x"]])
def test_an_option_given_dashes_is_refused_in_one_line(argv) -> None:
    with pytest.raises(UsageError) as err:
        front.bare_dashes(argv)
    name = next(a for a in argv if a.endswith("=--"))[:-3]
    assert str(err.value) == (f"{name}=-- gives {name} no value ('--' marks the end of the "
                              f"options); write {name}=VALUE (a path named -- as ./--)")


def test_dashes_as_a_value_are_a_string_whatever_they_look_like() -> None:
    front.bare_dashes(["--env=--x", "--output=./--", "--", "--opt=--"])  # none refused
    parser = front.ArgParser(prog="p")
    parser.add_argument("--env", action="append", default=[])
    parser.add_argument("--output")
    args = parser.parse_args(["--env=--x", "--env=-=-", "--output=./--"])
    assert (args.env, args.output) == (["--x", "-=-"], "./--")
    with pytest.raises(UsageError):
        parser.parse_args(["--output=--"])


STREAMS = """
import sys
import time
from llmb.shared import front
def body():
    print("node-\\u0661")
    print("warning: node-\\u0662", file=sys.stderr)
    return 4
sys.exit(front.run("prog", body))
"""


def test_an_encoding_that_cannot_show_a_character_writes_it_escaped() -> None:
    proc = subprocess.run([sys.executable, "-c", STREAMS], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(COMMON),
                               "PYTHONIOENCODING": "ascii"})
    assert (proc.returncode, proc.stdout, proc.stderr) == (
        4, "node-\\u0661\n", "warning: node-\\u0662\n")


def test_stderr_closed_its_lines_go_nowhere_not_into_stdout() -> None:
    proc = subprocess.run([sys.executable, "-c", STREAMS], stdout=subprocess.PIPE, text=True,
                          env={**os.environ, "PYTHONPATH": str(COMMON)},
                          preexec_fn=lambda: os.close(2))
    assert (proc.returncode, proc.stdout) == (4, "node-\u0661\n")


def test_stdout_closed_is_refused_before_the_work() -> None:
    proc = subprocess.run([sys.executable, "-c", STREAMS], stderr=subprocess.PIPE, text=True,
                          env={**os.environ, "PYTHONPATH": str(COMMON)},
                          preexec_fn=lambda: os.close(1))
    assert proc.returncode == 1
    assert proc.stderr == ("prog: stdout is closed (>&-): nothing printed could be read; send "
                           "it somewhere, e.g. >/dev/null to discard it\n")
