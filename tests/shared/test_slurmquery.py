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
