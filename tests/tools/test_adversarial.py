"""make adversarial's judge: what makes a front's ending a defect, on commands that end each way."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import adversarial
from adversarial_cases import CANARY, Case, Site


def outcome(tmp_path: Path, code: str, **env: str) -> str | None:
    case = Case("test", "case", (sys.executable, "-c", code, "{marker}"), env, cwd="{work}")
    return adversarial.run_case(case, Site(tmp_path, sys.executable)).defect


@pytest.mark.parametrize(("code", "defect"), [
    ("print('ok')", None),
    ("import sys; print('llmb: GPU_TYPE=x is not one; use h100', file=sys.stderr); sys.exit(1)",
     None),
    ("raise ValueError('boom')", "a traceback: ValueError: boom"),
    ("import sys; print('nope', file=sys.stderr); sys.exit(1)",
     "exit 1 without the front's one line"),
    ("import sys; sys.exit(7)", "exit status 7"),
    ("import sys, pathlib; pathlib.Path(sys.argv[1]).touch()", "the payload ran"),
    (f"print({CANARY!r})", "the canary token was shown"),
    ("import sys; print('llmb: a\\nb\\nc', file=sys.stderr); sys.exit(1)",
     "exit 1 with 3 lines on stderr"),
])
def test_a_front_that_ends_badly_is_a_defect(tmp_path: Path, code: str,
                                             defect: str | None) -> None:
    found = outcome(tmp_path, code)
    assert (found is None) if defect is None else (found or "").startswith(defect), found


def test_every_surface_has_cases_and_names_are_unique() -> None:
    cases = adversarial.adversarial_cases.all_cases()
    assert len(cases) >= 300
    assert len({(c.surface, c.name) for c in cases}) == len(cases)
