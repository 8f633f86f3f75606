"""`llmb-run suite submit | status | resume` without a cluster: every new flag and file refuses
a bad value in one line before anything is submitted or written; the dry run plans and records
nothing; a terminal is asked before submitting (--yes is not); and submissions through the real
launch.sh and nemo-run to test doubles of sbatch (tests/shims) and of the job-state commands
(tests/helpers/slurmshims.py): --max-jobs holds runs, `status --wait` releases them, `resume`
submits exactly the failed runs again. On the real test cluster: tests/e2e/test_suite_e2e.py."""

from __future__ import annotations

import json
import os
from pathlib import Path

import fakeinstall
import pytest
import runinstall
import yaml
from llmb.launch.placement import Placement
from llmb.llmbrun import clusterconfig
from llmb.llmbrun.suite import commands as suitecmd
from llmb.llmbrun.suite import record as suites
from llmb.llmbrun.suite.plan import Selection
from paths import SHIMS
from slurmshims import Slurm


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return fakeinstall.make_install(tmp_path / "install")


def nothing_written(root: Path) -> bool:
    return not (root / "suites").exists() and not (root / "llmb_run_history.jsonl").exists()


SUBMIT = ["suite", "submit"]
BAD = [
    ([*SUBMIT, "--max-scale", "0"], 2,
     "argument --max-scale: 0 is not a GPU count: a whole number from 1 to 1048576"),
    ([*SUBMIT, "--max-scale", "016"], 2, "016 is not a GPU count; write it as 16"),
    ([*SUBMIT, "--min-scale", "eight", "--max-scale", "8"], 2,
     "argument --min-scale: eight is not a GPU count"),
    ([*SUBMIT, "--max-scale", "8", "--repeats", "0"], 2,
     "argument --repeats: 0 is not a number of repeats"),
    ([*SUBMIT, "--max-scale", "8", "--max-jobs", "-1"], 2,
     "argument --max-jobs: -1 is not a number of jobs"),
    ([*SUBMIT, "--min-scale", "64", "--max-scale", "32"], 2,
     "--min-scale 64 is above --max-scale 32"),
    ([*SUBMIT, "--max-scale", "8", "-w", "pretrain_gpt3"], 2, "-w pretrain_gpt3 is not a workload"),
    ([*SUBMIT, "--max-scale", "64", "-w", "pretrain_nemotronh"], 2,
     "-w pretrain_nemotronh is not installed here"),
    ([*SUBMIT, "--max-scale", "8", "--dtype", "fp16"], 2, "--dtype fp16 is not a dtype"),
    ([*SUBMIT, "--max-scale", "4"], 1, "no published configuration of the selected workloads "
     "on h100 is within 1 to 4 GPUs"),
    ([*SUBMIT, "--max-scale", "8", "--exclude", "node 1"], 2, "--exclude"),
    ([*SUBMIT, "--max-scale", "8", "--slurm-arg=--nodes=3"], 2, "--slurm-arg"),
    ([*SUBMIT, "--max-scale", "8", "--exclude-suspect"], 1,
     "--exclude-suspect needs a screen: no results under "),
    ([*SUBMIT, "--max-scale", "8", "--format=json"], 2, "unrecognized arguments: --format=json"),
    ([*SUBMIT, "--set", "mlperf"], 2, "--set mlperf is not a set; known: exemplar"),
    ([*SUBMIT, "--set", "exemplar", "--max-scale", "8"], 2,
     "--set exemplar plans the set's workloads, dtypes and scale; drop -w, --dtype"),
    ([*SUBMIT, "--scale", "64"], 2, "--scale 64 applies with --set only"),
    ([*SUBMIT, "--set", "exemplar"], 1, "no workload of the exemplar set can run on h100 here"),
    (["suite", "baseline"], 2, "the following arguments are required: --save"),
    (["suite"], 2, "the following arguments are required: submit|status|report|resume|baseline"),
    (["suite", "status", "latest"], 2, "suite id latest is not a suite id"),
    (["suite", "status", "20990101-000000"], 1, "no suite 20990101-000000: none yet under "),
    (["suite", "status", "--timeout", "5"], 2, "suite status --timeout applies with --wait only"),
    (["suite", "status", "--format=xml"], 2, "argument --format: invalid choice: 'xml'"),
    (["suite", "report", "--output", ""], 1, "--output is empty"),
    (["suite", "report", "--output", "a\nb"], 1, "--output=a\\nb contains control character"),
    (["suite", "resume", "x;id"], 2, "suite id x;id is not a suite id"),
    (["archive", "--suite", "../x"], 2, "suite id ../x is not a suite id"),
    (["archive", "--suite", "20990101-000000"], 1, "no suite 20990101-000000: none yet"),
]


