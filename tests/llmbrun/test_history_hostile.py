"""A hand-edited llmb_run_history.jsonl (llmb.llmbrun.history) through every command that reads
it: status (table and JSON), rerun (named jobs and --failed), report and archive. A record of
the wrong shape or with values of the wrong type, an integer of thousands of digits, nesting
deeper than JSON parsers take, or a run directory that points at / or /proc is skipped, named
or refused in one line: never a traceback, never a walk of the whole file system. Slurm is
doubled by tests/helpers/slurmshims.py; the runs are real run directories
(tests/helpers/fakeinstall.py)."""

from __future__ import annotations

import json
from pathlib import Path

import fakeinstall
import pytest
import runinstall
from slurmshims import Slurm

SUBMIT = {"type": "submit", "workload": "pretrain_llama3.1", "size": "8b", "dtype": "fp8",
          "scale": 8, "repeat": 1, "gpu_type": "h100"}
HUGE = "9" * 5000
CRAFTED = [
    ("job_id-int", json.dumps({**SUBMIT, "job_id": 5})),
    ("job_id-list", json.dumps({**SUBMIT, "job_id": ["41"]})),
    ("nodes-str", json.dumps({"type": "state", "job_id": "41", "nodes": "x", "state": 5})),
    ("a-list", "[1, 2, 3]"),
    ("a-string", '"submit"'),
    ("null", "null"),
    ("huge-int", '{"type": "submit", "job_id": "60", "scale": ' + HUGE + "}"),
    ("huge-job", '{"type": "submit", "job_id": ' + HUGE + "}"),
    ("deep", "[" * 100_000 + "]" * 100_000),
    ("nan", '{"type": "submit", "job_id": "61", "scale": NaN, "repeat": Infinity}'),
    ("dir-root", json.dumps({**SUBMIT, "job_id": "62", "experiment_dir": "/"})),
    ("dir-proc", json.dumps({**SUBMIT, "job_id": "63", "experiment_dir": "/proc/self"})),
    ("dir-int", json.dumps({**SUBMIT, "job_id": "64", "experiment_dir": 5})),
    ("env-list", json.dumps({**SUBMIT, "job_id": "42", "env": ["BASH_ENV"]})),
    ("placement-str", json.dumps({**SUBMIT, "job_id": "42", "placement": "node1"})),
    ("size-dict", json.dumps({**SUBMIT, "job_id": "42", "size": {"a": 1}})),
    ("experiment-math", json.dumps({**SUBMIT, "job_id": "65", "experiment": "$\\frac{"})),
]
COMMANDS = {
    "status": ["status", "--all"],
    "status-json": ["status", "--all", "--format", "json"],
    "rerun-failed": ["rerun", "--failed", "--dry-run"],
    "rerun-42": ["rerun", "--dry-run", "42"],
    "report": ["report"],
    "archive": ["archive"],
}


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> tuple[Path, list[str]]:
    root = fakeinstall.make_install(tmp_path_factory.mktemp("h") / "llmb")
    good = fakeinstall.make_run(root, "41")
    failed = fakeinstall.make_run(root, "42", complete=False)
    lines = [json.dumps(fakeinstall.submit_record("41", good)),
             json.dumps(fakeinstall.submit_record("42", failed))]
    return root, lines


def run_with(root: Path, tmp_path: Path, lines: list[str], command: str
             ) -> tuple[int, str, list[str]]:
    """The command over this history: (exit status, all output, its error lines)."""
    (root / "llmb_run_history.jsonl").write_text("\n".join(lines) + "\n")
    shims = Slurm(tmp_path / "slurm-bin")
    shims.set(squeue={"41": ["COMPLETED", "acct.x", "node1", "None"]}, sacct="disabled")
    args = COMMANDS[command]
    if command in ("report", "archive"):
        args = [*args, "--output", str(tmp_path / ("out.tar.gz" if command == "archive"
                                                   else "report"))]
    proc = runinstall.run(args, root, path=f"{shims.dir}:/usr/bin:/bin", timeout=120)
    errors = [ln for ln in proc.stderr.splitlines()
              if "warning:" not in ln and not ln.startswith(f"llmb-run: {command}: ")
              and "rerun of job" not in ln]
    return proc.returncode, proc.stdout + proc.stderr, errors


# status skips a bad line and reads on: every record at once (below) reaches each of them;
# rerun stops at the first it cannot use, so each record gets a run of its own
@pytest.mark.parametrize("command", ["rerun-failed", "rerun-42"])
@pytest.mark.parametrize(("kind", "line"), CRAFTED, ids=[k for k, _ in CRAFTED])
def test_a_crafted_record_is_never_a_traceback(base, tmp_path, kind, line, command):
    root, lines = base
    code, output, errors = run_with(root, tmp_path, [*lines, line], command)
    assert "Traceback" not in output
    assert code in (0, 1), output
    if code:
        assert len(errors) == 1, output


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_crafted_record_at_once(base, tmp_path, command):
    """All of them in one history, through each command (report and archive analyze the
    runs: a run directory at / or /proc is never walked)."""
    root, lines = base
    code, output, errors = run_with(root, tmp_path, [*lines, *(ln for _, ln in CRAFTED)],
                                    command)
    assert "Traceback" not in output
    assert code in (0, 1), output
    if code:
        assert len(errors) == 1, output


TYPED = [
    ("env-list", json.dumps({**SUBMIT, "job_id": "42", "env": ["BASH_ENV"]}),
     "env is a list of 1 item(s), not a mapping"),
    ("scale-text", json.dumps({**SUBMIT, "job_id": "42", "scale": "8"}),
     "scale is '8' (text), not a whole number"),
    ("env-value-5000", json.dumps({**SUBMIT, "job_id": "42", "env": {"A": "v" * 5000}}),
     "env.A is 'vvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvv...' (text of 5000 characters), longer "
     "than the 4096 characters it can be"),
    ("placement-exclude-number", json.dumps({**SUBMIT, "job_id": "42",
                                             "placement": {"exclude": 5}}),
     "placement.exclude is 5 (a whole number), not text"),
]


@pytest.mark.parametrize(("line", "problem"), [(ln, p) for _, ln, p in TYPED],
                         ids=[k for k, _, _ in TYPED])
def test_a_record_not_of_its_type_is_skipped_and_named(base, tmp_path, line, problem):
    """Each record is held to SubmitRecord or StateRecord as it is read: one of the wrong type
    is skipped, and the warning names its line and field."""
    root, lines = base
    code, output, _ = run_with(root, tmp_path, [*lines, line], "status")
    assert code == 0 and "Traceback" not in output, output
    assert (f"llmb-run: warning: {root / 'llmb_run_history.jsonl'}: skipped 1 record(s) not of "
            f"their type (line 3: {problem})") in output
