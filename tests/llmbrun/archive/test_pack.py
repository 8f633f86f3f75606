"""llmb-run archive / verify-archive on an install as real runs leave it
(tests/helpers/fakeinstall.py): what goes in and what is left out, secrets redacted by value, by
name and by shape, the archive verifies, every kind of damage or tampering is reported, and an
unsafe archive is refused without a byte written outside. On the real Slurm cluster:
tests/e2e/test_archive_e2e.py.
"""

from __future__ import annotations

import io
import json
import re
import subprocess
import tarfile
from pathlib import Path

import fakeinstall
import pytest
import runinstall
import yaml
from llmb import manifest
from llmb.layout import HISTORY_FILE as HISTORY
from llmb.llmbrun import clusterconfig
from llmb.llmbrun.archive import pack as archive
from llmb.llmbrun.archive import unpack as unpacking
from llmb.llmbrun.archive.format import INDEX, ROOT, list_files, sha256
from llmb.llmbrun.suite import plan as suiteplan
from llmb.llmbrun.suite import record as suites
from llmb.shared import redact

CFG_SECRET = "wandb-0123456789abcdef"  # WANDB_API_KEY in cluster_config.yaml's env
ENV_SECRET = "correct horse battery staple"  # MY_DB_PASSWORD in the archiving shell
STRANGER = "hf_" + "Zz9" * 12  # an HF token nobody told us about: masked by its shape
SECRETS = (fakeinstall.HF_TOKEN, CFG_SECRET, ENV_SECRET, STRANGER, "nemo-run-serialized-secret")


