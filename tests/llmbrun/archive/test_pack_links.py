"""llmb-run archive follows no link: a history, preflight report, suite record, screen.json or
screen job output that is a symbolic link to a file elsewhere (or lies under a linked folder),
and runs reached through a linked workload or experiment directory, are left out and said in one
line; nothing of the file the link points at reaches the archive. The install is
tests/helpers/fakeinstall.py's, with a screen (tests/helpers/screenfiles.py), a preflight
report and a suite submitted through the sbatch double."""

from __future__ import annotations

import json
import os
import shutil
import tarfile
from collections.abc import Callable
from pathlib import Path

import fakeinstall
import pytest
import runinstall
import screenfiles
from paths import SHIMS

MARK = "SECRET-OUTSIDE-THE-INSTALL"


@pytest.fixture
def install(tmp_path: Path) -> Path:
    root = fakeinstall.make_install(tmp_path / "llmb")
    run = fakeinstall.make_run(root, "41")
    (root / "llmb_run_history.jsonl").write_text(
        json.dumps(fakeinstall.submit_record("41", run)) + "\n")
    screenfiles.screen_json(root)
    (root / "preflight").mkdir()
    (root / "preflight" / "latest.json").write_text(json.dumps({"checks": [], "nodes": 1}))
    return root


def elsewhere(tmp_path: Path) -> Path:
    """A file outside the install, as a colleague's link would point at."""
    path = tmp_path / "elsewhere" / "secret.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps({"checks": [], "note": MARK}) + "\n")
    return path


def relink(path: Path, target: Path) -> None:
    path.unlink()
    path.symlink_to(target)


def archived_text(path: Path) -> str:
    with tarfile.open(path) as tar:
        return "".join(tar.extractfile(m).read().decode(errors="replace")  # type: ignore[union-attr]
                       for m in tar if m.isfile())


def _workload_elsewhere(root: Path, tmp_path: Path) -> str:
    real = tmp_path / "elsewhere" / "workload"
    real.parent.mkdir(exist_ok=True)
    shutil.move(str(root / "workloads" / "pretrain_llama3.1"), real)
    (root / "workloads" / "pretrain_llama3.1").symlink_to(real)
    for log in real.rglob("log-*.out"):
        log.write_text(log.read_text() + MARK + "\n")
    return "a run"


LINKS: list[tuple[str, Callable[[Path, Path], str]]] = [
    ("history", lambda r, t: (relink(r / "llmb_run_history.jsonl", elsewhere(t)),
                              "the history")[1]),
    ("preflight", lambda r, t: (relink(r / "preflight" / "latest.json", elsewhere(t)),
                                "the preflight report")[1]),
    ("screen", lambda r, t: (relink(next(r.glob("screens/*/screen.json")), elsewhere(t)),
                             "the newest screen")[1]),
    ("screen-output", lambda r, t: (relink(next(r.glob("screens/*/screen-9.out")),
                                           elsewhere(t)), "the newest screen's job output")[1]),
    ("screens-folder", lambda r, t: (shutil.move(str(r / "screens"), t / "screens-real"),
                                     (r / "screens").symlink_to(t / "screens-real"),
                                     (t / "screens-real" / "20260102-030405" / "screen-9.out")
                                     .write_text(MARK), "the screens")[-1]),
    ("workload", _workload_elsewhere),
]


@pytest.mark.parametrize("plant", [p for _, p in LINKS], ids=[k for k, _ in LINKS])
def test_a_link_out_of_the_install_is_left_out_and_said(install, tmp_path, plant):
    what = plant(install, tmp_path)
    out = tmp_path / "a.tar.gz"
    proc = runinstall.run(["archive", "--output", str(out)], install, timeout=300,
                          path=f"{SHIMS}:{os.environ['PATH']}")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert MARK not in archived_text(out)
    if what != "a run":  # runs through a link are not found at all, as runs outside are not
        assert (f"llmb-run: archive: warning: {what} is left out: " in proc.stderr
                and "is a symbolic link (the archive follows no link)" in proc.stderr)


def test_a_suite_record_that_is_a_link_is_left_out(install, tmp_path):
    proc = runinstall.run(["suite", "submit", "--max-scale", "8", "--repeats", "1", "--yes"],
                          install, path=f"{SHIMS}:{os.environ['PATH']}")
    assert proc.returncode == 0, proc.stderr
    record = next(install.glob("suites/*/suite.json"))
    copy = tmp_path / "elsewhere" / "suite.json"
    copy.parent.mkdir(exist_ok=True)
    copy.write_text(record.read_text().replace('"created"', f'"note": "{MARK}", "created"'))
    relink(record, copy)
    out = tmp_path / "a.tar.gz"
    proc = runinstall.run(["archive", "--output", str(out), "--suite", record.parent.name],
                          install, timeout=300, path=f"{SHIMS}:{os.environ['PATH']}")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "llmb-run: archive: warning: the suite's record is left out: " in proc.stderr
    assert MARK not in archived_text(out)


def test_a_run_or_log_named_with_a_secret_is_left_out_and_said(install, tmp_path):
    """Names travel unredacted (members, the index, the analysis, the report): a run directory
    or a log named with HF_TOKEN's value is left out whole, said with the value masked."""
    token = "s3cret-token-value-of-this-user"
    run = next(install.glob("workloads/*/experiments/*/*/"))
    named = run.parent / f"exp_{token}"
    shutil.copytree(run, named)
    log = next(run.glob("*/log-*.out"))
    shutil.copy(log, log.with_name(f"log-{token}_101_1.out"))
    out = tmp_path / "a.tar.gz"
    proc = runinstall.run(["archive", "--output", str(out)], install, timeout=300,
                          path=f"{SHIMS}:{os.environ['PATH']}", HF_TOKEN=token)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "archive: warning: a run whose name holds a secret is left out: " in proc.stderr
    assert "archive: warning: a file whose name holds a secret is left out: " in proc.stderr
    assert token not in proc.stderr + proc.stdout
    with tarfile.open(out) as tar:
        assert not [m.name for m in tar if token in m.name]
    assert token not in archived_text(out)
