"""llmb.manifest: the run manifest's one reader and writer (launcher, container, analyzer)."""

from __future__ import annotations

import json
import os
import stat

import pytest
from llmb import manifest
from llmb.manifest import ManifestError


def test_written_owner_only_and_read_back(tmp_path):
    path = manifest.path_in(tmp_path / "run")
    manifest.write({"schema": manifest.SCHEMA, "recipe": "nemotron"}, path)
    assert path.name == "llmb_manifest.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert manifest.read(path) == {"schema": 1, "recipe": "nemotron"}


@pytest.mark.parametrize(("content", "reason"), [
    (b"{", "is not valid JSON"),
    (b"[1, 2]", "is not a JSON object"),
    (b'{"schema": 2}', "has schema=2, which is not supported; supported: 1"),
    (b'{"schema": true}', "has schema=True"),
    (b"\xff\xfe{}", "is not valid JSON"),
    (b"[" * 100_000, "is not valid JSON"),
    (b'{"schema": 1, "num_gpus": ' + b"9" * 5000 + b"}", "is not valid JSON"),
    (b'{"schema": ' + b"9" * 5000 + b"}", "is not valid JSON"),
    (b" " * (manifest.MAX_BYTES + 1), "is larger than"),
])
def test_a_bad_manifest_is_one_line_naming_the_file(tmp_path, content, reason):
    path = tmp_path / manifest.NAME
    path.write_bytes(content)
    with pytest.raises(ManifestError) as err:
        manifest.read(path)
    assert err.value.reason.startswith(reason)
    assert str(err.value) == f"manifest {path} {err.value.reason}"
    assert "\n" not in str(err.value) and not err.value.missing


def test_a_hand_written_manifest_may_leave_the_schema_out():
    assert manifest.parse(json.dumps({"workload": "x"})) == {"workload": "x"}


def test_missing_is_told_apart_from_broken(tmp_path):
    with pytest.raises(ManifestError) as err:
        manifest.read(tmp_path / "none.json")
    assert err.value.missing and "cannot be read (No such file or directory)" in str(err.value)


def test_special_files_are_refused_without_reading_them(tmp_path):
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    for path in (fifo, "/dev/zero", tmp_path):
        with pytest.raises(ManifestError) as err:
            manifest.read(path)
        assert not err.value.missing