def llmb_run(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return runinstall.run(args, cwd, timeout=300, **env)


def make_install(root: Path) -> Path:
    fakeinstall.make_install(root, env={"WANDB_API_KEY": CFG_SECRET, "NCCL_DEBUG": "WARN"})
    leaky = [f"Downloading with token {fakeinstall.HF_TOKEN} from https://huggingface.co",
             f"+ export HF_TOKEN={fakeinstall.HF_TOKEN}",
             f"wandb: logging in with {CFG_SECRET}",
             f"db password is {ENV_SECRET}",
             f"someone pasted {STRANGER} here",
             "export TOKENIZERS_PARALLELISM=False"]
    first = fakeinstall.make_run(root, "101", extra_log=leaky)
    fakeinstall.make_run(root, "102", complete=False)
    fakeinstall.make_run(root, "103", restarts=1)
    fakeinstall.make_run(root, "104", workload="pretrain_nemotron4", size="15b", scale=16)
    # a record written before llmb-run masked --env values
    history = [fakeinstall.submit_record("101", first, env={"WANDB_API_KEY": CFG_SECRET})]
    (root / HISTORY).write_text("".join(json.dumps(r) + "\n" for r in history))
    (root / "preflight").mkdir()
    (root / "preflight" / "latest.json").write_text(json.dumps(PREFLIGHT))
    return root


PREFLIGHT = {"created": "20250411T144845Z", "nodes": 2, "gpu_type": "h100", "checks": [
    {"name": "partition", "status": "pass", "detail": "batch: up, 2 node(s), 2 idle"},
    {"name": "gpus", "status": "pass", "detail": "8 GPU(s) on each of node1, node2"},
    {"name": "driver", "status": "pass", "detail": "570.124.06 on every node"}]}


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> tuple[Path, Path, subprocess.CompletedProcess[str]]:
    """(install, archive file, the archive command's result), made once for the module."""
    root = make_install(tmp_path_factory.mktemp("install") / "llmb")
    out = root.parent / "results.tar.gz"
    proc = llmb_run(["archive", "--output", str(out)], root, MY_DB_PASSWORD=ENV_SECRET)
    return root, out, proc


def unpack(path: Path, dest: Path) -> Path:
    with tarfile.open(path) as tar:
        tar.extractall(dest, filter="data")
    return dest / ROOT


def repack(root: Path, path: Path) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        tar.add(root, arcname=ROOT)
    return path


def verify(path: Path) -> subprocess.CompletedProcess[str]:
    return llmb_run(["verify-archive", str(path)], path.parent)


# --- what goes in -----------------------------------------------------------------------------

def test_archive_holds_the_allow_list_and_names_what_it_left_out(made, tmp_path):
    _, out, proc = made
    assert proc.returncode == 0, proc.stderr
    assert f"archive: {out} (4 run(s), 5 log(s)" in proc.stdout
    for what in ("nsys profiles", "model checkpoints", "nemo-run's own state",
                 "NeMo's working directory"):
        assert f"of {what}" in proc.stdout
    tree = unpack(out, tmp_path)
    names = sorted(p.relative_to(tree).as_posix() for p in tree.rglob("*") if p.is_file())
    top = {n for n in names if not n.startswith(("runs/", "report/"))}
    assert top == {"ARCHIVE.json", "analysis.json", "system.json", "history.jsonl",
                   "preflight.json"}
    assert {"report/index.html", "report/report.md"} <= set(names)
    runs = [n for n in names if n.startswith("runs/")]
    assert len(runs) == 4 * 4 + 1  # manifest, job script, log, batch output; one restart log
    for n in runs:
        base = n.rsplit("/", 1)[-1]
        assert base == "llmb_manifest.json" or base.endswith(("_sbatch.sh", ".out")), n
    assert not [n for n in names if re.search(r"nsys|distcp|checkpoint|_CONFIG|_TASK|\.sqsh|"
                                              r"hf_token|cluster_config|/code/", n)]
    index = json.loads((tree / "ARCHIVE.json").read_text())
    assert set(index["files"]) == set(names) - {"ARCHIVE.json"}
    for name, info in index["files"].items():
        assert info == {"bytes": (tree / name).stat().st_size,
                        "sha256": sha256(tree / name)}
    assert index["left_out"]["checkpoints"]["files"] == 4
    assert index["report"]["status"] == "written" and index["analysis_error"] is None
    restarted = [r for r in index["runs"] if r["run"].endswith("_103000")]
    assert [len(r["logs"]) for r in restarted] == [2]
    with tarfile.open(out) as tar:
        assert all(m.uid == 0 and m.uname == "" and (m.isdir() or m.mode == 0o644)
                   for m in tar.getmembers())


def test_analysis_and_report_are_of_the_archived_runs(made, tmp_path):
    _, out, _ = made
    tree = unpack(out, tmp_path)
    data = json.loads((tree / "analysis.json").read_text())
    assert data["analysis"]["directory"] == "runs"  # no path of the machine that made it
    by_job = {re.search(r"_(\d+)_\d+\.out$", r["filename"]).group(1): r for r in data["results"]
              if r["filename"].endswith("_1.out") or "_103_" not in r["filename"]}
    assert by_job["101"]["status"] == "Success"
    assert by_job["102"]["status"] == "Failed" and "time limit" in by_job["102"]["reason"]
    assert by_job["103"]["status"] == "Success"  # the attempt after the node failure
    assert {c["verdict"] for c in data["configurations"]} == {"pass"}
    html = (tree / "report" / "index.html").read_text()
    assert "llama3.1" in html and "nemotron" in html


def test_system_description(made, tmp_path):
    _, out, _ = made
    facts = json.loads((unpack(out, tmp_path) / "system.json").read_text())
    assert facts["llmb"]["version"] and facts["gpu_type"] == "h100"
    assert facts["slurm"] == {"account": "acct", "partition": "batch", "gres": "gpu:8"}
    llama = facts["workloads"]["pretrain_llama3.1"]
    assert llama["image_reference"] == "nvcr.io/nvidia/nemo:25.04.01"
    assert llama["image_file"] == fakeinstall.IMAGE and llama["image_bytes"] == 64
    assert llama["nemo_run"]  # the workload venv's nemo-run, read without importing it
    assert set(facts["cluster"]) == {"version", "partitions", "nodes", "config"}
    assert facts["gpus_in_jobs"] == {"preflight": "20250411T144845Z",
                                     "gpus": "8 GPU(s) on each of node1, node2",
                                     "driver": "570.124.06 on every node"}
    assert json.loads((tmp_path / ROOT / "preflight.json").read_text()) == PREFLIGHT


# --- secrets ----------------------------------------------------------------------------------

def test_no_secret_reaches_the_archive_by_value_name_or_shape(made, tmp_path):
    _, out, _ = made
    raw = b""
    with tarfile.open(out) as tar:
        for m in tar.getmembers():
            if m.isfile():
                raw += tar.extractfile(m).read()
    for secret in SECRETS:
        assert secret.encode() not in raw, secret
    tree = unpack(out, tmp_path)
    (log,) = tree.glob("runs/*/experiments/*/*_101000/*/log-*.out")
    text = log.read_text()
    assert f"Downloading with token {redact.MASK} from https://huggingface.co" in text
    assert f"export HF_TOKEN={redact.MASK}" in text
    assert f"someone pasted {redact.MASK} here" in text
    assert "export TOKENIZERS_PARALLELISM=False" in text  # a lookalike name is kept
    (script,) = tree.glob("runs/*/experiments/*/*_101000/*_sbatch.sh")
    assert f"export WANDB_API_KEY={redact.MASK}" in script.read_text()
    assert "export NCCL_DEBUG=WARN" in script.read_text()
    manifest = json.loads(next(tree.glob("runs/*/experiments/*/*_101000/llmb_manifest.json"))
                          .read_text())
    assert manifest["nemo"]["tokenizer"]["library"] == "huggingface"  # JSON stays JSON


def test_copy_redacted_keeps_bytes_that_are_not_utf8(tmp_path):
    src = tmp_path / "log.out"
    src.write_bytes(b"\xff\xfe raw " + fakeinstall.HF_TOKEN.encode() + b"\n\xc3(\n")
    archive.copy_redacted(src, tmp_path / "x" / "log.out", set())
    assert (tmp_path / "x" / "log.out").read_bytes() == \
        b"\xff\xfe raw " + redact.MASK.encode() + b"\n\xc3(\n"


def test_known_secrets_come_from_token_file_config_env_and_environment(tmp_path, monkeypatch):
    from llmb.llmbrun import clusterconfig

    root = fakeinstall.make_install(tmp_path / "i", env={"APP_SECRET": "runai-0123456789"})
    monkeypatch.setenv("NGC_API_KEY", "nvapi-fromtheshell-0123")
    cfg = clusterconfig.find_config(str(root / "cluster_config.yaml"), {})
    found = archive.known_secrets(cfg)
    assert {fakeinstall.HF_TOKEN, "runai-0123456789", "nvapi-fromtheshell-0123"} <= found


# --- verify -----------------------------------------------------------------------------------

def test_verify_passes_an_untouched_archive(made):
    _, out, _ = made
    proc = verify(out)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout == (f"{out}: complete and consistent: 4 run(s), "
                           f"{len(json.loads(unpack_index(out))['files'])} file(s), "
                           "analysis matches the logs\n")


def unpack_index(path: Path) -> str:
    with tarfile.open(path) as tar:
        return tar.extractfile(f"{ROOT}/{INDEX}").read().decode()


def tamper(made, tmp_path: Path, change) -> subprocess.CompletedProcess[str]:
    """Unpack the archive, let change(tree) alter it, repack, verify."""
    _, out, _ = made
    tree = unpack(out, tmp_path / "u")
    change(tree)
    return verify(repack(tree, tmp_path / "tampered.tar.gz"))


def a_log(tree: Path, job: str = "101") -> Path:
    return next(tree.glob(f"runs/*/experiments/*/*_{job}000/*/log-*_{job}_0.out"))


def faster(log: Path) -> None:
    """Every step 2x faster, and its TFLOPS_per_GPU 2x higher to match (a log whose figures
    disagree with each other reads as Invalid): what someone polishing the numbers would do."""
    text = re.sub(r"train_step_timing in s: ([0-9.]+)",
                  lambda m: f"train_step_timing in s: {float(m.group(1)) / 2:.4g}",
                  log.read_text())
    log.write_text(re.sub(r"TFLOPS_per_GPU: ([0-9.e+]+)",
                          lambda m: f"TFLOPS_per_GPU: {float(m.group(1)) * 2:.4g}", text))


def rehash(tree: Path) -> None:
    """Bring the index up to date with the tree (a careful tamperer)."""
    index = json.loads((tree / INDEX).read_text())
    index["files"] = list_files(tree)
    (tree / INDEX).write_text(json.dumps(index))


def test_a_changed_log_fails_by_its_size_without_being_unpacked(made, tmp_path):
    """A log of another size than the index lists is named, and never written out (the
    analysis of the others still holds)."""
    proc = tamper(made, tmp_path, lambda t: faster(a_log(t)))
    assert proc.returncode == 1
    assert "problem(s):" in proc.stdout
    assert re.search(r"log-\S+_101_0\.out was changed after the archive was made \(its size "
                     r"\(\d+ bytes\) is not the \d+ bytes ARCHIVE.json lists; it was not "
                     r"unpacked\)", proc.stdout)
    assert "but there is no such log" not in proc.stdout


def test_a_changed_log_with_a_rewritten_index_still_fails_by_the_analysis(made, tmp_path):
    def change(tree: Path) -> None:
        faster(a_log(tree))
        rehash(tree)

    proc = tamper(made, tmp_path, change)
    assert proc.returncode == 1
    assert "was changed" not in proc.stdout
    assert re.search(r"_101_0\.out: analysis.json says time_mean=[0-9.]+, its log gives",
                     proc.stdout)


def test_a_missing_log_is_named(made, tmp_path):
    def change(tree: Path) -> None:
        a_log(tree, "104").unlink()
        rehash(tree)

    proc = tamper(made, tmp_path, change)
    assert proc.returncode == 1
    assert re.search(r"_104000: its manifest has no training log", proc.stdout)
    assert re.search(r"analysis.json has a result for \S+_104_0.out, but there is no such log",
                     proc.stdout)


def test_removed_added_and_changed_files_are_each_named(made, tmp_path):
    def change(tree: Path) -> None:
        (tree / "system.json").unlink()
        (tree / "notes.txt").write_text("extra\n")
        (tree / "report" / "index.html").write_text("<html></html>")

    proc = tamper(made, tmp_path, change)
    assert proc.returncode == 1
    assert "system.json is listed in ARCHIVE.json but missing" in proc.stdout
    assert "system.json (the system description) is missing" in proc.stdout
    assert "notes.txt is in the archive but not in ARCHIVE.json" in proc.stdout
    assert "report/index.html was changed after the archive was made" in proc.stdout


def test_a_secret_in_clear_is_reported_without_showing_it(made, tmp_path):
    def change(tree: Path) -> None:
        with a_log(tree).open("a") as fh:
            fh.write(f"HF_TOKEN={fakeinstall.HF_TOKEN}\n")
        rehash(tree)

    proc = tamper(made, tmp_path, change)
    assert proc.returncode == 1
    assert re.search(r"log-\S+ line \d+: HF_TOKEN in clear", proc.stdout)
    assert fakeinstall.HF_TOKEN not in proc.stdout + proc.stderr


def test_no_index_is_not_an_llmb_archive(made, tmp_path):
    proc = tamper(made, tmp_path, lambda t: (t / INDEX).unlink())
    assert proc.returncode == 1
    assert "no readable ARCHIVE.json: not an llmb archive" in proc.stdout


# --- unsafe or broken archives ----------------------------------------------------------------

def hostile(tmp_path: Path, member: tarfile.TarInfo, data: bytes = b"x") -> Path:
    path = tmp_path / "hostile.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        ok = tarfile.TarInfo(f"{ROOT}/ARCHIVE.json")
        ok.size = 2
        tar.addfile(ok, io.BytesIO(b"{}"))
        member.size = len(data) if member.isfile() else 0
        tar.addfile(member, io.BytesIO(data) if member.isfile() else None)
    return path


def sym(name: str, target: str) -> tarfile.TarInfo:
    m = tarfile.TarInfo(name)
    m.type, m.linkname = tarfile.SYMTYPE, target
    return m


def of_type(name: str, kind: bytes, link: str = "") -> tarfile.TarInfo:
    m = tarfile.TarInfo(name)
    m.type, m.linkname = kind, link
    return m


@pytest.mark.parametrize(("member", "why"), [
    (lambda d: tarfile.TarInfo(f"{d}/escaped.txt"), "an absolute path"),
    (lambda d: tarfile.TarInfo(f"{ROOT}/../../escaped.txt"), "a path with '..'"),
    (lambda d: tarfile.TarInfo("elsewhere/escaped.txt"), "a path outside llmb-archive/"),
    (lambda d: sym(f"{ROOT}/runs", d), "a link"),
    (lambda d: of_type(f"{ROOT}/h", tarfile.LNKTYPE, "/etc/passwd"), "a link"),
    (lambda d: of_type(f"{ROOT}/dev", tarfile.CHRTYPE), "a device or a fifo"),
    (lambda d: tarfile.TarInfo(f"{ROOT}/ARCHIVE.json"), "in the archive twice"),
    (lambda d: tarfile.TarInfo(f"{ROOT}/a\nb"), "control characters"),
])
def test_an_unsafe_archive_is_refused_and_nothing_is_written(tmp_path, member, why):
    outside = tmp_path / "outside"
    outside.mkdir()
    path = hostile(tmp_path, member(str(outside)))
    before = sorted(p.name for p in tmp_path.rglob("*"))
    proc = verify(path)
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert proc.stderr.startswith(f"llmb-run: verify-archive {path}: refused: unsafe member")
    assert why in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert sorted(p.name for p in tmp_path.rglob("*")) == before
    assert not (tmp_path / "escaped.txt").exists() and not list(outside.iterdir())


@pytest.mark.parametrize(("content", "expect"), [
    (b"not an archive at all", "not a readable archive"),
    (None, "not a readable archive"),  # a truncated real one
])
def test_a_broken_file_is_one_line(made, tmp_path, content, expect):
    _, out, _ = made
    path = tmp_path / "broken.tar.gz"
    path.write_bytes(content if content is not None else out.read_bytes()[:5000])
    proc = verify(path)
    assert proc.returncode == 1 and proc.stdout == ""
    assert expect in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_verify_of_a_missing_file(tmp_path):
    proc = verify(tmp_path / "nope.tar.gz")
    assert proc.returncode == 1
    assert proc.stderr == f"llmb-run: verify-archive {tmp_path}/nope.tar.gz: no such file\n"
    long = tmp_path / ("9" * 300 + ".tar.gz")
    proc = verify(long)
    assert proc.returncode == 1
    assert proc.stderr == (f"llmb-run: verify-archive {long}: cannot be read "
                           "(File name too long)\n")
    proc = verify(Path("/dev/null"))
    assert proc.stderr == "llmb-run: verify-archive /dev/null: is not a file\n"


def test_safe_members_refuses_an_archive_that_claims_too_much(monkeypatch, tmp_path):
    monkeypatch.setattr(unpacking, "MAX_UNPACKED", 10)
    path = tmp_path / "big.tar"
    with tarfile.open(path, "w") as tar:
        m = tarfile.TarInfo(f"{ROOT}/big")
        m.size = 11
        tar.addfile(m, io.BytesIO(b"x" * 11))
    with tarfile.open(path) as tar, pytest.raises(unpacking.UnsafeArchive, match="claims more"):
        unpacking.safe_members(tar)


# --- installs that are not tidy ---------------------------------------------------------------

def test_a_run_without_log_is_warned_about_and_fails_verify(tmp_path):
    root = fakeinstall.make_install(tmp_path / "llmb")
    run_dir = fakeinstall.make_run(root, "201")
    fakeinstall.make_run(root, "202")
    for log in run_dir.glob("*/*.out"):
        log.unlink()  # submitted, never started
    out = tmp_path / "a.tar.gz"
    proc = llmb_run(["archive", "--output", str(out)], root)
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"warning: runs/\S+_201000 has no training log", proc.stdout)
    check = verify(out)
    assert check.returncode == 1
    assert re.search(r"_201000: its manifest has no training log", check.stdout)


