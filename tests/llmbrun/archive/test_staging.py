"""llmb.llmbrun.archive.staging: what `llmb-run archive` may write over, and its staging directories
(removed on SIGTERM, swept once their process is gone). The install is a real one as the
installer writes it (tests/helpers/fakeinstall.py); archive runs through these in
test_pack_faults.py."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import fakeinstall
import pytest
from llmb.llmbrun import clusterconfig
from llmb.llmbrun.archive import staging
from llmb.llmbrun.errors import RunError


@pytest.fixture
def cfg(tmp_path: Path) -> clusterconfig.ClusterConfig:
    root = fakeinstall.make_install(tmp_path / "install")
    return clusterconfig.find_config(str(root / "cluster_config.yaml"), {})


@pytest.mark.parametrize(("where", "words"), [
    (lambda c: c.tree.history, "is a file of this install"),
    (lambda c: c.path, "is a file of this install"),
    (lambda c: c.tree.workloads / "a.tar.gz", "lies inside this install's workloads/"),
])
def test_the_installs_own_files_are_never_the_output(cfg, where, words) -> None:
    with pytest.raises(RunError, match=words) as err:
        staging.refuse_own(cfg, where(cfg))
    assert "\n" not in str(err.value)


def test_an_existing_file_that_is_no_archive_is_not_overwritten(cfg, tmp_path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("mine\n")
    with pytest.raises(RunError, match="exists and is not an archive"):
        staging.refuse_own(cfg, notes)
    old = tmp_path / "old.tar.gz"
    old.write_bytes(staging.GZIP_MAGIC + b"rest")
    staging.refuse_own(cfg, old)  # an earlier archive may be replaced


def test_sweep_removes_what_a_dead_process_left_and_keeps_the_rest(tmp_path) -> None:
    host = socket.gethostname()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    left = tmp_path / f"{staging.STAGING}{host}.{dead}.abc"
    alive = tmp_path / f"{staging.STAGING}{host}.{os.getpid()}.def"
    other = tmp_path / f"{staging.STAGING}elsewhere.1.ghi"
    for d in (left, alive, other):
        (d / "llmb-archive").mkdir(parents=True)
    notes = staging.sweep(tmp_path)
    assert not left.exists() and alive.is_dir() and other.is_dir()
    assert len(notes) == 2
    assert any("removed" in n and f"process {dead} is gone" in n for n in notes)
    assert any("kept" in n and "staged on elsewhere" in n for n in notes)


def test_a_sigterm_while_staging_is_one_error_with_its_exit_status() -> None:
    with pytest.raises(staging.Stopped) as err, staging.stoppable():
        os.kill(os.getpid(), signal.SIGTERM)
    assert err.value.status == 128 + signal.SIGTERM and "SIGTERM" in str(err.value)
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the handler is put back
