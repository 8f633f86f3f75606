"""llmb.shared.slurmquery's commands fail as SlurmUnavailable, never as a traceback, whatever a
site's Slurm prints or however it cannot run; cluster_facts leaves out what it cannot ask."""

from __future__ import annotations

from pathlib import Path

import pytest
from llmb.shared import slurmquery


def command(bin_dir: Path, name: str, body: bytes) -> None:
    path = bin_dir / name
    path.write_bytes(body)
    path.chmod(0o755)


@pytest.fixture
def bin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "bin"
    folder.mkdir()
    monkeypatch.setenv("PATH", str(folder))  # nothing but the commands a test writes
    return folder


def test_output_that_is_not_utf8_is_read_with_replacement(bin_dir: Path) -> None:
    command(bin_dir, "sinfo", b"#!/bin/sh\nprintf 'slurm 22.05.8 \\377\\376\\n'\n")
    assert slurmquery.version() == "slurm 22.05.8 \ufffd\ufffd"


def test_a_command_that_cannot_be_executed_is_unavailable(bin_dir: Path) -> None:
    command(bin_dir, "sinfo", b"\x7fELF\x00\x00not a program for this machine")
    with pytest.raises(slurmquery.SlurmUnavailable, match=r"^sinfo could not run: "):
        slurmquery.version()


def test_cluster_facts_keep_what_answers_and_leave_out_the_rest(bin_dir: Path) -> None:
    command(bin_dir, "sinfo", b"#!/bin/sh\n"
            b"case \"$1\" in --version) echo 'slurm 22.05.8';;\n"
            b"*) echo 'batch*|up|1:00:00|2|gpu:8|(null)|node[1-2]';; esac\n")
    command(bin_dir, "scontrol", b"#!/bin/sh\n"
            b"if [ \"$2\" = nodes ]; then\n"
            b"echo 'NodeName=node1 Arch=x86_64 CPUTot=16 Gres=gpu:8 State=IDLE Weight=1'\n"
            b"else echo 'ClusterName = llmbtest'; echo 'AuthInfo = socket=/x'; exit 0; fi\n")
    facts = slurmquery.cluster_facts()
    assert facts == {
        "version": "slurm 22.05.8",
        "partitions": ["batch*|up|1:00:00|2|gpu:8|(null)|node[1-2]"],
        "nodes": [{"NodeName": "node1", "Arch": "x86_64", "CPUTot": "16", "Gres": "gpu:8",
                   "State": "IDLE"}],
        "config": {"ClusterName": "llmbtest"},
    }
    (bin_dir / "scontrol").unlink()
    assert slurmquery.cluster_facts()["nodes"] == [] and slurmquery.cluster_facts()["config"] == {}


def test_cluster_facts_without_slurm_are_empty_not_an_error(bin_dir: Path) -> None:
    assert slurmquery.cluster_facts() == {"version": None, "partitions": None, "nodes": [],
                                     "config": {}}


# --- at scale and under faults (Slurm doubled by tests/helpers/slurmshims.py) -----------------

