"""Job tracking (llmb.llmbrun.status, llmb.shared.slurmquery): `status` when Slurm forgets a job
(PURGED: squeue, scontrol and sacct all miss it), without accounting, with Slurm unreachable, and
`jobs log` (with --follow). Slurm is doubled by tests/helpers/slurmshims.py with Slurm 22.05's own
wording; the analyzer is the real one, over the fixture logs of tests/fixtures/logs/verdicts. The
same paths on the real test cluster: tests/e2e/test_operations_e2e.py."""

from __future__ import annotations

import io
import json
import threading
import time
from pathlib import Path

import pytest
from llmb.llmbrun import clusterconfig, status
from llmb.llmbrun.errors import RunError
from llmb.llmbrun.history import History
from llmb.shared import slurmquery
from runinstall import fixture_run, make_install, run
from slurmshims import Slurm
from specialfiles import plant

OK_JOB, FAILED_JOB = "2201400", "2201462"  # fixture logs: 8b Success; 70b NCCL timeout
EXP = "pretrain_llama3.1_8b_fp8_gpus8_tp1_pp1_cp2_vpNone_mbs1_gbs128"


@pytest.fixture
def install(tmp_path: Path) -> Path:
    return make_install(tmp_path / "install")


@pytest.fixture
def shims(tmp_path: Path, monkeypatch) -> Slurm:
    """Only the shims on PATH for in-process calls (the host may have the real commands)."""
    s = Slurm(tmp_path / "slurm-bin")
    monkeypatch.setenv("PATH", str(s.dir))
    return s


def record(install: Path, job: str, run_dir: Path | str | None = None, **extra) -> None:
    History(install / "llmb_run_history.jsonl").append({
        "type": "submit", "job_id": job, "workload": "pretrain_llama3.1", "size": "8b",
        "dtype": "fp8", "scale": 8, "repeat": 1, "gpu_type": "h100", "experiment": EXP,
        "experiment_dir": str(run_dir) if run_dir else None, **extra})


def config(install: Path) -> clusterconfig.ClusterConfig:
    return clusterconfig.find_config(str(install / "cluster_config.yaml"), {})


def status_json(install: Path, capsys, *job_ids: str) -> list[dict]:
    assert status.cmd_status(config(install), True, "json", job_ids=list(job_ids)) == 0
    return json.loads(capsys.readouterr().out)["jobs"]


# --- state: squeue, then scontrol, then sacct; PURGED when none knows the job ----------------

def test_purged_without_accounting_keeps_the_result_from_the_logs(install, shims, capsys):
    record(install, OK_JOB, fixture_run(OK_JOB))
    shims.set(sacct="disabled")
    (row,) = status_json(install, capsys)
    assert row["state"] == slurmquery.PURGED
    assert "squeue and scontrol no longer know it; no accounting" in row["state_detail"]
    assert (row["result"], row["time_mean"] > 0) == ("Success", True)
    assert [c.split()[0] for c in shims.calls()] == ["squeue", "scontrol", "sacct"]
    # settled: remembered, so Slurm is not asked again
    states = History(install / "llmb_run_history.jsonl").final_states()
    assert states[OK_JOB]["state"] == slurmquery.PURGED
    shims.clear()
    assert status_json(install, capsys)[0]["state"] == slurmquery.PURGED
    assert shims.calls() == []


def test_accounting_answers_for_a_job_squeue_forgot(install, shims, capsys):
    record(install, FAILED_JOB, fixture_run(FAILED_JOB))
    shims.set(sacct={FAILED_JOB: ["FAILED", f"acct.{EXP}", "nid[001408-001423]"]})
    (row,) = status_json(install, capsys)
    assert (row["state"], row["nodes"], row["result"]) == ("FAILED", "nid[001408-001423]",
                                                          "Failed")
    assert row["suspect_nodes"] == ["nid001412"]
    assert "NCCL timeout" in row["reason"]


def test_accounting_down_is_purged_for_now_but_not_remembered(install, shims, capsys):
    record(install, OK_JOB, fixture_run(OK_JOB))
    shims.set(sacct="down")
    (row,) = status_json(install, capsys)
    assert row["state"] == slurmquery.PURGED
    assert "sacct unavailable (sacct failed: sacct: error: Problem talking to the database" \
        in row["state_detail"]
    assert History(install / "llmb_run_history.jsonl").final_states() == {}