@pytest.mark.parametrize(("args", "code", "message"), BAD, ids=[m[:40] for *_, m in BAD])
def test_every_bad_value_is_one_line_and_nothing_is_written(root, args, code, message):
    proc = runinstall.run(args, root)
    assert (proc.returncode, proc.stdout) == (code, ""), proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("llmb-run: "), proc.stderr
    assert message in proc.stderr
    assert nothing_written(root)


@pytest.mark.parametrize(("screen", "message"), [
    ("{", "screen results {path} are not valid JSON; run llmb-run screen again"),
    ('{"suspects": "node1"}', "screen results {path}: the record has no backend; run llmb-run "
     "screen again"),
    ('{"suspects": ["$(id)"]}', "screen results {path}: "),
])
def test_a_bad_screen_file_is_one_line(root, screen, message):
    path = root / "screens" / "20250101-000000" / "screen.json"
    path.parent.mkdir(parents=True)
    path.write_text(screen)
    proc = runinstall.run([*SUBMIT, "--max-scale", "8", "--exclude-suspect", "--dry-run"], root)
    assert (proc.returncode, proc.stdout, proc.stderr.count("\n")) == (1, "", 1), proc.stderr
    assert message.format(path=path) in proc.stderr
    assert nothing_written(root)


def test_a_damaged_suite_record_and_a_runai_install_are_one_line(root, tmp_path):
    record = root / "suites" / "20250101-000000" / "suite.json"
    record.parent.mkdir(parents=True)
    record.write_text('{"schema": 1, "id": "20250101-000000", "runs": "all"}')
    for command in ("status", "report", "resume"):
        proc = runinstall.run(["suite", command], root)
        assert (proc.returncode, proc.stderr.count("\n")) == (1, 1), proc.stderr
        assert proc.stderr.startswith(f"llmb-run: suite record {record} cannot be used (")
    conf = yaml.safe_load((root / "cluster_config.yaml").read_text())
    conf["launcher"]["cluster_type"] = "runai"
    (root / "cluster_config.yaml").write_text(yaml.safe_dump(conf))
    proc = runinstall.run([*SUBMIT, "--max-scale", "8"], root)
    assert proc.returncode == 1
    assert proc.stderr.startswith("llmb-run: suite runs on Slurm clusters only; this install's "
                                  "cluster_type is runai")


def test_a_placement_no_run_can_take_names_every_run_and_submits_nothing(root):
    proc = runinstall.run([*SUBMIT, "--max-scale", "16", "-w", "pretrain_llama3.1", "--dtype",
                           "fp8", "--repeats", "1", "--segment", "3"], root)
    assert proc.returncode == 1 and proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 3 and lines[-1] == "llmb-run: 2 errors; nothing was submitted"
    assert lines[0] == ("llmb-run: pretrain_llama3.1 8b fp8 x16 (repeat 1): --segment=3 does "
                        "not divide the job's 2 node(s); give a divisor of 2")
    assert nothing_written(root)


def test_the_environment_cannot_place_a_suite_behind_its_record(root):
    proc = runinstall.run([*SUBMIT, "--max-scale", "8"], root, LLMB_EXCLUDE="node1")
    assert proc.returncode == 1 and "LLMB_EXCLUDE=node1 is set in the environment" in proc.stderr
    assert nothing_written(root)


def test_dry_run_prints_the_plan_and_records_nothing(root):
    # stdin is not a terminal: no question, the runs go to sbatch (here the double, rejecting
    # them: whether a test cluster happens to be up must not matter)
    proc = runinstall.run([*SUBMIT, "--max-scale", "16", "--dtype", "fp8", "--max-jobs", "2"],
                          root, path=f"{SHIMS}:{os.environ['PATH']}", SHIM_SBATCH_FAIL="1")
    assert proc.returncode == 1 and "Batch job submission failed" in proc.stderr
    proc = runinstall.run([*SUBMIT, "--max-scale", "16", "--dtype", "fp8", "--max-jobs", "2",
                           "--dry-run"], root)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == ("Suite plan: 3 configuration(s) x 3 repeat(s) = 9 run(s) of "
                        "pretrain_llama3.1, pretrain_nemotron4 on h100, 8 to 16 GPUs (at most "
                        "16: --max-scale)")
    assert [line.split()[:5] for line in lines[2:5]] == [
        ["pretrain_llama3.1", "8b", "fp8", "weak", "16"],
        ["pretrain_nemotron4", "15b", "fp8", "weak", "16"],
        ["pretrain_llama3.1", "8b", "fp8", "weak", "8"]]
    # 16 x (600 + 50 x 9.36) + 16 x (600 + 50 x 1.98) + 8 x (600 + 50 x 9.33) GPU-seconds
    # = 17088 + 11184 + 8532 = 36804 per repeat; x 3 / 3600 = 30.67 GPU-hours
    assert lines[5].startswith("GPU-hours: 30.7 (per run: GPUs x (600 s start-up + 50 steps")
    assert lines[6].startswith("Queue: at most 2 job(s) of the suite in the queue at once")
    assert lines[-1] == "llmb-run: dry run: nothing was submitted or recorded"


