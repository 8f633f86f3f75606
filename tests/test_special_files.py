"""Every file llmb reads that a person or a job can name is a regular file read with a bound: a
FIFO (which would block an open for reading forever), a link to /dev/zero (endless bytes) or a
directory put where the file should be is refused in one line, or skipped with a reason, on
every front: the analyzer (training logs, the job's sbatch output, run manifests), llmb-run
(cluster_config.yaml, a bulk file, the history, the HF token file, preflight's image and
token, archive) and the installer (--config, hf_token_file, its own files). Each case runs
the real command in a subprocess with a deadline: a hang fails the test."""

from __future__ import annotations

import resource
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import runinstall
import yaml
from analyzercli import run_analyzer
from paths import REPO
from specialfiles import KINDS, plant

DEADLINE_S = 60
FIXTURE_JOB = "2201462"  # a failed run of the fixture logs: its sbatch output is read


def bounded_memory() -> None:
    """preexec_fn: at most 2 GB of address space (a read of /dev/zero fails, not the host)."""
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))


def one_line_or_clean(proc: subprocess.CompletedProcess[str], prog: str = "") -> None:
    """No traceback; at most one line that is an error or a warning of `prog` (progress lines
    of long steps aside)."""
    assert "Traceback" not in proc.stderr, proc.stderr
    said = [ln for ln in proc.stderr.splitlines() if ln.startswith(prog) and ln.strip()
            and (not prog or "warning" in ln or proc.returncode != 0)]
    assert len(said) <= (2 if not prog else 1), proc.stderr


# --- the analyzer -------------------------------------------------------------------------------

def fixture_copy(tmp_path: Path) -> Path:
    run_dir = runinstall.fixture_run(FIXTURE_JOB)
    copy = tmp_path / "experiments" / run_dir.parent.name / run_dir.name
    shutil.copytree(run_dir, copy)
    return copy


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", ["sbatch_x_{job}.out", "log-x_{job}_1.out", "llmb_manifest.json"])
def test_the_analyzer_never_waits_on_or_reads_endlessly(tmp_path, kind, name):
    run_dir = fixture_copy(tmp_path)
    job_dir = next(p for p in run_dir.iterdir() if p.is_dir())
    where = run_dir if name == "llmb_manifest.json" else job_dir
    plant(where / name.format(job=FIXTURE_JOB), kind)
    proc = run_analyzer(["--format=json", str(tmp_path / "experiments")], timeout=DEADLINE_S,
                        preexec_fn=bounded_memory)
    assert proc.returncode in (0, 1, 3), proc.stderr
    one_line_or_clean(proc)
    assert '"results"' in proc.stdout


# --- llmb-run ----------------------------------------------------------------------------------

@pytest.fixture
def install(tmp_path: Path) -> Path:
    root = runinstall.make_install(tmp_path / "install")
    (root / "images").mkdir()
    (root / "images" / "nvidia+nemo+25.04.01.sqsh").write_bytes(b"hsqs" + bytes(60))
    return root


def llmb_run(root: Path, *args: str, path: str | None = None,
             timeout: float = DEADLINE_S) -> subprocess.CompletedProcess[str]:
    env = runinstall.llmb_run_env(SHIM_LOG=str(root / "shim.log"),
                                  PATH=path or f"{REPO / 'tests' / 'shims'}:/usr/bin:/bin")
    return subprocess.run(["bash", str(runinstall.LLMB_RUN), *args], cwd=root, env=env,
                          capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, preexec_fn=bounded_memory)


SINGLE = ["single", "-w", "pretrain_llama3.1", "-s", "8b", "--dtype", "fp8", "--scale", "8",
          "--dry-run"]


def _bulk(root: Path) -> list[str]:
    return ["bulk", str(root / "sweep.yaml")]


LLMB_RUN_CASES: list[tuple[str, Callable[[Path], Path], Callable[[Path], list[str]], str]] = [
    ("config", lambda r: r / "cluster_config.yaml", lambda r: ["list"], "cluster_config.yaml"),
    ("bulk", lambda r: r / "sweep.yaml", _bulk, "bulk file"),
    ("history", lambda r: r / "llmb_run_history.jsonl", lambda r: ["status"],
     "llmb_run_history.jsonl"),
    ("token-single", lambda r: r / ".hf_token", lambda r: SINGLE, "hf_token_file"),
]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("case", "target", "args", "named"), LLMB_RUN_CASES,
                         ids=[c[0] for c in LLMB_RUN_CASES])