def test_slurm_not_installed_is_unknown_and_status_still_answers(install, shims, capsys):
    record(install, OK_JOB, fixture_run(OK_JOB))
    shims.set(absent=["squeue", "scontrol", "sacct", "scancel"])
    (row,) = status_json(install, capsys)
    assert row["state"] == slurmquery.UNKNOWN
    assert row["state_detail"] == "cannot ask Slurm: squeue is not installed"
    assert row["result"] == "Success"  # the logs still tell
    assert History(install / "llmb_run_history.jsonl").final_states() == {}


def test_squeue_then_scontrol_and_a_reused_job_id(install, shims, capsys):
    record(install, "11", None)
    record(install, "12", None)
    record(install, "13", None)
    shims.set(squeue={"11": ["PENDING", f"acct.{EXP}", "(null)", "Resources"],
                      "13": ["RUNNING", "someone-elses-job", "node9", "None"]},
              scontrol={"12": ["COMPLETED", f"acct.{EXP}", "node1", "None"]})
    rows = {r["job_id"]: r for r in status_json(install, capsys)}
    assert (rows["11"]["state"], rows["11"]["reason"]) == ("PENDING", "Slurm: Resources")
    assert (rows["12"]["state"], rows["12"]["nodes"]) == ("COMPLETED", "node1")
    assert rows["13"]["state"] == slurmquery.PURGED  # Slurm reused id 13 for another job
    assert capsys.readouterr().err == ""


def test_history_damage_is_one_warning_never_a_traceback(install, shims, capsys):
    hist = install / "llmb_run_history.jsonl"
    record(install, OK_JOB, fixture_run(OK_JOB))
    with hist.open("a") as fh:
        fh.write('{"type": "submit", "workload": "pretrain_llama3.1"}\n')  # no job_id
        fh.write('{"type": "submit", "job_id": "", "size": "8b"}\n')
        fh.write("not json at all\n")
        fh.write('{"type": "submit", "job_id": "77", "experiment_dir": ["a list"]}\n')
        fh.write('["a", "list"]\n')
    proc = run(["status"], install, path=f"{shims.dir}:/usr/bin:/bin")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == [
        f"llmb-run: warning: {hist}: skipped 2 line(s) that are not JSON records (line 4, 6) "
        "and 2 submit record(s) without a usable job_id (line 2, 3) and 1 record(s) not of "
        "their type (line 5: experiment_dir is a list of 1 item(s), not text or null)"]
    assert [line.split()[0] for line in proc.stdout.splitlines()] == ["JOB", OK_JOB]


def test_unreadable_history_is_one_line(install, shims, capsys):
    (install / "llmb_run_history.jsonl").mkdir()
    proc = run(["status"], install, path=f"{shims.dir}:/usr/bin:/bin")
    assert proc.returncode == 1
    assert proc.stderr == (f"llmb-run: cannot read {install}/llmb_run_history.jsonl: "
                           "Is a directory\n")


def test_wait_gives_up_after_its_timeout(install, shims, capsys):
    record(install, "21", None)
    shims.set(squeue={"21": ["RUNNING", f"acct.{EXP}", "node1", "None"]})
    with pytest.raises(RunError, match=r"1 job\(s\) still active after 0 s: 21 "
                                                 r"RUNNING"):
        status.wait_for(config(install), status.selected(config(install), True), timeout_s=0,
                      sleep=lambda s: None)


@pytest.mark.parametrize(("args", "message"), [
    (["status", "--timeout", "5"], "status --timeout applies with --wait only"),
    (["status", "--wait", "--timeout", "0"], "argument --timeout: 0 is not seconds: a whole "
                                             "number from 1 to 604800"),
    (["status", "--wait", "--timeout", "1e3"], "argument --timeout: 1e3 is not seconds"),
    (["status", "--format=xml"], "argument --format: invalid choice: 'xml'"),
    (["jobs", "log"], "the following arguments are required: JOB"),
    (["jobs", "tail", "1"], "argument log: invalid choice: 'tail'"),
    (["jobs", "log", "1", "--follow=yes"], "argument --follow/-f: ignored explicit argument"),
])
def test_flag_errors_are_one_usage_line(install, args, message):
    proc = run(args, install, path="/nonexistent:/usr/bin:/bin")
    assert proc.returncode == 2
    assert len(proc.stderr.splitlines()) == 1
    assert proc.stderr.startswith("llmb-run: ") and message in proc.stderr, proc.stderr
    assert not (install / "llmb_run_history.jsonl").exists()


