"""llmb.llmbrun.history: one JSON line per record, appended and read under fcntl locks, the file
private (0600) from its first byte; lines that are not records, and submit records without a job
id, skipped and counted for one warning line. Concurrent writers in separate processes are in
test_cli.py (test_history_survives_concurrent_writers)."""

from __future__ import annotations

import fcntl
import json
import os
import stat
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import fakeinstall
import pytest
from llmb.llmbrun.history import History

RUN_DIR = "/lustre/llmb/workloads/pretrain_llama3.1/experiments/e/e_101000"


def submit(job: object, **extra: object) -> dict[str, object]:
    return fakeinstall.submit_record(job, Path(RUN_DIR), **extra)  # type: ignore[arg-type]


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_file_is_private_from_its_first_byte(tmp_path: Path) -> None:
    path = tmp_path / "install" / "llmb_run_history.jsonl"
    old = os.umask(0)  # a careless shell: new files would be world-writable
    try:
        History(path).append(submit("101"))
    finally:
        os.umask(old)
    assert mode(path) == 0o600


def test_a_file_left_wider_by_an_older_llmb_run_is_narrowed(tmp_path: Path) -> None:
    path = tmp_path / "llmb_run_history.jsonl"
    path.write_text(json.dumps(submit("100")) + "\n")
    path.chmod(0o644)
    History(path).append(submit("101"))
    assert mode(path) == 0o600
    assert [r["job_id"] for r in History(path).submissions()] == ["100", "101"]


def test_each_record_is_one_whole_line(tmp_path: Path) -> None:
    path = tmp_path / "h.jsonl"
    history = History(path)
    record = submit("101", env={"NOTE": "two\nlines"}, experiment="é")
    history.append(record)
    history.append({"type": "state", "job_id": "101", "state": "COMPLETED", "nodes": "node1"})
    text = path.read_text()
    assert text.count("\n") == 2 and text.endswith("\n")
    first = text.splitlines()[0]
    assert first == json.dumps(record, sort_keys=True)
    assert history.records()[0] == record


def test_no_file_is_no_record(tmp_path: Path) -> None:
    scan = History(tmp_path / "none.jsonl").scan()
    assert (scan.records, scan.bad_lines, scan.no_job_id) == ([], [], [])
    assert scan.problem(tmp_path / "none.jsonl") is None


def test_damaged_lines_are_skipped_and_counted(tmp_path: Path) -> None:
    path = tmp_path / "h.jsonl"
    lines = [json.dumps(submit("101")),
             '{"type": "submit", "job_id": "102", "experim',  # a writer that crashed
             "",
             '["a", "list"]',
             json.dumps(submit(None)),
             json.dumps(submit(True)),
             json.dumps(submit("  ")),
             json.dumps(submit(["1"])),
             "hand-written note",
             json.dumps(submit(103)),
             json.dumps(submit(" 104 ")),
             "   ",
             json.dumps({"type": "state", "job_id": "101", "state": "COMPLETED"})]
    path.write_text("\n".join(lines) + "\n")
    scan = History(path).scan()
    assert scan.bad_lines == [2, 4, 9]
    assert scan.no_job_id == [5, 6, 7, 8]
    assert [r["job_id"] for r in scan.records] == ["101", "103", "104", "101"]
    assert scan.problem(path) == (
        f"{path}: skipped 3 line(s) that are not JSON records (line 2, 4, 9) and 4 submit "
        "record(s) without a usable job_id (line 5, 6, 7, 8)")


def test_the_warning_names_at_most_five_lines(tmp_path: Path) -> None:
    path = tmp_path / "h.jsonl"
    path.write_text("x\n" * 7)
    assert History(path).scan().problem(path) == (
        f"{path}: skipped 7 line(s) that are not JSON records (line 1, 2, 3, 4, 5)")


def test_bytes_that_are_not_utf8_do_not_stop_the_scan(tmp_path: Path) -> None:
    path = tmp_path / "h.jsonl"
    path.write_bytes(b'{"type": "submit", "job_id": "7", "experiment": "caf\xe9"}\n\xff\xfe\n')
    scan = History(path).scan()
    assert scan.records[0]["experiment"] == "caf\ufffd" and scan.bad_lines == [2]


def test_submissions_and_the_last_final_state_of_each_job(tmp_path: Path) -> None:
    history = History(tmp_path / "h.jsonl")
    for record in (submit("101"), submit("102"),
                   {"type": "state", "job_id": "101", "state": "FAILED", "nodes": "n1"},
                   {"type": "state", "job_id": 101, "state": "COMPLETED", "nodes": "n1"},
                   {"type": "state", "job_id": "102", "state": None},
                   {"type": "state", "job_id": True, "state": "COMPLETED"},
                   {"type": "note", "text": "kept, not a submission"}):
        history.append(record)
    assert [r["job_id"] for r in history.submissions()] == ["101", "102"]
    states = history.final_states()
    assert list(states) == ["101"] and states["101"]["state"] == "COMPLETED"
    scan = history.scan()  # the two state records that are not of their type are skipped
    assert len(scan.records) == 5 and scan.mistyped_count == 2
    assert scan.mistyped[0] == "line 5: state is null, not text"


# --- the locks ---------------------------------------------------------------------------------

@contextmanager
def held(path: Path, kind: int) -> Iterator[None]:
    """Another holder of the file's lock (its own open file, as another llmb-run has)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, kind)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def in_thread(work) -> threading.Thread:
    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("kind", [fcntl.LOCK_EX, fcntl.LOCK_SH])
def test_append_waits_for_every_other_holder(tmp_path: Path, kind: int) -> None:
    path = tmp_path / "h.jsonl"
    history = History(path)
    history.append(submit("101"))
    with held(path, kind):
        writer = in_thread(lambda: history.append(submit("102")))
        writer.join(0.3)
        assert writer.is_alive()  # waiting for the lock, nothing written yet
        assert path.read_text().count("\n") == 1
    writer.join(10)
    assert not writer.is_alive()
    assert [r["job_id"] for r in history.submissions()] == ["101", "102"]


def test_a_scan_waits_for_a_writer_but_not_for_another_reader(tmp_path: Path) -> None:
    path = tmp_path / "h.jsonl"
    history = History(path)
    history.append(submit("101"))
    found: list[int] = []
    with held(path, fcntl.LOCK_SH):
        reader = in_thread(lambda: found.append(len(history.records())))
        reader.join(10)
        assert found == [1]
    with held(path, fcntl.LOCK_EX):
        reader = in_thread(lambda: found.append(len(history.records())))
        reader.join(0.3)
        assert reader.is_alive() and found == [1]
        with path.open("a") as fh:  # what the lock holder writes before it lets go
            fh.write(json.dumps(submit("102")) + "\n")
    reader.join(10)
    assert found == [1, 2]