def test_a_run_without_manifest_is_kept_and_noted(tmp_path):
    root = fakeinstall.make_install(tmp_path / "llmb")
    run_dir = fakeinstall.make_run(root, "301")
    manifest.path_in(run_dir).unlink()
    out = tmp_path / "a.tar.gz"
    proc = llmb_run(["archive", "--output", str(out)], root)
    assert proc.returncode == 0, proc.stderr
    assert "has no llmb_manifest.json" in proc.stdout
    check = verify(out)
    assert check.returncode == 0, check.stdout
    assert "1 run(s) without a manifest" in check.stdout


def test_an_install_without_runs_archives_and_verifies(tmp_path):
    root = fakeinstall.make_install(tmp_path / "llmb")
    out = tmp_path / "a.tar.gz"
    proc = llmb_run(["archive", "--output", str(out)], root)
    assert proc.returncode == 0, proc.stderr
    assert "(0 run(s), 0 log(s)" in proc.stdout
    assert "no analysis.json" in proc.stdout  # the analyzer finds no log to analyze
    check = verify(out)
    assert check.returncode == 0, check.stdout
    assert "analysis matches" not in check.stdout and "no analysis" in check.stdout


SYSTEM_PYTHON = "/usr/bin/python3"


def system_python_without_matplotlib() -> None:
    """What docs/installer.md asks of the installer's Python: a python3 with PyYAML only."""
    probe = subprocess.run([SYSTEM_PYTHON, "-c", "import yaml, importlib.util as u; "
                            "assert u.find_spec('matplotlib') is None"], capture_output=True,
                           check=False) if Path(SYSTEM_PYTHON).exists() else None
    if probe is None or probe.returncode != 0:
        pytest.skip(f"{SYSTEM_PYTHON} needs PyYAML and no matplotlib for this test")