def test_llmb_run_refuses_in_one_line(install, kind, case, target, args, named):
    plant(target(install), kind)
    proc = llmb_run(install, *args(install))
    assert proc.returncode in (1, 2), proc.stdout
    assert len(proc.stderr.splitlines()) == 1 and named in proc.stderr, proc.stderr
    assert not (install / "shim.log").exists()


PREFLIGHT_CHECKS = """
import sys
from llmb.llmbrun import clusterconfig, preflight
cfg = clusterconfig.find_config(sys.argv[1], {})
print(preflight.check_image(cfg).status, preflight.check_hf_token(cfg).status)
"""


@pytest.mark.parametrize("kind", KINDS)
def test_preflight_checks_fail_instead_of_waiting(install, kind):
    conf = yaml.safe_load((install / "cluster_config.yaml").read_text())
    image = install / "images" / "planted.sqsh"
    plant(image, kind)
    conf["workloads"]["pretrain_llama3.1"]["image"] = str(image)
    (install / "cluster_config.yaml").write_text(yaml.safe_dump(conf))
    plant(install / ".hf_token", kind)
    env = runinstall.llmb_run_env(PYTHONPATH=str(REPO / "common"))
    proc = subprocess.run([sys.executable, "-c", PREFLIGHT_CHECKS,
                           str(install / "cluster_config.yaml")], env=env,
                          capture_output=True, text=True, timeout=DEADLINE_S,
                          preexec_fn=bounded_memory)
    assert (proc.returncode, proc.stdout) == (0, "fail fail\n"), proc.stderr


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_archive_never_waits_on_the_token_or_the_history(install, tmp_path, kind):
    plant(install / ".hf_token", kind)
    plant(install / "llmb_run_history.jsonl", kind)
    proc = llmb_run(install, "archive", "--output", str(tmp_path / "a.tar.gz"),
                    timeout=DEADLINE_S * 2, path=f"{Path(sys.executable).parent}:/usr/bin:/bin")
    one_line_or_clean(proc, "llmb-run: warning")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "a.tar.gz").is_file()


# --- the installer ------------------------------------------------------------------------------

def installer(tmp_path: Path, config: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(REPO / "installer" / "install.sh"), "--config",
                           str(config), *extra], env=runinstall.llmb_run_env(),
                          capture_output=True, text=True, timeout=DEADLINE_S,
                          stdin=subprocess.DEVNULL, preexec_fn=bounded_memory)


def installer_config(tmp_path: Path, **extra) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({
        "install_path": str(tmp_path / "install"), "gpu_type": "h100",
        "workloads": ["pretrain_llama3.1"], "slurm": {"account": "a", "partition": "b"},
        "venv": {"reuse": sys.prefix}, "image": {"method": "skip"}, **extra}))
    return path


@pytest.mark.parametrize("kind", KINDS)
def test_installer_token_file(tmp_path, kind):
    token = tmp_path / "token"
    plant(token, kind)
    proc = installer(tmp_path, installer_config(tmp_path, hf_token_file=str(token)), "--dry-run")
    assert proc.returncode == 1
    assert proc.stderr.startswith(f"llmb-install: hf_token_file={token} ")
    assert len(proc.stderr.splitlines()) == 1


@pytest.mark.parametrize("kind", KINDS)
def test_installer_config_file(tmp_path, kind):
    config = tmp_path / "config.yaml"
    plant(config, kind)
    proc = installer(tmp_path, config, "--dry-run")
    assert proc.returncode == 1 and len(proc.stderr.splitlines()) == 1
    assert f"--config {config}" in proc.stderr


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", ["cluster_config.yaml", ".llmb_install_state.json",
                                  "llmb-run"])
def test_installer_own_files_planted_over(tmp_path, kind, name):
    """A special file at the name of a file the installer writes: it is not the file the plan
    wants, so the step is redone (the name is replaced) or fails in one line; never a wait."""
    token = tmp_path / "token"
    token.write_text("hf_" + "a" * 34 + "\n")
    token.chmod(0o600)
    config = installer_config(tmp_path, hf_token_file=str(token))
    root = tmp_path / "install"
    root.mkdir()
    plant(root / name, kind)
    proc = installer(tmp_path, config)
    one_line_or_clean(proc, "llmb-install:")
    if proc.returncode != 0:
        assert f"{root / name}" in proc.stderr.splitlines()[-1]
    else:
        assert (root / name).is_file() and not (root / name).is_symlink()
