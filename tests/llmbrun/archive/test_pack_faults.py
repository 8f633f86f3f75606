"""llmb-run archive interrupted or pointed at the wrong place: --output never overwrites the
install's own state or a file that is not an archive; a SIGTERM removes the staging copy; what
a SIGKILL leaves is found on the disk by the next archive (its process is gone) and removed; a
full disk while staging or compressing is one line, exit 1, nothing under the final name.
Faults come from outside: signals sent to the real command, a small tmpfs as the disk."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import fakeinstall
import pytest
import runinstall
from llmb.llmbrun import clusterconfig
from llmb.llmbrun.archive import pack
from llmb.llmbrun.archive import staging as archivestaging
from specialfiles import plant

PATH = f"{Path(sys.executable).parent}:/usr/bin:/bin"


@pytest.fixture
def install(tmp_path: Path) -> Path:
    root = fakeinstall.make_install(tmp_path / "install")
    fakeinstall.make_run(root, "101")
    return root


def archive(root: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return runinstall.run(["archive", *args], root, timeout=timeout, path=PATH)


def staging(directory: Path) -> list[Path]:
    return sorted(directory.glob(".llmb-archive-*"))


OWN = ["llmb_run_history.jsonl", "cluster_config.yaml", ".hf_token",
       ".llmb_install_state.json", "llmb-run", "workloads/x.tar.gz", "venvs/a.tar.gz",
       "images/a.tar.gz", "preflight/latest.json"]


@pytest.mark.parametrize("name", OWN)
def test_output_never_names_the_install_s_own_state(install, name):
    target = install / name
    target.parent.mkdir(parents=True, exist_ok=True)
    if not target.exists():
        target.write_text("state\n")
    before = target.read_bytes()
    proc = archive(install, "--output", str(target))
    assert proc.returncode == 1
    assert proc.stderr.startswith(f"llmb-run: --output {target} ")
    assert len(proc.stderr.splitlines()) == 1
    assert target.read_bytes() == before and staging(target.parent) == []


def test_output_never_overwrites_a_file_that_is_not_an_archive(install, tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("mine\n")
    proc = archive(install, "--output", str(notes))
    assert proc.returncode == 1 and "exists and is not an archive" in proc.stderr
    assert notes.read_text() == "mine\n"
    fifo = tmp_path / "fifo.tar.gz"
    os.mkfifo(fifo)
    proc = archive(install, "--output", str(fifo), timeout=60)
    assert proc.returncode == 1 and "is not a regular file" in proc.stderr


def test_an_older_archive_is_replaced(install, tmp_path):
    out = tmp_path / "a.tar.gz"
    assert archive(install, "--output", str(out)).returncode == 0
    first = out.stat().st_ino
    proc = archive(install, "--output", str(out))
    assert proc.returncode == 0, proc.stderr
    assert out.stat().st_ino != first


def start_archive(root: Path, out: Path) -> subprocess.Popen[str]:
    env = runinstall.llmb_run_env(PATH=PATH)
    return subprocess.Popen(["bash", str(runinstall.LLMB_RUN), "archive", "--output", str(out)],
                            cwd=root, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def slow_install(root: Path) -> None:
    """A run whose log is large enough that staging it takes a few seconds."""
    log = next(root.glob("workloads/*/experiments/*/*/*/log-*_101_0.out"))
    line = b"noise line of a long training log, nothing to redact here\n"
    with log.open("ab") as fh:
        fh.write(line * ((100 << 20) // len(line)))


def quick_again(root: Path) -> None:
    """The large log of slow_install cut back: the next archive need not copy 100 MB again."""
    log = next(root.glob("workloads/*/experiments/*/*/*/log-*_101_0.out"))
    with log.open("r+b") as fh:
        fh.truncate(1 << 20)


def wait_for_staging(directory: Path, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 60
    while not staging(directory):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.02)
    time.sleep(0.3)


def test_sigterm_removes_the_staging_copy(install, tmp_path):
    slow_install(install)
    out = tmp_path / "a.tar.gz"
    proc = start_archive(install, out)
    wait_for_staging(tmp_path, proc)
    proc.send_signal(signal.SIGTERM)  # the wrapper execs llmb-run's python: this is it
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM
    assert err.splitlines()[-1] == ("llmb-run: stopped by SIGTERM; the partial archive was "
                                    "removed")
    assert "Traceback" not in err
    assert staging(tmp_path) == [] and not out.exists()


def test_what_a_sigkill_leaves_is_removed_by_the_next_archive(install, tmp_path):
    slow_install(install)
    out = tmp_path / "a.tar.gz"
    proc = start_archive(install, out)
    wait_for_staging(tmp_path, proc)
    proc.kill()
    proc.wait()
    (left,) = staging(tmp_path)
    quick_again(install)
    again = archive(install, "--output", str(out))
    assert again.returncode == 0, again.stderr
    assert f"removed {left}, left by an archive that was stopped (process {proc.pid} is gone)" \
        in again.stderr
    assert staging(tmp_path) == [] and out.is_file()


def test_a_staging_copy_of_another_host_is_kept(install, tmp_path):
    other = tmp_path / ".llmb-archive-othernode.4242.abcd1234"
    other.mkdir()
    proc = archive(install, "--output", str(tmp_path / "a.tar.gz"))
    assert proc.returncode == 0, proc.stderr
    assert other.is_dir() and f"kept {other}: staged on othernode" in proc.stderr


@pytest.fixture
def small_disk(tmp_path: Path):
    """A 3 MB tmpfs (root only): the archive's directory fills up while it stages."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    mnt = tmp_path / "disk"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mnt)], check=True)
    yield mnt
    subprocess.run(["umount", str(mnt)], check=False)