def test_llmb_run_on_the_system_python_still_writes_the_report(tmp_path):
    """llmb-run runs on the system python3 (PyYAML only); the report is drawn by a workload
    venv's Python, which has matplotlib (common/requirements/report.txt)."""
    system_python_without_matplotlib()
    root = fakeinstall.make_install(tmp_path / "llmb")  # workload venvs: the dev venv
    fakeinstall.make_run(root, "401")
    out = tmp_path / "a.tar.gz"
    proc = llmb_run(["archive", "--output", str(out)], root, LLMB_PYTHON=SYSTEM_PYTHON)
    assert proc.returncode == 0, proc.stderr
    assert "no HTML report" not in proc.stdout
    check = verify(out)
    assert check.returncode == 0 and "no HTML report" not in check.stdout, check.stdout
    report = llmb_run(["report", "--output", str(tmp_path / "rep")], root,
                      LLMB_PYTHON=SYSTEM_PYTHON)
    assert report.returncode == 0, report.stderr
    assert (tmp_path / "rep" / "index.html").is_file()


def test_without_any_matplotlib_the_archive_says_it_has_no_report(tmp_path):
    system_python_without_matplotlib()
    root = fakeinstall.make_install(tmp_path / "llmb")
    conf = yaml.safe_load((root / "cluster_config.yaml").read_text())
    for w in conf["workloads"].values():
        w["venv"] = str(tmp_path / "no-venv")  # no workload venv with matplotlib either
    (root / "cluster_config.yaml").write_text(yaml.safe_dump(conf))
    fakeinstall.make_run(root, "401")
    out = tmp_path / "a.tar.gz"
    proc = llmb_run(["archive", "--output", str(out)], root, LLMB_PYTHON=SYSTEM_PYTHON)
    assert proc.returncode == 0, proc.stderr
    first = proc.stdout.splitlines()[0]
    assert first.startswith(f"archive: {out} (") and first.endswith("; no HTML report)")
    assert "no HTML report: no Python here has matplotlib" in proc.stdout
    check = verify(out)
    assert check.returncode == 0, check.stdout
    assert "analysis matches the logs; no HTML report" in check.stdout
    report = llmb_run(["report"], root, LLMB_PYTHON=SYSTEM_PYTHON)
    assert report.returncode == 1
    assert report.stderr.startswith("llmb-run: cannot write the report: no Python here has "
                                    "matplotlib")
    assert not (root / "report").exists()


