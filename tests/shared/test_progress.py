"""llmb.shared.progress: a live line on a terminal (a real pseudo-terminal from the pty module),
plain lines through a pipe; for each long wait that uses it: a command (the venv the installer
creates, setup.sh's image import through the enroot test double), a job (`status --wait`,
`jobs log --follow` while the job has no log); SIGTERM reaches the command."""

from __future__ import annotations

import io
import os
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import fakeinstall
import pytest
from llmb.llmbrun import clusterconfig, status
from llmb.shared import progress, slurmquery
from paths import REPO, SHIMS

ESC = "\x1b"
CHATTY = ("echo one; sleep 0.4; printf '\\033[31mred\\033[0m\\n'; sleep 0.4; "
          "printf 'pct 10%%\\rpct 20%%\\rpct 30%%\\n'; sleep 0.4; echo three")


def env(**extra: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("LLMB_", "SBATCH_"))}
    base.update(PYTHONPATH=str(REPO / "common"), TERM="xterm", COLUMNS="120", **extra)
    return base


def in_pty(argv: list[str], environ: dict[str, str], timeout: float = 120,
           cwd: Path | None = None) -> tuple[int, str]:
    """Run argv with stdin, stdout and stderr on a new pseudo-terminal; (exit status, all it
    wrote, with the terminal's \\r\\n turned back into \\n)."""
    main, child = os.openpty()
    proc = subprocess.Popen(argv, stdin=child, stdout=child, stderr=child, env=environ,
                            cwd=cwd, start_new_session=True)
    os.close(child)
    out = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([main], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(main, 65536)
            except OSError:  # EIO: every writer has closed the terminal
                break
            if not chunk:
                break
            out += chunk
        elif proc.poll() is not None:
            break
    else:
        proc.kill()
        pytest.fail(f"{argv} did not finish in {timeout} s: {out[-2000:]!r}")
    os.close(main)
    return proc.wait(), out.decode(errors="replace").replace("\r\n", "\n")


def piped(argv: list[str], environ: dict[str, str], cwd: Path | None = None
          ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, env=environ, capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL, cwd=cwd)


def live_frames(text: str) -> list[str]:
    """What the live line showed, frame by frame (each redraw starts with \\r ESC[K)."""
    return [f for f in text.split(f"\r{ESC}[K") if f]


# --- a command: python -m llmb.shared.progress LABEL -- CMD ---------------------------------------

def test_command_on_a_terminal_is_one_live_line(tmp_path):
    rc, out = in_pty([sys.executable, "-m", "llmb.shared.progress", "demo", "--",
                      "sh", "-c", CHATTY],
                     env())
    assert rc == 0
    frames = live_frames(out)
    assert re.fullmatch(r"demo: done after \d+s\n", frames[-1])
    assert all("\n" not in f for f in frames[:-1]), frames  # no line of the command's own
    shown = {re.sub(r"^[|/\\-] demo: (.*) \[\d+s\]$", r"\1", f) for f in frames[:-1]}
    assert {"running", "one", "red", "pct 30%", "three"} <= shown
    assert "[31m" not in out  # the command's colours are dropped from the status


def test_command_through_a_pipe_is_plain_lines_and_its_output_passes(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "llmb.shared.progress", "demo", "--", "sh", "-c",
                           CHATTY], env=env(), capture_output=True, timeout=120)
    assert proc.returncode == 0
    assert proc.stdout == f"one\n{ESC}[31mred{ESC}[0m\npct 10%\rpct 20%\rpct 30%\nthree\n".encode()
    proc.stderr = proc.stderr.decode()
    lines = proc.stderr.splitlines()
    assert lines[0] == "demo: running"
    assert re.fullmatch(r"demo: done after \d+s", lines[-1]) and len(lines) == 2
    assert "\r" not in proc.stderr and ESC not in proc.stderr


def test_a_failing_command_keeps_its_last_lines_on_the_terminal():
    script = "echo compiling; echo 'error: no space left on device' >&2; exit 3"
    rc, out = in_pty([sys.executable, "-m", "llmb.shared.progress", "demo", "--",
                      "sh", "-c", script],
                     env())
    assert rc == 3
    assert "  | compiling\n  | error: no space left on device\n" in out
    assert re.search(r"demo: failed \(exit 3\) after \d+s\n$", out)


def test_usage_and_a_missing_command():
    proc = piped([sys.executable, "-m", "llmb.shared.progress", "demo", "sh"], env())
    assert proc.returncode == 2 and proc.stderr.startswith("usage: python3 -m llmb.shared.progress")
    proc = piped([sys.executable, "-m", "llmb.shared.progress", "demo", "--", "no-such-cmd-x"],
                 env())
    assert proc.returncode == 127
    assert proc.stderr.splitlines()[-1] == "llmb: no-such-cmd-x: command not found"


