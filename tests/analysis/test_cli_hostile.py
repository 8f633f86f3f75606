"""The analyzer's front, table-driven: every hostile option or value stops with its
exit code and one stderr line naming the option and the value, prints nothing on stdout, and
writes nothing (no report directory, no file, no command run); bad log contents never stop it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from analyzercli import run_analyzer
from paths import REPO

GOOD = (REPO / "tests" / "fixtures" / "logs" / "verdicts"
        / "pretrain_llama3.1_8b_fp8_gpus8_tp1_pp1_cp2_vpNone_mbs1_gbs128")
PWNED = "$(touch pwned)"

# (arguments, exit status, words the one stderr line holds); {tmp} is the working directory,
# {runs} a tree with one good run, {file} a plain file inside it.
CASES = [
    (["--tolerance=abc", "{runs}"], 2, ["--tolerance=abc", "percentage from 0"]),
    (["--tolerance=-5", "{runs}"], 2, ["--tolerance=-5"]),
    (["--tolerance=100", "{runs}"], 2, ["--tolerance=100"]),
    (["--tolerance=nan", "{runs}"], 2, ["--tolerance=nan"]),
    (["--tolerance=1e308", "{runs}"], 2, ["--tolerance=1e308"]),
    (["--tolerance=", "{runs}"], 2, ["--tolerance="]),
    (["--tolerance=5; touch pwned", "{runs}"], 2, ["--tolerance=5; touch pwned"]),
    (["--tolerance", "{runs}"], 2, ["--tolerance", "not allowed"]),
    (["--window=44-11", "{runs}"], 2, ["--window=44-11", "FIRST <= LAST"]),
    (["--window=a-b", "{runs}"], 2, ["--window=a-b"]),
    (["--window=1-2-3", "{runs}"], 2, ["--window=1-2-3"]),
    (["--window=99999999999-1", "{runs}"], 2, ["--window=99999999999-1"]),
    (["--window=-5-3", "{runs}"], 2, ["--window=-5-3"]),
    (["--window=11\n44", "{runs}"], 2, ["--window=11\\n44"]),
    # only ASCII digits are numbers: Arabic-Indic and full-width ones are refused as given
    (["--window=\u0661\u0661-\u0664\u0664", "{runs}"], 2,
     ["--window=\u0661\u0661-\u0664\u0664 is not allowed"]),
    (["--window=\uff11-\uff14", "{runs}"], 2, ["--window=\uff11-\uff14 is not allowed"]),
    (["--baseline=--", "{runs}"], 2, ["--baseline=-- gives --baseline no value"]),
    # quoted as written, not as matched (lower case)
    (["--gpu-type=H999", "{runs}"], 2, ["--gpu-type=H999 is not allowed"]),
    (["--window", "--check", "{runs}"], 2, ["--window needs a value"]),
    (["--format=xml", "{runs}"], 2, ["--format=xml", "table, csv, json"]),
    (["--format=", "{runs}"], 2, ["--format=", "table, csv, json"]),
    (["--gpu-type=a100", "{runs}"], 2, ["--gpu-type=a100", "h100, b200, gb200, h200, b300, gb300"]),
    ([f"--gpu-type={PWNED}", "{runs}"], 2, [f"--gpu-type={PWNED}"]),
    (["--report=", "{runs}"], 2, ["--report needs a directory"]),
    (["--report=rep\nort", "{runs}"], 2, ["--report=rep\\nort", "control character"]),
    (["--report={file}", "{runs}"], 2, ["--report=", "exists and is not a directory"]),
    (["--report={file}/sub", "{runs}"], 2, ["--report=", "is not a directory"]),
    (["--report={tmp}/" + "x" * 300, "{runs}"], 2, ["--report=", "(File name too long)"]),
    (["--baseline=", "{runs}"], 2, ["--baseline needs a directory"]),
    (["--baseline={tmp}/nope", "{runs}"], 2, ["--baseline=", "does not exist"]),
    (["--baseline={file}", "{runs}"], 2, ["--baseline=", "is not a directory"]),
    ([f"--baseline={PWNED}", "{runs}"], 2, [f"--baseline={PWNED}", "does not exist"]),
    (["--check=yes", "{runs}"], 2, ["--check takes no value", "--check=yes"]),
    (["--full-names=yes", "{runs}"], 2, ["--full-names takes no value"]),
    (["--bogus", "{runs}"], 2, ["unknown option --bogus", "--tolerance=PCT"]),
    (["-x\x1b[31m", "{runs}"], 2, ["unknown option -x\\x1b[31m"]),
    ([PWNED], 1, [PWNED, "does not exist"]),
    (["{file}"], 1, ["is not a directory"]),
    (["{runs}", "{tmp}/gone\nline"], 1, ["gone\\nline does not exist"]),
    (["--report={tmp}/report", "{tmp}/empty"], 1, ["no .out log files"]),
]


@pytest.fixture()
def workdir(tmp_path: Path) -> Path:
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "good").symlink_to(GOOD)
    (runs / "notes.txt").write_text("a file\n")
    (tmp_path / "empty").mkdir()
    return tmp_path


def snapshot(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def cli(args: list[str], cwd: Path, **kw: object) -> subprocess.CompletedProcess[str]:
    return run_analyzer(args, cwd, **kw)


@pytest.mark.parametrize(("args", "code", "words"), CASES,
                         ids=[repr(" ".join(c[0]))[:40] for c in CASES])
def test_hostile_input_one_line_nothing_written(workdir: Path, args: list[str], code: int,
                                                words: list[str]) -> None:
    values = {"tmp": str(workdir), "runs": str(workdir / "runs"),
              "file": str(workdir / "runs" / "notes.txt")}
    before = snapshot(workdir)
    proc = cli([a.format(**values) if "{" in a else a for a in args], workdir)
    assert proc.returncode == code, proc.stderr
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("parse_train_timing.sh: ")
    for word in words:
        assert word.format(**values) in lines[0]
    assert snapshot(workdir) == before  # no report, no pwned, nothing
    assert "Traceback" not in proc.stderr


def test_bad_values_in_logs_never_stop_the_report(tmp_path: Path) -> None:
    """1e308, 1e-300, zero and negative step times and a manifest with
    num_layers "abc", each next to a good run: JSON valid, the good run reported."""
    root = tmp_path / "runs"
    (root / "good").mkdir(parents=True)
    first = sorted(GOOD.iterdir())[0]  # its window alternates 9.31 and 9.33
    (root / "good" / "run").symlink_to(first)
    log = next(first.rglob("log-*.out")).read_text()
    for value in ("1e308", "1e-300", "0", "-12.5", "nan"):
        d = root / f"case-{value}" / GOOD.name
        d.mkdir(parents=True)
        (d / "log-x_1_0.out").write_text(log.replace("train_step_timing in s: 9.31",
                                                     f"train_step_timing in s: {value}"))
    manifested = root / "custom" / "custom_1"
    (manifested / "custom").mkdir(parents=True)
    (manifested / "custom" / "log-custom_1_0.out").write_text(log)
    (manifested / "llmb_manifest.json").write_text(json.dumps({
        "workload": "pretrain_llama3.1", "model_size": "8b", "dtype": "fp8", "num_gpus": 8,
        "parallelism": {"gbs": 128, "num_layers": "abc"}}))
    for fmt in ("json", "table", "csv"):
        proc = cli([f"--format={fmt}", str(root)], tmp_path)
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    data = json.loads(cli(["--format=json", str(root)], tmp_path).stdout)
    by_dir = {r["filename"].split(os.sep)[0]: r for r in data["results"]}
    assert by_dir["good"]["status"] == "Success" and by_dir["good"]["time_mean"] == 9.32
    for value in ("1e308", "1e-300", "0", "-12.5", "nan"):
        r = by_dir[f"case-{value}"]
        assert r["status"] == "Invalid" and "not a plausible number of seconds" in r["reason"]
        assert r["time_mean"] == 9.33  # the other half of the window, which is plausible
        assert r["tokens_per_second"] > 0 and 0 < r["mfu"] < 1
    assert by_dir["custom"]["identified_by"] is None  # the manifest was refused, and said so
    [warning] = data["warnings"]
    assert "parallelism.num_layers is \"abc\", not a positive whole number" in warning["warning"]


def test_ctrl_c_is_one_line_and_exit_130(tmp_path: Path) -> None:
    big = tmp_path / "runs" / "x" / "log-big_1_0.out"
    big.parent.mkdir(parents=True)
    with open(big, "wb") as f:  # sparse: reading it takes a while, storing it nothing
        f.truncate(64 << 30)
    env = {**os.environ, "PYTHONPATH": str(REPO / "common")}
    # A background job without job control (nohup, `cmd &` in a script) starts with SIGINT
    # ignored, and Python keeps it so: give the analyzer the default a terminal would.
    proc = subprocess.Popen([sys.executable, "-m", "llmb.analysis.cli", str(tmp_path / "runs")],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120  # a hang guard, not a speed bound
    while time.monotonic() < deadline:  # interrupt once it is reading the log
        fds = os.listdir(f"/proc/{proc.pid}/fd")
        open_now = set()
        for fd in fds:  # an fd listed may be closed before it is looked at
            with contextlib.suppress(FileNotFoundError):
                open_now.add(os.readlink(f"/proc/{proc.pid}/fd/{fd}"))
        if str(big) in open_now:
            break
        time.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130
    assert err == "parse_train_timing.sh: interrupted\n" and out == ""


@pytest.mark.parametrize("name", ["=HYPERLINK(\"http://x\",\"y\")", "+1+1", "-2+3", "@SUM(1)",
                                  "\tx"])
def test_a_csv_cell_that_would_open_as_a_formula_is_text(tmp_path: Path, name: str) -> None:
    """OWASP's CSV injection guidance: a text cell that begins with = + - @, a tab or a carriage
    return is prefixed with a single quote, which a spreadsheet reads as text."""
    first = sorted(GOOD.iterdir())[0]
    (tmp_path / "runs" / name).mkdir(parents=True)
    (tmp_path / "runs" / name / "run").symlink_to(first)
    proc = cli(["--format=csv", str(tmp_path / "runs")], tmp_path)
    assert proc.returncode == 0, proc.stderr
    import csv
    import io

    rows = list(csv.DictReader(io.StringIO(proc.stdout)))
    assert rows and all(not str(cell).startswith(("=", "+", "-", "@", "\t", "\r"))
                        for row in rows for cell in row.values())
    assert any(cell.startswith("'") for row in rows for cell in row.values())


@pytest.mark.parametrize(("field", "value"), [("num_gpus", "1" + "0" * 400),
                                              ("seq_length", "1" + "0" * 400),
                                              ("num_gpus", "1e400")])
def test_a_manifest_count_beyond_any_machine_names_the_manifest(tmp_path: Path, field: str,
                                                                value: str) -> None:
    """10^400 GPUs made the run 'Failed: cannot analyze: OverflowError'."""
    first = sorted(GOOD.iterdir())[0]
    run = tmp_path / "runs" / "custom" / "custom_1"
    (run / "custom").mkdir(parents=True)
    (run / "custom" / "log-custom_1_0.out").write_text(next(first.rglob("log-*.out")).read_text())
    text = json.dumps({"workload": "pretrain_llama3.1", "model_size": "8b", "dtype": "fp8",
                       "num_gpus": 8, "seq_length": 8192, "parallelism": {"gbs": 128}})
    (run / "llmb_manifest.json").write_text(text.replace(f'"{field}": 8192' if field ==
                                                         "seq_length" else f'"{field}": 8',
                                                         f'"{field}": {value}'))
    data = json.loads(cli(["--format=json", str(tmp_path / "runs")], tmp_path).stdout)
    [result] = data["results"]
    assert "cannot analyze" not in str(result["reason"])
    [warning] = data["warnings"]
    assert str(warning).count("llmb_manifest.json") == 1
    assert warning["warning"].startswith(f"{field} is ")
    assert "not a positive whole number up to 16777216" in warning["warning"]


def test_a_token_in_an_option_is_never_printed_back(workdir: Path) -> None:
    token = "hf_" + "Z" * 34
    proc = cli([f"--gpu-type={token}", str(workdir / "runs")], workdir)
    assert proc.returncode == 2 and token not in proc.stderr and "********" in proc.stderr