# --- jobs log ---------------------------------------------------------------------------------

def test_jobs_log_prints_every_restart_in_order_and_the_batch_output(install, shims, tmp_path):
    run_dir = tmp_path / "run"
    logs = run_dir / EXP
    logs.mkdir(parents=True)
    (logs / "log-x_31_1.out").write_text("second attempt\n")
    (logs / "log-x_31_0.out").write_text("first attempt\n")
    (logs / "log-x_310_0.out").write_text("another job\n")
    (logs / "sbatch_x_31.out").write_text("batch output\n")
    record(install, "31", run_dir)
    shims.set(squeue={"31": ["COMPLETED", f"acct.{EXP}", "node1", "None"]})
    path = f"{shims.dir}:/usr/bin:/bin"
    proc = run(["jobs", "log", "31"], install, path=path)
    assert (proc.returncode, proc.stdout) == (0, "first attempt\nsecond attempt\n")
    assert run(["jobs", "log", "31", "--batch"], install, path=path).stdout == "batch output\n"


def test_jobs_log_without_a_log_or_a_record_is_one_line(install, shims, tmp_path):
    record(install, "41", tmp_path)
    shims.set(squeue={"41": ["PENDING", f"acct.{EXP}", "(null)", "Priority"]})
    path = f"{shims.dir}:/usr/bin:/bin"
    proc = run(["jobs", "log", "41"], install, path=path)
    assert (proc.returncode, proc.stderr) == (
        1, f"llmb-run: job 41 has no log yet (PENDING) under {tmp_path}\n")
    proc = run(["jobs", "log", "1\n2"], install, path=path)
    assert proc.returncode == 1
    assert proc.stderr.startswith("llmb-run: job 1\\n2 is not in ")
    assert len(proc.stderr.splitlines()) == 1


def test_jobs_log_follow_prints_as_it_grows_until_the_job_ends(install, shims, tmp_path,
                                                               monkeypatch):
    run_dir = tmp_path / "run"
    (run_dir / EXP).mkdir(parents=True)
    log = run_dir / EXP / "log-x_51_0.out"
    record(install, "51", run_dir)
    shims.set(squeue={"51": ["RUNNING", f"acct.{EXP}", "node2", "None"]})
    monkeypatch.setattr(status, "POLL_S", 0.05)
    out = io.StringIO()

    def job() -> None:
        time.sleep(0.3)
        log.write_bytes(b"step 1 \xe2\x9c")  # a UTF-8 character split across two writes
        time.sleep(0.3)
        with log.open("ab") as fh:
            fh.write(b"\x93 done\n")
        time.sleep(0.3)
        shims.set(squeue={"51": ["COMPLETED", f"acct.{EXP}", "node2", "None"]})

    writer = threading.Thread(target=job)
    writer.start()
    code = status.cmd_log(config(install), "51", follow=True, batch=False, poll_s=0.05, out=out)
    writer.join()
    assert code == 0
    assert out.getvalue() == "step 1 \u2713 done\n"


def test_jobs_log_follow_stops_when_slurm_cannot_be_asked(install, shims, tmp_path, capsys):
    record(install, "61", tmp_path)
    shims.set(absent=["squeue", "scontrol", "sacct", "scancel"])
    code = status.cmd_log(config(install), "61", follow=True, batch=False, poll_s=0.01,
                        out=io.StringIO())
    assert code == 1
    assert capsys.readouterr().err == ("llmb-run: stopped following job 61: cannot ask Slurm: "
                                       "squeue is not installed\n")


# --- at scale, under faults, hostile history ---------------------------------------------------

