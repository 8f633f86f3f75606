"""llmb.shared.front: how every Python front ends (an error's own status, Ctrl-C, a reader that
went away)."""

from __future__ import annotations

import os
import subprocess
import sys

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
