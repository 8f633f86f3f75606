"""llmb.launch.local after a local run (CLUSTER_TYPE=local): torchrun's combined log copied to
where the analyzer looks, the final state read from the SUCCESS file torchx writes, and the
exit status (0 succeeded, 1 failed, 128 + N stopped by signal N). The job folders are laid out as
nemo-run's local executor leaves them: torchx's local scheduler writes
<job dir>/nemo_run/<app id>/<role>/<replica>/{stdout,stderr,combined}.log and, on closing,
<job dir>/nemo_run/<app id>/SUCCESS (torchx/schedulers/local_scheduler.py). `make demo` and the
bats launch tests run a real local job."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
from llmb.analysis import timing
from llmb.container import nemolog
from llmb.launch import local

EXP = "pretrain_llama3.1_8b_fp8_gpus2_tp1_pp1_cp2_vpNone_mbs1_gbs128"
APP = f"{EXP[:30]}-x7k2q9"  # torchx's app id: the name and a random suffix
ANALYZE = "common/parse_train_timing.sh /i/workloads/pretrain_llama3.1/experiments"


def replica(job_dir: Path, text: str, app: str = APP, role: str = EXP, n: int = 0) -> Path:
    folder = job_dir / "nemo_run" / app / role / str(n)
    folder.mkdir(parents=True)
    for name in ("stdout.log", "stderr.log"):
        (folder / name).write_text("")
    (folder / "combined.log").write_text(text)
    return folder


def success_file(job_dir: Path, state: str, app: str = APP) -> Path:
    """What torchx's _LocalAppDef.close() writes."""
    path = job_dir / "nemo_run" / app / "SUCCESS"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({
        "app_id": app, "log_dir": str(path.parent), "final_state": state,
        "last_updated": 1744382925.0,
        "roles": {EXP: [{"replica_id": 0, "pid": 4242, "exitcode": 0 if state == "SUCCEEDED"
                         else 1, "stdout": "stdout.log", "stderr": "stderr.log",
                         "error_file": "<N/A>"}]}}, indent=2))
    return path


def steps(first: int, last: int) -> str:
    return "".join(nemolog.step_line(iteration=i, last_iteration=9, lr=1e-4,
                                     global_batch_size=2, global_step=i,
                                     reduced_train_loss=6.2, train_step_timing=0.05,
                                     tflops_per_gpu=0.0004, consumed_samples=2 * (i + 1)) + "\n"
                   for i in range(first, last + 1))


def test_the_combined_log_goes_where_the_analyzer_looks(tmp_path: Path) -> None:
    replica(tmp_path, "[NeMo I] start\n" + steps(0, 9))
    replica(tmp_path, "rank 1 of another replica\n", n=1)  # torchrun writes rank 0's for all
    replica(tmp_path, "a role of another experiment\n", role="other")
    log = local.collect_log(tmp_path, EXP)
    assert log == tmp_path / f"log-{EXP}_local_0.out"
    assert log.read_text() == "[NeMo I] start\n" + steps(0, 9)
    scan = timing.scan_log(log)
    assert scan.complete() and sorted(scan.steps) == list(range(10))


def test_every_attempt_in_the_job_folder_is_collected_in_order(tmp_path: Path) -> None:
    replica(tmp_path, steps(5, 9), app=f"{APP[:-6]}b00002")
    replica(tmp_path, steps(0, 4), app=f"{APP[:-6]}a00001")
    log = local.collect_log(tmp_path, EXP)
    assert log.read_text() == steps(0, 9)


def test_no_combined_log_is_an_empty_log_not_an_error(tmp_path: Path) -> None:
    log = local.collect_log(tmp_path, EXP)
    assert log.read_text() == ""
    replica(tmp_path, "again\n")
    assert local.collect_log(tmp_path, EXP).read_text() == "again\n"  # rewritten, not added


@pytest.mark.parametrize(("success", "state"), [
    ("SUCCEEDED", "SUCCEEDED"),
    ("FAILED", "FAILED"),
    ("CANCELLED", "CANCELLED"),
    (None, "FAILED"),  # torchx never closed the app: it did not end well
    ("{not json", "FAILED"),
    ("a folder", "FAILED"),
])
def test_the_final_state_from_the_success_file(tmp_path: Path, success: str | None,
                                               state: str) -> None:
    replica(tmp_path, steps(0, 9))
    if success == "{not json":
        (tmp_path / "nemo_run" / APP / "SUCCESS").write_text(success)
    elif success == "a folder":
        (tmp_path / "nemo_run" / APP / "SUCCESS").mkdir()
    elif success is not None:
        success_file(tmp_path, success)
    assert local.final_state(tmp_path) == state


def test_a_success_file_without_a_state_is_a_failure(tmp_path: Path) -> None:
    path = success_file(tmp_path, "SUCCEEDED")
    path.write_text(json.dumps({"app_id": APP}))
    assert local.final_state(tmp_path) == "FAILED"


@pytest.mark.parametrize(("state", "code", "word"), [
    ("SUCCEEDED", 0, "SUCCEEDED"), ("FAILED", 1, "FAILED"), ("CANCELLED", 1, "CANCELLED"),
    (None, 1, "FAILED"),
])
def test_a_run_that_ended_by_itself(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                    state: str | None, code: int, word: str) -> None:
    replica(tmp_path, steps(0, 9))
    if state:
        success_file(tmp_path, state)
    assert local.finish(tmp_path, EXP, None, ANALYZE) == code
    out = capsys.readouterr()
    assert out.err == ""
    assert out.out.splitlines() == [f"llmb: local run of {EXP} finished: {word}",
                                    f"llmb: log: {tmp_path}/log-{EXP}_local_0.out",
                                    f"llmb: analyze with: {ANALYZE}"]


@pytest.mark.parametrize(("signal_name", "code"), [("SIGINT", 130), ("SIGTERM", 143),
                                                    ("SIGHUP", 129)])
def test_a_run_stopped_by_a_signal_keeps_its_log_so_far(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], signal_name: str,
        code: int) -> None:
    replica(tmp_path, steps(0, 4))
    success_file(tmp_path, "CANCELLED")
    assert local.finish(tmp_path, EXP, signal_name, ANALYZE) == code
    out = capsys.readouterr()
    log = tmp_path / f"log-{EXP}_local_0.out"
    assert out.out == ""
    assert out.err == f"llmb: local run of {EXP} stopped by {signal_name}; its log so far: {log}\n"
    assert log.read_text() == steps(0, 4)


def test_interrupted_names_its_signal() -> None:
    stopped = local.Interrupted(signal.SIGTERM)
    assert (stopped.name, str(stopped)) == ("SIGTERM", "SIGTERM")
    assert set(local.STOP_SIGNALS) == {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