@pytest.fixture
def slurm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The Slurm 22.05 double alone on PATH; pauses between tries shortened (the retry rule is
    what is tested, not the wall clock)."""
    from slurmshims import Slurm

    shims = Slurm(tmp_path / "slurm")
    monkeypatch.setenv("PATH", str(shims.dir))
    monkeypatch.setattr(slurmquery, "BACKOFF_S", (0.01, 0.02))
    return shims


def test_many_jobs_are_asked_in_batches(slurm) -> None:
    """20000 unfinished jobs: one `-j` argument would be 200 kB, past the kernel's limit for
    one argument ("Argument list too long": every job UNKNOWN)."""
    ids = [str(100_000_000 + i) for i in range(20_000)]
    slurm.set(squeue={i: ["RUNNING", "x", "node1", "None"] for i in ids})
    infos = slurmquery.job_infos(ids)
    assert {i.state for i in infos.values()} == {"RUNNING"}
    calls = slurm.calls()
    assert len(calls) == 20_000 // slurmquery.BATCH
    assert max(len(c) for c in calls) < 16_384


@pytest.mark.parametrize(("faults", "calls"), [
    ({"squeue": {"fail": 1}}, 2),
    ({"squeue": {"fail": 2}}, 3),
    ({"squeue": {"fail": 1, "message": "squeue: error: Unable to contact slurm controller "
                 "(connect failure)"}}, 2),
    ({"squeue": {"fail": 1, "message": "slurm_load_jobs error: Resource temporarily "
                 "unavailable"}}, 2),
])
def test_a_transient_failure_is_asked_again(slurm, faults, calls) -> None:
    slurm.set(squeue={"5": ["RUNNING", "x", "node1", "None"]}, faults=faults)
    assert slurmquery.job_infos(["5"])["5"].state == "RUNNING"
    assert len(slurm.calls()) == calls


def test_a_command_that_hangs_once_is_asked_again(slurm, monkeypatch) -> None:
    monkeypatch.setattr(slurmquery, "TIMEOUT_S", 1)
    slurm.set(squeue={"5": ["RUNNING", "x", "node1", "None"]},
              faults={"squeue": {"fail": 1, "sleep": 5}})
    assert slurmquery.job_infos(["5"])["5"].state == "RUNNING"


def test_a_lasting_failure_says_what_failed(slurm) -> None:
    slurm.set(squeue={"5": ["RUNNING", "x", "node1", "None"]},
              faults={"squeue": {"fail": 99}, "sacct": {"fail": 99}})
    info = slurmquery.job_infos(["5"])["5"]
    assert info.state == slurmquery.UNKNOWN and not info.settled
    assert info.detail == ("cannot ask Slurm: squeue failed: slurm_load_jobs error: Socket "
                           "timed out on send/recv operation (asked 3 times)")


def test_an_answer_is_not_asked_again(slurm) -> None:
    slurm.set(sacct="disabled")  # squeue and scontrol: Invalid job id; sacct: no accounting
    info = slurmquery.job_infos(["5"])["5"]
    assert info.state == slurmquery.PURGED
    assert [c.split()[0] for c in slurm.calls()] == ["squeue", "scontrol", "sacct"]


@pytest.mark.parametrize("job", ["-1", "--help", "-j", "1;id", "abc", "12 13", "", "1_", "+1"])
def test_what_is_not_a_slurm_job_id_never_reaches_slurm(slurm, job) -> None:
    info = slurmquery.job_infos([job])[job]
    assert (info.state, info.detail) == (slurmquery.UNKNOWN, "not a Slurm job id")
    assert slurm.calls() == []


def test_array_and_het_job_ids_are_asked(slurm) -> None:
    slurm.set(squeue={"7_3": ["RUNNING", "x", "n", "None"], "8+1": ["PENDING", "x", "n", "R"]})
    infos = slurmquery.job_infos(["7_3", "8+1"])
    assert (infos["7_3"].state, infos["8+1"].state) == ("RUNNING", "PENDING")


def test_many_forgotten_jobs_cost_one_scontrol_call(slurm) -> None:
    ids = [str(i) for i in range(1000, 1100)]
    slurm.set(scontrol={i: ["COMPLETED", "x", "node1", "None"] for i in ids[:50]},
              sacct="disabled")
    infos = slurmquery.job_infos(ids)
    assert sum(i.state == "COMPLETED" for i in infos.values()) == 50
    assert [c.split()[0] for c in slurm.calls()].count("scontrol") == 1


def test_a_node_count_in_other_digits_is_not_a_count(bin_dir: Path) -> None:
    # '²'.isdigit() holds and int('²') raises: a garbled sinfo line counts no node, no traceback
    command(bin_dir, "sinfo", "#!/bin/sh\necho 'batch|up|\u00b2|gpu:8|idle'\n"
            "echo 'batch|up|3|gpu:8|idle'\n".encode())
    facts = slurmquery.partition_facts("batch")
    assert facts is not None and (facts.nodes, facts.idle) == (3, 3)