BOTH = [("", "--output is empty"),
        ("a\nb.tar.gz", "--output=a\\nb.tar.gz contains control character(s) \\n"),
        ("9" * 300 + ".tar.gz", "File name too long")]
ARCHIVE_ONLY = [(".", "is a directory; name the archive file"),  # report writes into a dir
                ("no/such/dir/a.tar.gz", "no/such/dir is not a directory")]


@pytest.mark.parametrize(("command", "output", "message"),
                         [("archive", *c) for c in BOTH + ARCHIVE_ONLY] +
                         [("report", *c) for c in BOTH])
def test_bad_output_is_one_line(tmp_path, command, output, message):
    root = fakeinstall.make_install(tmp_path / "llmb")
    fakeinstall.make_run(root, "1")
    before = sorted(p.name for p in root.iterdir())
    proc = llmb_run([command, "--output", output], root)
    assert proc.returncode == 1 and proc.stdout == ""
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert sorted(p.name for p in root.iterdir()) == before


def test_default_output_goes_to_the_install_and_leaves_no_staging(tmp_path):
    root = fakeinstall.make_install(tmp_path / "llmb")
    proc = llmb_run(["archive"], root)
    assert proc.returncode == 0, proc.stderr
    made_files = list(root.glob("llmb-archive-*.tar.gz"))
    assert len(made_files) == 1
    assert not [p for p in root.iterdir() if p.name.startswith(".llmb-archive-")]


