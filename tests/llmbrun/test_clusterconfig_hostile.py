"""cluster_config.yaml as a person may hand-edit it (llmb.llmbrun.clusterconfig): every value of
the wrong type or shape, a number of thousands of digits, nesting too deep, a key given twice,
a start-up variable in launcher.env is one line naming the file and the key, exit 1, before
anything runs. Through installer/llmb-run, as a user runs it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from runinstall import make_install, run


def edited(root: Path, path: list[str], value: Any) -> None:
    config = root / "cluster_config.yaml"
    data = yaml.safe_load(config.read_text())
    here = data
    for key in path[:-1]:
        here = here[key]
    here[path[-1]] = value
    config.write_text(yaml.safe_dump(data))


EDITS = [
    (["workloads", "pretrain_llama3.1", "venv"], 5, "must be an absolute path"),
    (["workloads", "pretrain_llama3.1", "venv"], "venvs/x", "must be an absolute path"),
    (["workloads", "pretrain_llama3.1", "venv"], ["a"], "venv is a list of 1 item(s), not text"),
    (["workloads", "pretrain_llama3.1"], "x", "must be a mapping with venv"),
    (["schema"], "1", "schema"),
    (["launcher", "env"], {"BASH_ENV": "/tmp/x.sh"}, "BASH_ENV"),
    (["launcher", "env"], {"PYTHONPATH": "/tmp"}, "PYTHONPATH"),
    (["launcher", "env"], [1], "launcher.env"),
    (["launcher", "hf_token_file"], {"a": 1}, "launcher.hf_token_file"),
    (["launcher", "slurm", "gres"], "gpu:8;x", "is not a GPU GRES"),
]


@pytest.mark.parametrize(("path", "value", "message"), EDITS,
                         ids=[f"{'.'.join(p)}={v!r}"[:40] for p, v, _ in EDITS])
def test_a_hand_edited_value_is_one_line(tmp_path, path, value, message):
    root = make_install(tmp_path / "install")
    edited(root, path, value)
    proc = run(["status"], root)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.startswith(f"llmb-run: {root / 'cluster_config.yaml'}")
    assert message in proc.stderr and len(proc.stderr.splitlines()) == 1


RAW = [
    ("huge-int", "schema: " + "9" * 5000 + "\n"),
    ("deep", "schema: " + "[" * 100_000 + "]" * 100_000 + "\n"),
    ("twice", "schema: 1\nschema: 1\n"),
    ("a-list", "- 1\n"),
]


@pytest.mark.parametrize(("kind", "text"), RAW, ids=[k for k, _ in RAW])
def test_a_crafted_file_is_one_line(tmp_path, kind, text):
    root = make_install(tmp_path / "install")
    (root / "cluster_config.yaml").write_text(text)
    proc = run(["status"], root)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr and len(proc.stderr.splitlines()) == 1
    assert "cluster_config.yaml" in proc.stderr