def test_sigterm_is_passed_on_and_waited_for(tmp_path):
    marker = tmp_path / "child"
    script = (f"trap 'kill $!; echo term > {marker}.term; exit 9' TERM; echo $$ > {marker}; "
              "sleep 60 >/dev/null 2>&1 & wait")
    proc = subprocess.Popen([sys.executable, "-m", "llmb.shared.progress", "demo", "--", "sh", "-c",
                             script], env=env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    child = int(marker.read_text())
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 128 + signal.SIGTERM
    assert (tmp_path / "child.term").read_text() == "term\n"  # its trap ran before we left
    with pytest.raises(ProcessLookupError):
        os.kill(child, 0)
    assert err.splitlines()[-1].startswith("demo: failed (exit 143)")


# --- the hooks: venv creation, image import -------------------------------------------------------

def test_venv_creation_on_a_terminal(tmp_path):
    """What the installer's venv step runs (installer._check_call -> run_command)."""
    code = ("import sys; from llmb.shared import progress; "
            f"sys.exit(progress.run_command([sys.executable, '-m', 'venv', '--without-pip', "
            f"{str(tmp_path / 'v')!r}], None, 'python -m venv'))")
    rc, out = in_pty([sys.executable, "-c", code], env())
    assert rc == 0, out
    assert (tmp_path / "v" / "bin" / "python").exists()
    assert re.match(rf"\r{ESC}\[K[|/\\-] python -m venv: running \[\d+s\]", out)
    assert re.search(rf"\r{ESC}\[Kpython -m venv: done after \d+s\n$", out)


def setup_env(tmp_path: Path) -> dict[str, str]:
    return env(PATH=f"{SHIMS}:{Path(sys.executable).parent}:/usr/bin:/bin",
               LLMB_INSTALL=str(tmp_path / "install"), ENROOT_SHIM_DELAY="1",
               LLMB_IMAGE_SPACE_GB="0", VIRTUAL_ENV=str(Path(sys.executable).parent.parent),
               LLMB_SETUP_STEPS="image")


def test_image_import_on_a_terminal(tmp_path):
    rc, out = in_pty(["bash", str(REPO / "llama3.1" / "setup.sh")], setup_env(tmp_path))
    assert rc == 0, out
    assert (tmp_path / "install" / "images" / fakeinstall.IMAGE).is_file()
    assert re.search(rf"\r{ESC}\[K[|/\\-] llmb-setup: image import: running \[\d+s\]", out)
    assert re.search(rf"\r{ESC}\[Kllmb-setup: image import: done after \d+s\n", out)
    assert f"\nllmb-setup: image ready: {tmp_path}/install/images/{fakeinstall.IMAGE}\n" in out


def test_image_import_in_a_batch_log_is_plain(tmp_path):
    proc = piped(["bash", str(REPO / "llama3.1" / "setup.sh")], setup_env(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert "\r" not in proc.stdout + proc.stderr and ESC not in proc.stdout + proc.stderr
    assert proc.stderr.splitlines()[0] == "llmb-setup: image import: running"
    assert re.fullmatch(r"llmb-setup: image import: done after \d+s",
                        proc.stderr.splitlines()[-1])


# --- waiting for a job ----------------------------------------------------------------------------

@pytest.fixture
def cfg(tmp_path: Path) -> clusterconfig.ClusterConfig:
    root = fakeinstall.make_install(tmp_path / "llmb")
    return clusterconfig.find_config(str(root / "cluster_config.yaml"), {})


def scripted_states(monkeypatch, sequence: list[str],
                    then: Callable[[int], None] = lambda n: None) -> list[str]:
    """jobs.states answers each call with the next state of sequence (the last one sticks);
    then(n) runs after the n-th answer."""
    asked: list[str] = []

    def fake(cfg, subs):
        state = sequence[min(len(asked), len(sequence) - 1)]
        asked.append(state)
        then(len(asked))
        return {r["job_id"]: slurmquery.JobInfo(r["job_id"], state, nodes="node1",
                                           reason="Resources" if state == "PENDING" else None)
                for r in subs}

    monkeypatch.setattr(status, "states", fake)
    return asked


def test_status_wait_prints_each_change_once_through_a_pipe(cfg, monkeypatch, capsys):
    scripted_states(monkeypatch, ["PENDING", "PENDING", "RUNNING", "RUNNING", "COMPLETED"])
    status.wait_for(cfg, [{"job_id": "12"}], poll_s=0, sleep=lambda s: None)
    lines = capsys.readouterr().err.splitlines()
    assert lines[:3] == ["llmb-run: waiting for job 12: starting",
                         "llmb-run: waiting for job 12: PENDING (Resources)",
                         "llmb-run: waiting for job 12: RUNNING on node1"]
    assert re.fullmatch(r"llmb-run: waiting for job 12: COMPLETED after \d+s", lines[3])
    assert len(lines) == 4


def test_jobs_log_follow_waits_with_progress_until_the_log_appears(cfg, monkeypatch, capsys,
                                                                  tmp_path):
    run_dir = fakeinstall.make_run(cfg.install, "55")
    logs = list(run_dir.glob("*/log-*.out"))
    hidden = {p: p.read_bytes() for p in logs}
    for p in logs:
        p.unlink()

    def log_appears(n: int) -> None:
        if n == 3:  # the job started; its first lines are in the log
            for p, data in hidden.items():
                p.write_bytes(data)

    scripted_states(monkeypatch, ["PENDING", "PENDING", "RUNNING"], log_appears)
    monkeypatch.setattr(status, "POLL_S", 0)
    rec = {"job_id": "55", "experiment_dir": str(run_dir)}
    status.wait_for_log(cfg, rec, False, 0)
    lines = capsys.readouterr().err.splitlines()
    assert lines == ["llmb-run: job 55: PENDING (Resources); waiting for its log",
                     "llmb-run: job 55: RUNNING on node1; waiting for its log",
                     lines[-1]]
    assert re.fullmatch(r"llmb-run: job 55: done after \d+s", lines[-1])
    status.wait_for_log(cfg, rec, False, 0)  # the log is there: nothing to wait for, no line
    assert capsys.readouterr().err == ""


WAIT_ON_A_TERMINAL = """
import sys
sys.path.insert(0, {tests!r})
import fakeinstall
from llmb.llmbrun import clusterconfig, status
from llmb.shared import slurmquery
seq = iter(["PENDING", "PENDING", "RUNNING", "RUNNING", "COMPLETED"])
status.states = lambda cfg, subs: {{"7": slurmquery.JobInfo("7", next(seq), nodes="node2")}}
cfg = clusterconfig.find_config({config!r}, {{}})
status.wait_for(cfg, [{{"job_id": "7"}}], poll_s=0.3)
"""


def test_status_wait_on_a_terminal_is_one_live_line(cfg):
    code = WAIT_ON_A_TERMINAL.format(tests=str(REPO / "tests" / "helpers"), config=str(cfg.path))
    rc, out = in_pty([sys.executable, "-c", code], env())
    assert rc == 0, out
    frames = live_frames(out)
    assert any(re.fullmatch(r"[|/\\-] llmb-run: waiting for job 7: RUNNING on node2 \[\d+s\]",
                            f) for f in frames), frames
    assert re.fullmatch(r"llmb-run: waiting for job 7: COMPLETED after \d+s\n", frames[-1])
    assert out.count("\n") == 1


# --- the Progress object --------------------------------------------------------------------------

def test_plain_heartbeat_while_nothing_changes():
    out = io.StringIO()
    with progress.Progress("import", out, tty=False, heartbeat_s=0.05) as p:
        p.update("downloading layer 3/9")
        time.sleep(0.4)
    lines = out.getvalue().splitlines()
    assert lines[:2] == ["import: starting", "import: downloading layer 3/9"]
    assert any(re.fullmatch(r"import: downloading layer 3/9 \(still waiting, 0s\)", ln)
               for ln in lines)


def test_a_status_is_always_one_printable_line():
    out = io.StringIO()
    with progress.Progress("x", out, tty=False) as p:
        p.update(f"{ESC}[1mbold{ESC}[0m\nsecond\tline\x07")
    assert out.getvalue().splitlines()[1] == "x: bold second line\\x07"


def test_outcome_on_error_and_interrupt():
    for exc, word in ((RuntimeError, "failed"), (KeyboardInterrupt, "interrupted")):
        out = io.StringIO()
        with pytest.raises(exc), progress.Progress("x", out, tty=True):
            raise exc()
        assert re.search(rf"\r{ESC}\[Kx: {word} after 0s\n$", out.getvalue())


def test_wait_shows_nothing_when_there_is_nothing_to_wait_for():
    out = io.StringIO()
    progress.wait("x", lambda: None, 0, out, tty=False)
    assert out.getvalue() == ""


@pytest.mark.parametrize(("seconds", "text"), [(0, "0s"), (59.9, "59s"), (61, "1m01s"),
                                               (3600 * 5 + 120, "5h02m")])
def test_elapsed_text(seconds, text):
    assert progress.elapsed_text(seconds) == text