def test_classify():
    run = Path("/i/workloads/w/experiments/e/e_1")
    cases = {"llmb_manifest.json": None, "e_sbatch.sh": None, "e/log-x_1_0.out": None,
             "e/sbatch_x_1.out": None, "_CONFIG": "nemo_run_state", "e/nsys_profile/p.nsys-rep":
             "nsys_reports", "e/code/nemo_experiments/default/checkpoints/s/weights/a.distcp":
             "checkpoints", "e/code/nemo_experiments/default/log.txt": "working_dir",
             "e/notes.txt": "other", "e/sub/deep.out": "other"}
    for rel, kind in cases.items():
        assert archive.classify(run, run / rel) == kind, rel


def test_archive_of_one_suite_holds_its_runs_its_record_and_its_history_alone(tmp_path):
    """Runs 201 and 202 belong to the suite (202 a resubmission of 201), 203 to another suite,
    204 to no suite: the archive of the first holds 201 and 202, their history lines (the
    submissions and the states recorded for them) and suite.json, and it verifies."""
    root = fakeinstall.make_install(tmp_path / "llmb")
    cfg = clusterconfig.find_config(str(root / "cluster_config.yaml"), {})
    configs = suiteplan.published(cfg, suiteplan.Selection(("pretrain_llama3.1",), ("fp8",), 8,
                                                           8), {})
    made = suites.create(cfg, suites.plan_data("x", configs, suiteplan.order_runs(configs, 1),
                                               {"repeats": 1, "smoke": False, "placement": {}}))
    runs = {job: fakeinstall.make_run(root, job, stamp=int(job)) for job in ("201", "202",
                                                                             "203", "204")}
    suite_of = {"201": made.id, "202": made.id, "203": "20000101-000000"}
    for job, run_dir in runs.items():
        extra = {"suite": suite_of[job], "suite_run": 1} if job in suite_of else {}
        cfg.history.append(fakeinstall.submit_record(job, run_dir, **extra))
        cfg.history.append({"type": "state", "job_id": job, "state": "COMPLETED",
                            "nodes": "node1"})
    out = tmp_path / "suite.tar.gz"
    proc = llmb_run(["archive", "--suite", made.id, "--output", str(out)], root)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"archive: {out} (2 run(s), 2 log(s), ")
    tree = unpack(out, tmp_path / "unpacked")
    index = json.loads((tree / INDEX).read_text())
    assert index["suite"] == made.id
    assert sorted(Path(r["run"]).name for r in index["runs"]) == sorted(
        runs[j].name for j in ("201", "202"))
    kept = [json.loads(line) for line in (tree / "history.jsonl").read_text().splitlines()]
    assert sorted((r["type"], r["job_id"]) for r in kept) == [
        ("state", "201"), ("state", "202"), ("submit", "201"), ("submit", "202")]
    assert json.loads((tree / "suite.json").read_text())["id"] == made.id
    assert len(json.loads((tree / "analysis.json").read_text())["results"]) == 2
    check = llmb_run(["verify-archive", str(out)], tmp_path)
    assert check.returncode == 0, check.stdout + check.stderr
