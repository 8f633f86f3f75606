"""`llmb-run rerun`: which recorded runs are submitted again (--failed, JOB ids), with the
recorded configuration and placement, placement flags replacing recorded ones, and
--exclude-suspect adding the nodes the analyzer names. `plan` is tested with analyzer JSON of
our own; the command end to end (dry run through launch.sh) with the real analyzer over the
fixture logs. Real submissions: tests/e2e/test_operations_e2e.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from llmb.launch import placement
from llmb.launch.placement import Placement
from llmb.llmbrun import analyzer, rerun
from llmb.llmbrun.errors import RunError
from llmb.shared import redact, slurmquery
from runinstall import fixture_run, make_install, run
from slurmshims import Slurm

FAILED_JOB = "2201462"  # fixture: 70b fp8 x128, NCCL timeout, suspect nid001412


def sub(job: str, **extra) -> dict:
    rec = {"type": "submit", "job_id": job, "workload": "pretrain_llama3.1", "size": "8b",
           "dtype": "fp8", "scale": 8, "repeat": 1, "gpu_type": "h100", "profile": False,
           "smoke": False, "env": {}, "placement": {}}
    rec.update(extra)
    return rec


def found(**status: tuple[str, list[str]]) -> analyzer.RunAnalysis:
    """Analyzer results: job -> (status, suspect nodes)."""
    return analyzer.RunAnalysis(results={
        job: [{"filename": f"{job}/e/log-x_{job}_0.out", "status": s, "suspect_nodes": n}]
        for job, (s, n) in status.items()})


def infos(**states: str) -> dict[str, slurmquery.JobInfo]:
    return {job: slurmquery.JobInfo(job, state) for job, state in states.items()}


def plan(subs, states, analyzed, job_ids=(), failed=True, suspect=False,
         override=None, all_subs=None):
    return rerun.plan(subs, states, analyzed, all_subs or subs, list(job_ids), failed,
                      suspect, override or Placement(), "h100")


def test_failed_picks_failed_runs_not_rerun_yet():
    subs = [sub("1"), sub("2"), sub("3"), sub("4"), sub("5"), sub("6"),
            sub("7", rerun_of="6"), sub("8")]
    states = infos(**{"1": "COMPLETED", "2": "FAILED", "3": "COMPLETED", "4": slurmquery.PURGED,
                      "5": "RUNNING", "6": "TIMEOUT", "7": "PENDING", "8": "NODE_FAIL"})
    analyzed = found(**{"1": ("Success", []), "2": ("Failed", []), "3": ("Invalid", []),
                        "6": ("Failed", [])})
    picked = {r.job_id: r.why for r in plan(subs, states, analyzed)}
    assert picked == {"2": "FAILED/Failed", "3": "COMPLETED/Invalid",
                      "4": "PURGED without a log", "8": "NODE_FAIL"}


def test_explicit_jobs_rerun_even_when_they_succeeded_but_never_while_active():
    subs = [sub("1"), sub("2")]
    states = infos(**{"1": "COMPLETED", "2": "RUNNING"})
    (r,) = plan([subs[0]], states, found(**{"1": ("Success", [])}), ["1"], failed=False,
                all_subs=subs)
    assert (r.job_id, r.task.scale, r.task.size) == ("1", 8, "8b")
    with pytest.raises(RunError, match="job 2 is still RUNNING; rerun it when it has ended"):
        plan([subs[1]], states, found(), ["2"], failed=False, all_subs=subs)


def test_recorded_configuration_and_placement_flags_replacing_recorded_ones():
    rec = sub("1", profile=True, smoke=True, env={"MAX_STEPS": "20"},
              placement={"exclude": "node3", "qos": "high", "slurm_args": ["--comment=x"]})
    override = placement.build(qos="low", nodelist="node[1-2]")
    (r,) = plan([rec], infos(**{"1": "FAILED"}), found(), override=override)
    assert r.task.profile and r.task.env == {"MAX_STEPS": "20", "SMOKE_TEST": "true"}
    assert r.task.placement.record() == {"nodelist": "node[1-2]", "exclude": "node3",
                                         "qos": "low", "slurm_args": ["--comment=x"]}


def test_exclude_suspect_adds_the_analyzers_nodes_to_the_recorded_exclude():
    rec = sub("1", placement={"exclude": "node[01-02]"})
    analyzed = found(**{"1": ("Failed", ["node02", "node07", "node09"])})
    (r,) = plan([rec], infos(**{"1": "FAILED"}), analyzed, suspect=True)
    assert r.excluded == ("node07", "node09")
    assert r.task.placement.exclude == "node[01-02,07,09]"
    (r,) = plan([rec], infos(**{"1": "FAILED"}), found(**{"1": ("Failed", [])}), suspect=True)
    assert r.excluded == () and r.task.placement.exclude == "node[01-02]"


def test_a_suspect_node_the_run_requires_is_refused():
    rec = sub("1", placement={"nodelist": "node[07-08]"})
    with pytest.raises(RunError, match=r"job 1: suspect node node07 is in its --nodelist "
                                       r"node\[07-08\]; give --nodelist with other nodes"):
        plan([rec], infos(**{"1": "FAILED"}), found(**{"1": ("Failed", ["node07"])}), ["1"],
             suspect=True)


@pytest.mark.parametrize(("rec", "message"), [
    (sub("1", env={"MY_KEY": redact.MASK}), "job 1 cannot be rerun: the history masked the "
     "value of MY_KEY (it holds a secret)"),
    (sub("1", env={"MODEL_SIZE": "70b"}), "job 1 cannot be rerun: job 1: recorded env "
     "MODEL_SIZE=70b: llmb-run sets MODEL_SIZE itself"),
    (sub("1", placement={"exclude": "a b"}), "job 1 cannot be rerun: --exclude=a b is not a "
     "Slurm node list"),
    (sub("1", scale="many"), "job 1 cannot be rerun: its history record lacks workload, size, "
     "dtype or scale"),
    (sub("1", gpu_type="b200"), "job 1 ran on b200; this install's gpu_type is h100"),
    # a hand-edited history: values of the wrong type are one line, never a traceback
    (sub("1", env=["BASH_ENV"]), "job 1 cannot be rerun: its history record's env is a list, "
     "not a mapping"),
    (sub("1", env="X=1"), "job 1 cannot be rerun: its history record's env is a str"),
    (sub("1", placement="node1"), "job 1 cannot be rerun: its history record's placement is a "
     "str, not a mapping"),
    (sub("1", placement={"nodelist": 5}), "job 1 cannot be rerun: "),
    (sub("1", placement={"slurm_args": 5}), "job 1 cannot be rerun: "),
    (sub("1", env={"BASH_ENV": "/tmp/x.sh"}), "job 1 cannot be rerun: job 1: recorded env "
     "BASH_ENV"),
    (sub("1", repeat="x"), "job 1 cannot be rerun: its history record lacks"),
])
def test_records_that_cannot_be_rerun_say_why(rec, message):
    with pytest.raises(RunError) as err:
        plan([rec], infos(**{"1": "FAILED"}), found(), ["1"])
    assert message in str(err.value)
    assert "\n" not in str(err.value)


# --- the command ------------------------------------------------------------------------------

@pytest.fixture
def install(tmp_path: Path) -> Path:
    return make_install(tmp_path / "install")


@pytest.fixture
def shims(tmp_path: Path) -> Slurm:
    return Slurm(tmp_path / "slurm-bin")


def history(install: Path, *records: dict) -> Path:
    path = install / "llmb_run_history.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_rerun_failed_exclude_suspect_dry_run_through_launch_sh(install, shims):
    """The real analyzer names nid001412 in the fixture's NCCL-timeout log; the dry run's
    job script excludes it, and nothing is recorded."""
    run_dir = fixture_run(FAILED_JOB)
    hist = history(install, sub(FAILED_JOB, size="70b", scale=128, placement={"qos": "hi"},
                                experiment_dir=str(run_dir)),
                   sub("2201400", experiment_dir=str(fixture_run("2201400"))))
    proc = run(["rerun", "--failed", "--exclude-suspect", "--dry-run"], install,
               path=f"{shims.dir}:/usr/bin:/bin")
    assert proc.returncode == 0, proc.stderr
    assert (f"llmb-run: rerun of job {FAILED_JOB} (PURGED/Failed): pretrain_llama3.1 70b fp8 "
            "x128 (repeat 1); excluding suspect node(s) nid001412") in proc.stderr
    assert "2201400" not in proc.stderr  # it succeeded
    assert "#SBATCH --exclude=nid001412" in proc.stdout
    assert "#SBATCH --qos=hi" in proc.stdout
    assert hist.read_text().count('"type": "submit"') == 2  # a dry run records no run


@pytest.mark.parametrize(("args", "code", "message"), [
    (["rerun"], 2, "rerun needs JOB ids or --failed"),
    (["rerun", "424242"], 1, "job 424242 is not in"),
    (["rerun", "--failed", "--exclude", "node1;id"], 2, "--exclude=node1;id is not a Slurm "
     "node list"),
    (["rerun", "--failed", "--slurm-arg=--nodes=4"], 2, "--slurm-arg=--nodes=4: llmb sets "
     "--nodes itself"),
    (["rerun", "--failed", "--exclude-suspect=yes"], 2, "ignored explicit argument"),
])
def test_rerun_flag_errors_are_one_line_and_submit_nothing(install, shims, args, code,
                                                           message):
    hist = history(install, sub("9", experiment_dir=None))
    proc = run(args, install, path=f"{shims.dir}:/usr/bin:/bin")
    assert proc.returncode == code
    assert len(proc.stderr.splitlines()) == 1 and message in proc.stderr, proc.stderr
    assert proc.stdout == ""
    assert hist.read_text().count("\n") == 1


def test_nothing_failed_is_said_plainly(install, shims):
    history(install, sub("9", experiment_dir=str(fixture_run("2201400"))))
    proc = run(["rerun", "--failed"], install, path=f"{shims.dir}:/usr/bin:/bin")
    assert (proc.returncode, proc.stdout) == (
        0, "llmb-run: nothing to rerun (no failed run that was not rerun already)\n")


def test_failed_skips_a_record_it_cannot_rerun_and_reruns_the_others(capsys):
    subs = [sub("1", gpu_type="b200"), sub("2", env={"TOKEN_X": redact.MASK}), sub("3")]
    states = infos(**{"1": "FAILED", "2": "FAILED", "3": "FAILED"})
    assert [r.job_id for r in plan(subs, states, found())] == ["3"]
    assert capsys.readouterr().err.splitlines() == [
        "llmb-run: warning: skipped job 1 ran on b200; this install's gpu_type is h100: rerun "
        "it from the install it came from",
        "llmb-run: warning: skipped job 2 cannot be rerun: the history masked the value of "
        "TOKEN_X (it holds a secret); submit it again with llmb-run single or bulk"]
