"""State llmb-run wrote and reads back, hand-edited: a suite's suite.json, a screen's screen.json,
the newest preflight report. Each is held to its type and a size bound before use, so a field of
the wrong type, a missing name, escapes or TeX in a name, or a screen of more nodes than any
cluster is one line naming the file and the field (or, for text, drawn and printed as written),
through every command that reads it: never a traceback. The install is tests/helpers/
fakeinstall.py's, its suite submitted through the sbatch double, its screen judged by the
results module (tests/helpers/screenfiles.py); Slurm's job-state commands are doubled."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fakeinstall
import pytest
import runinstall
import screenfiles
from paths import SHIMS
from slurmshims import Slurm

EXCLUDE_SUSPECT = ["single", "-w", "pretrain_llama3.1", "-s", "8b", "--dtype", "fp8",
                   "--scale", "8", "--dry-run", "--exclude-suspect"]


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    root = fakeinstall.make_install(tmp_path_factory.mktemp("records") / "llmb")
    runs = [fakeinstall.make_run(root, "41"), fakeinstall.make_run(root, "42", complete=False)]
    (root / "llmb_run_history.jsonl").write_text("".join(
        json.dumps(fakeinstall.submit_record(job, run)) + "\n"
        for job, run in zip(("41", "42"), runs, strict=True)))
    screenfiles.screen_json(root)
    proc = runinstall.run(["suite", "submit", "--max-scale", "8", "--repeats", "1", "--yes"],
                          root, path=f"{SHIMS}:{os.environ['PATH']}")
    assert proc.returncode == 0, proc.stderr
    report = {"created": "2026-01-01T00:00:00Z", "nodes": 1, "gpu_type": "h100",
              "placement": {}, "checks": [{"name": "gpus", "status": "pass", "detail": "8"}]}
    (root / "preflight").mkdir()
    (root / "preflight" / "latest.json").write_text(json.dumps(report))
    return root


def install_from(base: Path, tmp_path: Path) -> Path:
    root = tmp_path / "llmb"
    shutil.copytree(base, root, symlinks=True)
    for path in [root / "cluster_config.yaml", root / "llmb_run_history.jsonl",
                 *root.glob("suites/*/suite.json"), *root.glob("screens/*/screen.json"),
                 *root.rglob("llmb_manifest.json")]:
        path.write_text(path.read_text().replace(str(base), str(root)))
    return root


def edit(path: Path, change: Callable[[dict[str, Any]], Any]) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def run(root: Path, tmp_path: Path, args: list[str]) -> tuple[int, str, str]:
    shims = Slurm(tmp_path / "slurm-bin")
    shims.set(squeue={"41": ["COMPLETED", "acct.x", "node1", "None"]}, sacct="disabled")
    if args[0] in ("report", "archive"):
        args = [*args, "--output", str(tmp_path / ("a.tar.gz" if args[0] == "archive"
                                                    else "report"))]
    proc = runinstall.run(args, root, path=f"{shims.dir}:{SHIMS}:/usr/bin:/bin", timeout=300)
    return proc.returncode, proc.stdout, proc.stderr


def one_line(code: int, err: str, message: str) -> None:
    assert "Traceback" not in err
    lines = [ln for ln in err.splitlines() if "warning" not in ln and ": archive: " not in ln]
    assert code == 1 and len(lines) == 1, err
    assert message in lines[0], err


# --- suite.json --------------------------------------------------------------------------------

SUITES = [
    ("placement-list", lambda d: d.update(placement=["x"]),
     "placement is a list of 1 item(s), not a mapping"),
    ("exclude-number", lambda d: d.update(placement={"exclude": 5}),
     "placement.exclude is 5 (a whole number), not text"),
    ("configurations-text", lambda d: d.update(configurations="all"),
     "configurations is 'all' (text), not a list"),
    ("scale-text", lambda d: d["configurations"][0].update(scale="8"),
     "configurations[0].scale is '8' (text), not a whole number"),
    ("run-number-huge", lambda d: d["runs"][0].update(config=10**400),
     "runs[0].config is a whole number of about 401 digits"),
    ("suspects-text", lambda d: d.update(excluded_suspects="node1"),
     "excluded_suspects is 'node1' (text), not a list"),
    ("created-huge", lambda d: d.update(created="x" * 5000),
     "created is 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx...' (text of 5000 characters)"),
]


@pytest.mark.parametrize("command", [["suite", "status"], ["suite", "resume", "--dry-run"],
                                     ["suite", "report"]])
@pytest.mark.parametrize(("change", "message"), [(c, m) for _, c, m in SUITES],
                         ids=[k for k, _, _ in SUITES])
def test_a_hand_edited_suite_record_is_one_line_naming_the_field(base, tmp_path, command,
                                                                  change, message):
    root = install_from(base, tmp_path)
    record = next(root.glob("suites/*/suite.json"))
    edit(record, change)
    code, _, err = run(root, tmp_path, command)
    one_line(code, err, f"llmb-run: suite record {record} cannot be used ({message}")


def test_a_suite_created_time_with_escapes_is_printed_escaped(base, tmp_path):
    root = install_from(base, tmp_path)
    edit(next(root.glob("suites/*/suite.json")),
         lambda d: d.update(created="\x1b]0;owned\x07\nllmb-run: all done"))
    code, out, err = run(root, tmp_path, ["suite", "status"])
    assert code == 0 and "Traceback" not in err, err
    assert "\x1b" not in out + err and "\\x1b]0;owned\\x07\\nllmb-run: all done" in out


# --- screen.json -------------------------------------------------------------------------------

def _many_nodes(doc: dict[str, Any], count: int) -> None:
    doc["nodes"] = [dict(doc["nodes"][0], node=f"gpu{i:06d}") for i in range(count)]


SCREENS = [
    ("figure-text", lambda d: d["nodes"][0]["gpus"][0]["figures"].update(memory_gbps="fast"),
     "nodes[0].gpus[0].figures.memory_gbps is 'fast' (text), not a number"),
    ("node-without-name", lambda d: d["nodes"][0].pop("node"), "nodes[0] has no node"),
    ("gpus-text", lambda d: d["nodes"][0].update(gpus="eight"),
     "nodes[0].gpus is 'eight' (text), not a list"),
    ("suspects-text", lambda d: d.update(suspects="node1"),
     "suspects is 'node1' (text), not a list"),
    ("too-many-nodes", lambda d: _many_nodes(d, 16_385),
     "nodes is a list of 16385 item(s), more than the 16384 it can hold"),
    ("nan-figure", lambda d: d["nodes"][0]["gpus"][0]["figures"].update(memory_gbps=1e400),
     "nodes[0].gpus[0].figures.memory_gbps is inf (a number), not a finite number"),
]


@pytest.mark.parametrize("command", [["report"], ["archive"], EXCLUDE_SUSPECT])
@pytest.mark.parametrize(("change", "message"), [(c, m) for _, c, m in SCREENS],
                         ids=[k for k, _, _ in SCREENS])
def test_a_hand_edited_screen_is_one_line_naming_the_field(base, tmp_path, command, change,
                                                           message):
    root = install_from(base, tmp_path)
    screen = next(root.glob("screens/*/screen.json"))
    edit(screen, change)
    code, _, err = run(root, tmp_path, command)
    one_line(code, err, f"llmb-run: screen results {screen}: {message}; run llmb-run screen "
             "again")


@pytest.mark.parametrize("where", ["node", "stamp", "figure"])
def test_tex_in_a_screen_is_drawn_as_written_never_as_mathtext(base, tmp_path, where):
    """A node name or a stamp holding `n$\\frac{$` ended the report in a mathtext traceback."""
    root = install_from(base, tmp_path)
    tex = "n$\\frac{$"

    def change(d: dict[str, Any]) -> None:
        if where == "node":
            d["nodes"][0]["node"] = tex
        elif where == "stamp":
            d["stamp"] = tex
        else:
            for node in d["nodes"]:
                for gpu in node["gpus"]:
                    gpu["figures"][tex] = 1.0
    edit(next(root.glob("screens/*/screen.json")), change)
    code, _, err = run(root, tmp_path, ["report"])
    assert code == 0 and "Traceback" not in err, err
    assert (tmp_path / "report" / "plots" / "screen.png").stat().st_size > 1000


# --- the preflight report ----------------------------------------------------------------------

@pytest.mark.parametrize(("change", "message"), [
    (lambda d: d.update(checks="all good"), "checks is 'all good' (text), not a list"),
    (lambda d: d["checks"][0].update(detail=["8"]),
     "checks[0].detail is a list of 1 item(s), not text"),
    (lambda d: d.update(placement={"exclude": ["n1"]}),
     "placement.exclude is a list of 1 item(s), not text"),
])
def test_a_hand_edited_preflight_report_is_left_out_of_the_archive_and_named(
        base, tmp_path, change, message):
    root = install_from(base, tmp_path)
    latest = root / "preflight" / "latest.json"
    edit(latest, change)
    code, _, err = run(root, tmp_path, ["archive"])
    assert code == 0 and "Traceback" not in err, err
    assert (f"llmb-run: archive: warning: the preflight report is left out: preflight report "
            f"{latest}: {message}") in err


def test_a_screen_that_names_200_nodes_is_left_out_in_hostlist_form(base, tmp_path):
    """--exclude-suspect refused a legitimate screen of 200 suspects ('at most 1024 fit on an
    #SBATCH line'): the nodes are written as scontrol show hostlist writes them."""
    root = install_from(base, tmp_path)
    edit(next(root.glob("screens/*/screen.json")),
         lambda d: d.update(suspects=[f"gpu{i:04d}" for i in range(200)]))
    code, out, err = run(root, tmp_path, EXCLUDE_SUSPECT)
    assert code == 0 and "Traceback" not in err, err
    assert "#SBATCH --exclude='gpu[0000-0199]'" in out  # nemo-run quotes it; sbatch reads it
    assert "--exclude-suspect: leaving out gpu[0000-0199] (named by " in err


def test_what_slurm_says_is_printed_escaped(base, tmp_path):
    """A reason or node list from squeue is shown with its control characters escaped: an OSC
    sequence in it would retitle the terminal, a newline forge a line."""
    root = install_from(base, tmp_path)
    with (root / "llmb_run_history.jsonl").open("a") as history:
        history.write(json.dumps({**fakeinstall.submit_record("77", root), "experiment": None,
                                  "experiment_dir": None}) + "\n")
    shims = Slurm(tmp_path / "slurm-bin")
    shims.set(squeue={"77": ["PENDING", "acct.x", "", "\x1b]0;owned\x07(Resources)"]},
              sacct="disabled")
    proc = runinstall.run(["status", "--all"], root, path=f"{shims.dir}:/usr/bin:/bin")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "\x1b" not in proc.stdout + proc.stderr and "\x07" not in proc.stdout
    assert "Slurm: \\x1b]0;owned\\x07(Resources)" in proc.stdout
