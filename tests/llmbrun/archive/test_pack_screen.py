"""The archive's screen/ holds only files the install's layout names (the newest stamp folder's
screen.json and job output, the install's baseline.json when the screen was held to it), each
a regular file under the install, through no link, of a bounded size: a path the screen's
state names (its `baseline.path`, its `output`) never decides what is packed. The install is
tests/helpers/fakeinstall.py's, with a screen (tests/helpers/screenfiles.py)."""

from __future__ import annotations

import json
import os
import tarfile
from pathlib import Path

import fakeinstall
import pytest
import runinstall
import screenfiles
from llmb import layout
from llmb.llmbrun import clusterconfig
from llmb.llmbrun.archive import screenpart
from llmb.llmbrun.archive.format import LeftOut
from llmb.llmbrun.screen import baseline
from paths import SHIMS

MARK = "PRIVATE-KEY-OUTSIDE-THE-LAYOUT"
STAMP = "20260102-030405"


@pytest.fixture
def install(tmp_path: Path) -> Path:
    root = fakeinstall.make_install(tmp_path / "llmb")
    screenfiles.screen_json(root, STAMP, repeats=5)
    return root


def held_to(root: Path, path: Path | str) -> None:
    """The newest screen says it was held to the baseline at `path`."""
    screen = root / "screens" / STAMP / "screen.json"
    doc = json.loads(screen.read_text())
    doc["baseline"] = {"path": str(path), "screen": None, "saved": None, "comparable": True,
                       "why_not": None, "changed": [], "figures": []}
    screen.write_text(json.dumps(doc))


def staged(root: Path, tmp_path: Path) -> tuple[Path, dict[str, LeftOut]]:
    cfg = clusterconfig.find_config(str(root / "cluster_config.yaml"), {})
    out = tmp_path / "staged"
    left: dict[str, LeftOut] = {}
    assert screenpart.stage_screen(cfg, out, set(), False, left) is not None
    return out / "screen", left


def private_key(tmp_path: Path) -> Path:
    key = tmp_path / "elsewhere" / "id_ed25519"
    key.parent.mkdir(exist_ok=True)
    key.write_text(f"-----BEGIN OPENSSH PRIVATE KEY-----\n{MARK}\n")
    key.chmod(0o600)
    return key


def test_a_baseline_path_outside_the_install_is_named_never_packed(install, tmp_path, capsys):
    key = private_key(tmp_path)
    held_to(install, key)
    screen, _ = staged(install, tmp_path)
    assert sorted(p.name for p in screen.iterdir()) == ["screen-9.out", "screen.json"]
    said = capsys.readouterr().err
    assert f"the baseline the newest screen was held to, {key}, is not the install's" in said
    assert "not packed" in said and said[-1] == "\n" and said.count("\n") == 1


@pytest.mark.parametrize("target", ["/etc/shadow", "/etc/passwd", "big"])
def test_a_baseline_path_naming_any_other_file_packs_nothing_of_it(install, tmp_path, target):
    if target == "big":  # 300 MB inside the install, but not its baseline
        big = install / "screens" / "big.json"
        with big.open("wb") as f:
            f.truncate(300 << 20)
        target = str(big)
    held_to(install, target)
    screen, _ = staged(install, tmp_path)
    assert not (screen / "baseline.json").exists()


def test_the_installs_own_baseline_is_packed(install, tmp_path):
    doc = json.loads((install / "screens" / STAMP / "screen.json").read_text())
    own = baseline.default_path(layout.Install(install))
    baseline.save(own, doc)
    held_to(install, own)
    screen, left = staged(install, tmp_path)
    assert json.loads((screen / "baseline.json").read_text())["kind"] == baseline.KIND
    assert not left


@pytest.mark.parametrize("unfit", ["large", "link", "fifo"])
def test_the_installs_baseline_unfit_to_pack_is_left_out_and_said(install, tmp_path, capsys,
                                                                  unfit):
    own = baseline.default_path(layout.Install(install))
    if unfit == "large":
        with own.open("wb") as f:
            f.truncate(screenpart.MAX_BYTES + 1)
    elif unfit == "link":
        own.symlink_to(private_key(tmp_path))
    else:
        os.mkfifo(own)
    held_to(install, own)
    screen, left = staged(install, tmp_path)
    assert not (screen / "baseline.json").exists() and left
    assert "archive: warning: the screen's baseline is left out: " in capsys.readouterr().err


def test_an_output_the_screen_names_elsewhere_is_not_packed(install, tmp_path):
    key = private_key(tmp_path)
    screen_file = install / "screens" / STAMP / "screen.json"
    doc = json.loads(screen_file.read_text())
    doc["output"] = str(key)
    screen_file.write_text(json.dumps(doc))
    screen, _ = staged(install, tmp_path)
    assert MARK not in "".join(p.read_text() for p in screen.iterdir())


def test_a_folder_not_named_as_a_screen_writes_it_is_never_the_newest(install, tmp_path):
    other = install / "screens" / "backup-old"
    other.mkdir()
    doc = json.loads((install / "screens" / STAMP / "screen.json").read_text())
    (other / "screen.json").write_text(json.dumps({**doc, "suspects": ["node1"]}))
    (other / "screen-9.out").write_text(MARK)
    screen, _ = staged(install, tmp_path)
    assert json.loads((screen / "screen.json").read_text())["suspects"] == []
    assert MARK not in (screen / "screen-9.out").read_text()


def test_archive_and_verify_with_a_baseline_path_at_a_private_key(install, tmp_path):
    held_to(install, private_key(tmp_path))
    out = tmp_path / "a.tar.gz"
    path = f"{SHIMS}:{os.environ['PATH']}"
    proc = runinstall.run(["archive", "--output", str(out)], install, timeout=300, path=path)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    with tarfile.open(out) as tar:
        names = [m.name for m in tar]
        text = "".join(tar.extractfile(m).read().decode(errors="replace")  # type: ignore[union-attr]
                       for m in tar if m.isfile())
    assert MARK not in text and not [n for n in names if n.endswith("baseline.json")]
    proc = runinstall.run(["verify-archive", str(out)], install, timeout=300, path=path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