class Terminal:
    def isatty(self) -> bool:
        return True


def cfg_of(root: Path) -> clusterconfig.ClusterConfig:
    return clusterconfig.find_config(str(root / "cluster_config.yaml"), {})


def test_a_terminal_is_asked_and_no_records_nothing(root, monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", Terminal())
    asked = []
    rc = suitecmd.cmd_submit(cfg_of(root), Selection(max_scale=8), 3, None, True, False, False,
                             Placement(), False, ask=lambda q: asked.append(q) or "n")
    # 8 x (600 + 50 x 12.27) + 8 x (600 + 50 x 9.33) = 18240 GPU-s; x 3 / 3600 = 15.2
    assert rc == 1 and asked == ["Submit 6 run(s), about 15.2 GPU-hours? [y/N] "]
    assert "not submitted; nothing was recorded" in capsys.readouterr().err
    assert nothing_written(root)


def test_max_jobs_holds_status_wait_releases_resume_submits_the_failed(
        tmp_path, monkeypatch, capsys):
    """Through launch.sh and nemo-run for real, to the sbatch test double (job ids from
    SHIM_JOB_ID). Run 1 (x16) goes in; run 2 (x8) is held."""
    root = runinstall.make_install(tmp_path / "install", workloads=("pretrain_llama3.1",),
                                   image=None)
    image = root / "images" / "nvidia+nemo+25.04.01.sqsh"
    image.parent.mkdir()
    image.write_bytes(b"hsqs" + bytes(60))
    conf = yaml.safe_load((root / "cluster_config.yaml").read_text())
    conf["workloads"]["pretrain_llama3.1"]["image"] = str(image)
    (root / "cluster_config.yaml").write_text(yaml.safe_dump(conf))
    slurm = Slurm(tmp_path / "slurm")
    monkeypatch.setenv("PATH", f"{slurm.dir}:{SHIMS}:{os.environ['PATH']}")
    monkeypatch.setenv("SHIM_LOG", str(tmp_path / "sbatch.log"))
    monkeypatch.setenv("SHIM_JOB_ID", "501")
    monkeypatch.setattr("sys.stdin", Terminal())
    for name in ("LLMB_INSTALL", "HF_TOKEN", "SMOKE_TEST", "MAX_STEPS"):
        monkeypatch.delenv(name, raising=False)
    cfg = cfg_of(root)

    def never(_q: str) -> str:
        raise AssertionError("--yes asked")

    rc = suitecmd.cmd_submit(cfg, Selection(dtypes=("fp8",), max_scale=16), 1, 1, True, False,
                             True, Placement(), False, ask=never)
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "1 run(s) submitted, 1 held (at most 1 in the queue)" in out
    made = suites.load(cfg, None)
    (first,) = cfg.history.submissions()
    assert (first["job_id"], first["suite"], first["suite_run"], first["scale"],
            first["smoke"]) == ("501", made.id, 1, 16, True)
    name = f"acct-acct.{first['experiment']}"
    slurm.set(squeue={"501": ["PENDING", name, "", "Resources"]})
    assert suitecmd.cmd_status(cfg, None, False, None, "table") == 0
    table = capsys.readouterr().out
    assert "pretrain_llama3.1  8b    fp8    weak     16    0     0        1        0     0" \
        in table
    assert table.splitlines()[-1] == "2 run(s): 1 pending, 1 held"

    # job 501 ends (cancelled: no log); --wait releases run 2 as job 502, which Slurm then
    # forgets (purged without a log): nothing is queued or held, the wait ends
    slurm.set(squeue={"501": ["CANCELLED", name, "", "None"]})
    monkeypatch.setenv("SHIM_JOB_ID", "502")
    suitecmd.wait_for(cfg, made, 60, poll_s=0.1)
    subs = cfg.history.submissions()
    assert [(r["job_id"], r["suite_run"], r["scale"]) for r in subs] == [
        ("501", 1, 16), ("502", 2, 8)]

    monkeypatch.setenv("SHIM_JOB_ID", "503")
    assert suitecmd.cmd_resume(cfg, None, False, False) == 0
    err = capsys.readouterr().err
    assert f"suite {made.id}: run 1 (pretrain_llama3.1 8b fp8 x16, repeat 1): job 501 " \
           "CANCELLED, no training log" in err
    assert "1 more wait for room (at most 1 in the queue)" in err
    subs = cfg.history.submissions()
    assert [(r["job_id"], r["suite_run"], r.get("rerun_of")) for r in subs[2:]] == [
        ("503", 1, "501")]
    script = (tmp_path / "sbatch.log").read_text()
    assert script.count("--- script ---") == 3
    json.dumps(subs)  # the records are plain JSON
