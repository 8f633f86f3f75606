"""llmb-run ends by llmb.shared.front's rule, as a shell runs it (the analyzer's and the
installer's cases are beside their CLI tests): a reader that went away is exit 141 and silence,
an LlmbError keeps its own status."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from fakeinstall import make_install
from fronts import PROBE_MESSAGE, failing_front, into_closed_pipe
from paths import REPO

LLMB_RUN = REPO / "installer" / "llmb-run"


def test_llmb_run_list_into_a_closed_pipe_is_141_and_silent(tmp_path: Path) -> None:
    """`llmb-run list | head`: not 0 (nobody read the list whole) and no traceback."""
    install = make_install(tmp_path / "install")
    env = {**os.environ, "LLMB_INSTALL": str(install), "LLMB_PYTHON": sys.executable}
    proc = into_closed_pipe(["bash", str(LLMB_RUN), "list"], env=env, cwd=tmp_path)
    assert (proc.returncode, proc.stderr) == (141, "")


def test_llmb_run_ends_with_an_errors_own_status() -> None:
    proc = failing_front("llmb.llmbrun.cli", "find_config", 7, ["list"])
    assert (proc.returncode, proc.stderr) == (7, f"llmb-run: {PROBE_MESSAGE}\n")