def test_status_all_with_thousands_of_unfinished_jobs(install, shims):
    ids = [str(300_000_000 + i) for i in range(20_000)]
    with (install / "llmb_run_history.jsonl").open("w") as fh:
        for job in ids:
            fh.write(json.dumps({"type": "submit", "job_id": job, "experiment": EXP,
                                 "workload": "pretrain_llama3.1", "size": "8b"}) + "\n")
    shims.set(squeue={job: ["RUNNING", f"acct.{EXP}", "node1", "None"] for job in ids})
    proc = run(["status", "--all", "--format=json"], install,
               path=f"{shims.dir}:/usr/bin:/bin")
    assert proc.returncode == 0, proc.stderr
    states = {r["state"] for r in json.loads(proc.stdout)["jobs"]}
    assert states == {"RUNNING"}


def test_one_busy_moment_of_slurmctld_does_not_make_a_job_unknown(install, shims):
    record(install, "41")
    shims.set(squeue={"41": ["RUNNING", f"acct.{EXP}", "node1", "None"]},
              faults={"squeue": {"fail": 1}})
    proc = run(["status", "--format=json"], install, path=f"{shims.dir}:/usr/bin:/bin")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["jobs"][0]["state"] == "RUNNING"


@pytest.mark.parametrize("job", ["-1", "--version", "-j1"])
def test_a_recorded_job_id_that_is_an_option_never_reaches_slurm(install, shims, job):
    record(install, "41")
    with (install / "llmb_run_history.jsonl").open("a") as fh:
        fh.write(json.dumps({"type": "submit", "job_id": job, "experiment": EXP}) + "\n")
    shims.set(squeue={"41": ["RUNNING", f"acct.{EXP}", "node1", "None"]})
    proc = run(["status", "--all"], install, path=f"{shims.dir}:/usr/bin:/bin")
    assert proc.returncode == 0, proc.stderr
    assert "1 submit record(s) without a usable job_id (line 2)" in proc.stderr
    assert all(job not in c.split() for c in shims.calls())


HOSTILE_HISTORY = [
    ("deep", "[" * 100_000 + "]" * 100_000),
    ("huge-int", '{"type": "submit", "job_id": ' + "9" * 5000 + "}"),
    ("huge-scale", '{"type": "submit", "job_id": "42", "scale": ' + "9" * 5000 + "}"),
    ("long-line", '{"type": "submit", "job_id": "42", "pad": "' + "x" * (2 << 20) + '"}'),
    ("types", '{"type": "submit", "job_id": "42", "scale": {"a": 1}, "env": [1], '
              '"placement": "x", "experiment_dir": 5, "time": [], "repeat": "x"}'),
    ("state-types", '{"type": "state", "job_id": "42", "state": ["x"], "nodes": {"a": 1}}'),
    ("nul", '{"type": "submit", "job_id": "42\\u0000"}'),
    ("not-utf8", b'{"type": "submit", "job_id": "\xff\xfe"}'.decode("latin-1")),
]


@pytest.mark.parametrize(("kind", "line"), HOSTILE_HISTORY, ids=[k for k, _ in HOSTILE_HISTORY])
@pytest.mark.parametrize("fmt", ["table", "json"])
def test_a_hand_edited_history_is_never_a_traceback(install, shims, kind, line, fmt):
    record(install, "41")
    with (install / "llmb_run_history.jsonl").open("a", encoding="latin-1") as fh:
        fh.write(line + "\n")
    shims.set(squeue={"41": ["RUNNING", f"acct.{EXP}", "node1", "None"],
                      "42": ["COMPLETED", f"acct.{EXP}", "node1", "None"]})
    proc = run(["status", "--all", f"--format={fmt}"], install,
               path=f"{shims.dir}:/usr/bin:/bin")
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.splitlines()) <= 1


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "directory"])
def test_a_history_that_is_not_a_regular_file_is_one_line(install, shims, kind):
    hist = install / "llmb_run_history.jsonl"
    plant(hist, kind)
    proc = run(["status"], install, path=f"{shims.dir}:/usr/bin:/bin", timeout=30)
    assert proc.returncode == 1
    assert proc.stderr.startswith(f"llmb-run: cannot read {hist}: ")
    assert len(proc.stderr.splitlines()) == 1