def test_a_full_disk_is_one_line_and_leaves_nothing(install, small_disk):
    slow_log = next(install.glob("workloads/*/experiments/*/*/*/log-*_101_0.out"))
    with slow_log.open("ab") as fh:
        fh.write(os.urandom(8 << 20).hex().encode())  # does not compress below the disk
    out = small_disk / "a.tar.gz"
    proc = archive(install, "--output", str(out))
    assert proc.returncode == 1
    assert proc.stderr.splitlines()[-1].startswith("llmb-run: cannot write the archive: No "
                                                   "space left on device")
    assert "Traceback" not in proc.stderr
    assert not out.exists() and staging(small_disk) == []


@pytest.mark.parametrize("filler", [b"ab ", b"0123456789abcdef"])
def test_a_log_that_is_one_long_line_is_copied_redacted_in_pieces(tmp_path, filler):
    """A 6 MB line (no newline; with blanks, and one long run of hex): copied in bounded
    pieces, in seconds (an unbounded pattern made redaction quadratic: 64 kB took 10 s), and a
    secret anywhere in it, across a piece boundary included, is masked."""
    from llmb.llmbrun.archive import pack
    from llmb.llmbrun.archive.format import PIECE

    secret = b" hf_" + b"Q7" * 20 + b" "
    src = tmp_path / "log.out"
    body = filler * ((PIECE - 20) // len(filler))
    src.write_bytes(body + secret + body * 5)
    dst = tmp_path / "copy.out"
    started = time.monotonic()
    pack.copy_redacted(src, dst, set())
    assert time.monotonic() - started < 60
    out = dst.read_bytes()
    assert b"hf_Q7Q7" not in out and b"********" in out
    assert len(out) == len(body) * 6 + len(b" ******** ")


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "directory"])
def test_a_history_that_is_not_a_regular_file_is_left_out_and_said(install, tmp_path, kind):
    """The archive is made without it (nothing hangs, nothing huge is read), and says so
    instead of reading as complete."""
    history = install / "llmb_run_history.jsonl"
    plant(history, kind)
    out = tmp_path / "a.tar.gz"
    proc = archive(install, "--output", str(out), timeout=120)
    assert proc.returncode == 0, proc.stderr
    why = {"directory": "cannot be read (Is a directory)", "fifo": "is not a regular file",
           "dev-zero": "is a symbolic link (the archive follows no link)"}[kind]
    assert f"llmb-run: archive: warning: the history is left out: {history} {why}" in proc.stderr
    assert out.is_file() and "Traceback" not in proc.stderr


def _then_sigterm(real, when=lambda *args: True):
    def call(*args, **kwargs):
        if when(*args):
            os.kill(os.getpid(), signal.SIGTERM)  # held back there: delivered once it is done
        return real(*args, **kwargs)
    return call


@pytest.mark.parametrize("late", ["the rename into place", "the staging copy's removal"])
def test_a_late_sigterm_says_the_archive_is_whole_and_leaves_no_staging(
        install, tmp_path, monkeypatch, late):
    """A SIGTERM once the archive is whole: the message is true (no partial archive was
    removed: the archive is written), and the staging copy is removed all the same."""
    cfg = clusterconfig.find_config(str(install / "cluster_config.yaml"), {})
    out = tmp_path / "a.tar.gz"
    if late == "the rename into place":
        monkeypatch.setattr(pack.os, "replace", _then_sigterm(
            os.replace, lambda _src, dst: Path(dst) == out))
    else:
        monkeypatch.setattr(pack.shutil, "rmtree", _then_sigterm(shutil.rmtree))
    with pytest.raises(archivestaging.Stopped) as err:
        pack.cmd_archive(cfg, str(out))
    assert err.value.status == 128 + signal.SIGTERM
    assert str(err.value) == (f"stopped by SIGTERM after the archive {out} was written whole; "
                              "its staging copy was removed")
    with tarfile.open(out) as tar:
        assert tar.getnames()
    assert staging(tmp_path) == []
