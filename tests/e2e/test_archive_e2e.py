"""End to end on the real test Slurm cluster: `llmb-run single --smoke` runs a job through
launch.sh, nemo-run and sbatch; `llmb-run status --wait` waits for it (plain progress lines,
no terminal here); `llmb-run archive` packs the install with what Slurm really says about the
cluster; `llmb-run verify-archive` passes it, and fails a copy with a changed log. Doubled only
what cannot exist here, as in test_slurm_e2e.py: the container image (a placeholder file),
NUMA binding and nvidia-smi (tests/e2e/bin).
"""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import fakeinstall
import pytest
import runinstall
import yaml
from paths import E2E_BIN, REPO

pytestmark = pytest.mark.e2e

LLMB_RUN = REPO / "installer" / "llmb-run"
JOB_TIMEOUT = 420


@pytest.fixture(scope="module")
def ran(tmp_path_factory, slurm_cluster) -> tuple[Path, dict[str, str], str]:
    """(install, llmb-run's environment, job id) after one smoke job ran on the cluster."""
    root = fakeinstall.make_install(tmp_path_factory.mktemp("archive-e2e") / "llmb",
                                    workloads=("pretrain_llama3.1",))
    conf = yaml.safe_load((root / "cluster_config.yaml").read_text())
    conf["launcher"]["slurm"].update(account="testacct")
    (root / "cluster_config.yaml").write_text(yaml.safe_dump(conf))
    venv_bin = Path(sys.executable).parent
    env = runinstall.llmb_run_env(**slurm_cluster)
    env.update(PATH=f"{E2E_BIN}:{venv_bin}:{env.get('PATH', '/usr/bin:/bin')}",
               TIME_LIMIT="00:15:00")
    submit = llmb_run(["single", "-w", "pretrain_llama3.1", "-s", "8b", "--dtype", "fp8",
                       "--scale", "8", "--smoke"], root, env)
    assert submit.returncode == 0, submit.stdout + submit.stderr
    job = re.search(r"as job (\d+)", submit.stdout).group(1)
    wait = llmb_run(["status", "--wait", "--timeout", str(JOB_TIMEOUT), job], root, env,
                    timeout=JOB_TIMEOUT + 60)
    assert wait.returncode == 0, wait.stdout + wait.stderr
    lines = wait.stderr.splitlines()
    assert lines[0] == f"llmb-run: waiting for job {job}: starting"  # plain: no terminal
    assert re.fullmatch(rf"llmb-run: waiting for job {job}: COMPLETED after \S+", lines[-1])
    assert "\r" not in wait.stderr
    return root, env, job


def llmb_run(args: list[str], cwd: Path, env: dict[str, str], timeout: float = 300
             ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(LLMB_RUN), *args], cwd=cwd, env=env, text=True,
                          capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL)


def test_archive_of_runs_that_ran_here_verifies_and_a_tampered_copy_fails(ran, tmp_path):
    root, env, job = ran
    (log,) = root.glob(f"workloads/*/experiments/*/*/*/log-*_{job}_0.out")
    with log.open("a") as fh:  # a user's code that printed the token it was given
        fh.write(f"debug: HF_TOKEN={fakeinstall.HF_TOKEN}\n")
    out = tmp_path / "results.tar.gz"
    made = llmb_run(["archive", "--output", str(out)], root, env)
    assert made.returncode == 0, made.stderr
    assert f"archive: {out} (1 run(s), 1 log(s)" in made.stdout

    with tarfile.open(out) as tar:
        names = tar.getnames()
        members = {n: tar.extractfile(n).read() for n in names if tar.getmember(n).isfile()}
    assert not any(fakeinstall.HF_TOKEN.encode() in data for data in members.values())
    script = [n for n in names if n.endswith("_sbatch.sh")]
    assert len(script) == 1 and b"#SBATCH --account=testacct" in members[script[0]]
    assert not [n for n in names if re.search(r"_CONFIG|\.sqsh|/code/|nsys", n)]
    facts = json.loads(members["llmb-archive/system.json"])
    assert facts["cluster"]["version"].startswith("slurm")
    assert [n["NodeName"] for n in facts["cluster"]["nodes"]] == ["node1", "node2"]
    assert any(p.startswith("batch") for p in facts["cluster"]["partitions"])
    assert facts["cluster"]["config"]["ClusterName"]
    assert facts["gpus_on_this_node"] is None  # the login node has no GPU (nor CUDA devices)
    analysis = json.loads(members["llmb-archive/analysis.json"])
    (result,) = analysis["results"]
    assert result["status"] == "Success" and result["smoke_test"] is True
    assert "llmb-archive/report/index.html" in names

    check = llmb_run(["verify-archive", str(out)], tmp_path, env)
    assert check.returncode == 0, check.stdout + check.stderr
    assert check.stdout.startswith(f"{out}: complete and consistent: 1 run(s), ")

    tampered = tmp_path / "tampered.tar.gz"
    with tarfile.open(out) as src, tarfile.open(tampered, "w:gz") as dst:
        for m in src.getmembers():
            data = src.extractfile(m).read() if m.isfile() else None
            if m.name.endswith(f"_{job}_0.out") and "/log-" in m.name:
                # each step time's first digit another: the same size (so the index's size
                # check lets it through), other bytes (its sha256), other figures (analysis)
                data = re.sub(rb"(train_step_timing in s: )([0-9])",
                              lambda t: t.group(1) + (b"1" if t.group(2) == b"9" else b"9"), data)
            dst.addfile(m, io.BytesIO(data) if data is not None else None)
    bad = llmb_run(["verify-archive", str(tampered)], tmp_path, env)
    assert bad.returncode == 1
    assert re.search(rf"log-\S+_{job}_0\.out was changed after the archive was made",
                     bad.stdout)
    assert re.search(rf"_{job}_0\.out: analysis.json says \w+=", bad.stdout)
