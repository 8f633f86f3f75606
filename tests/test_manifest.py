"""llmb.manifest: the run manifest's one reader and writer (launcher, container, analyzer)."""

from __future__ import annotations

import copy
import json
import os
import stat

import pytest
from llmb import manifest
from llmb.manifest import ManifestError
from trainmanifests import find, make_manifest, with_field

LAUNCHED = make_manifest(*find("llama3.1", "8b", "fp8", "h100", 16))


def test_written_owner_only_and_read_back(tmp_path):
    path = manifest.path_in(tmp_path / "run")
    manifest.write(LAUNCHED, path)
    assert path.name == "llmb_manifest.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert manifest.read(path) == LAUNCHED
    placed = {**LAUNCHED, "placement": {"nodelist": "node[1-2]", "segment": 2}}
    manifest.write(placed, path)
    assert manifest.read(path) == placed


def changed(path: str, value: object) -> dict:
    return with_field(LAUNCHED, path, value)


@pytest.mark.parametrize(("path", "value", "problem"), [
    ("schema", KeyError, "it has no schema"),
    ("nemo", KeyError, "it has no nemo"),
    ("parallelism.tp", KeyError, "parallelism has no tp"),
    ("parallelism.tp", "2", "parallelism.tp is '2' (text), not a whole number"),
    ("parallelism.vp", 1.5, "parallelism.vp is 1.5 (a number), not a whole number or null"),
    ("options.max_steps", True, "options.max_steps is true (true or false), not a whole number"),
    ("options.smoke_test", "false", "options.smoke_test is 'false' (text), not true or false"),
    ("options", [], "options is a list of 0 item(s), not a mapping"),
    ("job_dir", None, "job_dir is null, not text"),
    ("experiment", "x" * 70_000, "experiment is 'xxx"),
])
def test_a_field_of_another_type_is_one_line_naming_the_file_and_field(tmp_path, path, value,
                                                                       problem):
    """What the launcher writes is checked once, as the manifest is read: a reader then takes
    each field as its type."""
    target = manifest.path_in(tmp_path)
    manifest.write(changed(path, value), target)
    with pytest.raises(ManifestError) as err:
        manifest.read(target)
    assert err.value.reason.startswith(f"is not a schema-1 run manifest: {problem}")
    assert str(err.value).startswith(f"manifest {target} is not a schema-1 run manifest: ")
    assert "\n" not in str(err.value) and len(str(err.value)) < 300 and not err.value.missing
    with pytest.raises(ManifestError) as err:
        manifest.parse(json.dumps(changed(path, value)))
    assert str(err.value).startswith(f"is not a schema-1 run manifest: {problem}")


def test_check_gives_the_launchers_manifest_back_as_it_is():
    data = copy.deepcopy(LAUNCHED)
    assert manifest.check(data) is data
    with pytest.raises(ManifestError, match="has schema=2, which is not supported"):
        manifest.check({**data, "schema": 2})


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


def test_a_hand_written_manifest_read_as_an_object_may_leave_fields_out(tmp_path):
    """The analyzer reads manifests written by hand too, and checks the fields it uses."""
    path = tmp_path / manifest.NAME
    path.write_text(json.dumps({"workload": "x", "num_gpus": "8"}))
    assert manifest.read_object(path) == {"workload": "x", "num_gpus": "8"}
    with pytest.raises(ManifestError, match="run manifest: it has no cluster_type"):
        manifest.read(path)
    path.write_text('{"schema": 2}')
    with pytest.raises(ManifestError) as err:
        manifest.read_object(path)
    assert str(err.value) == f"manifest {path} has schema=2, which is not supported; supported: 1"


def test_missing_is_told_apart_from_broken(tmp_path):
    with pytest.raises(ManifestError) as err:
        manifest.read(tmp_path / "none.json")
    assert err.value.missing and "cannot be read (No such file or directory)" in str(err.value)


def test_special_files_are_refused_without_reading_them(tmp_path):
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    for path in (fifo, "/dev/zero", tmp_path):
        for reader in (manifest.read, manifest.read_object):
            with pytest.raises(ManifestError) as err:
                reader(path)
            assert not err.value.missing
