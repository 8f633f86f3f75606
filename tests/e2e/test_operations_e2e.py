"""llmb-run's cluster operations end to end on the real test Slurm cluster (tests/slurm):
preflight (JSON, named checks, exit status; GPU checks through tests/e2e/bin/nvidia-smi, the
test double that reports the GPUs Slurm allocated), a job placed with --exclude running on the
other node, rerun of a failed run (--failed --exclude-suspect: away from the node the analyzer
names), and status after Slurm has forgotten a job (no accounting here: squeue,
scontrol and sacct all miss it).

The install is written by hand (cluster_config.yaml as the installer writes it; the dev venv
as the workload venv; a squashfs-headed placeholder where setup.sh would import the image).
Jobs are the smoke workload (SMOKE_TEST: a tiny real torch run) on one node of 8 tasks.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import runinstall
import yaml
from paths import E2E_BIN
from runinstall import llmb_run

pytestmark = pytest.mark.e2e

JOB_TIMEOUT_S = 420
SMOKE = ["-w", "pretrain_llama3.1", "-s", "8b", "--dtype", "fp8", "--scale", "8", "--smoke",
         "--env", "MAX_STEPS=12"]


def write_config(root: Path, name: str = "cluster_config.yaml", gres: str | None = None) -> Path:
    conf = runinstall.cluster_config(
        root, image=str(root / "images" / "nvidia+nemo+25.04.01.sqsh"),
        env={"TIME_LIMIT": "00:10:00"}, gres=gres, workloads=("pretrain_llama3.1",),
        account="testacct")
    path = root / name
    path.write_text(yaml.safe_dump(conf))
    return path


@pytest.fixture(scope="module")
def site(tmp_path_factory, slurm_cluster) -> tuple[Path, dict[str, str]]:
    root = tmp_path_factory.mktemp("llmb-ops")
    (root / "images").mkdir()
    (root / "images" / "nvidia+nemo+25.04.01.sqsh").write_bytes(b"hsqs" + bytes(4092))
    token = root / ".hf_token"
    token.write_text("hf_e2e_not_a_real_token\n")
    token.chmod(0o600)
    token.chmod(0o600)
    write_config(root)
    env = runinstall.llmb_run_env(**slurm_cluster)
    env.update(PATH=f"{E2E_BIN}:{Path(sys.executable).parent}:{env.get('PATH', '/usr/bin:/bin')}")
    return root, env


def submitted(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (job,) = re.findall(r"^llmb: submitted \S+ as job (\d+)", proc.stdout, re.MULTILINE)
    return job


def status(site, *jobs: str) -> dict[str, dict]:
    proc = llmb_run(site, "status", "--all", "--format=json", *jobs)
    assert proc.returncode == 0, proc.stderr
    return {r["job_id"]: r for r in json.loads(proc.stdout)["jobs"]}


def squeue_state(site, job: str) -> str:
    out = subprocess.run(["squeue", "-h", "-t", "all", "-j", job, "-o", "%T"], env=site[1],
                         capture_output=True, text=True, timeout=30).stdout.strip()
    return out or "GONE"


def wait_quietly(site, job: str) -> None:
    """Wait with squeue alone (llmb-run's own waiting is tested above)."""
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while squeue_state(site, job) in ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING"):
        assert time.monotonic() < deadline, f"job {job} did not end in {JOB_TIMEOUT_S} s"
        time.sleep(2)


def test_preflight_json_names_every_check_and_passes_here(site):
    proc = llmb_run(site, "preflight", "--format=json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    checks = {c["name"]: c for c in json.loads(proc.stdout)["checks"]}
    assert set(checks) == {"slurm_commands", "account", "partition", "gres", "pmix", "pyxis",
                           "image", "segment", "disk", "hf_token", "job", "pmix_job",
                           "container", "gpus", "driver", "network", "imex"}
    assert all(set(c) == {"name", "status", "detail"} and c["detail"] for c in checks.values())
    expected = {"slurm_commands": "pass", "partition": "pass", "gres": "pass", "pmix": "pass",
                "pyxis": "pass", "image": "pass", "job": "pass", "pmix_job": "pass",
                "container": "pass", "gpus": "pass", "hf_token": "pass", "segment": "skip",
                "imex": "skip",
                # no accounting: sbatch accepting the account is the test
                "account": "pass",
                # the image (a placeholder) names no CUDA driver requirement
                "driver": "skip",
                # no RDMA device here: NCCL would use sockets
                "network": "warn"}
    assert {k: checks[k]["status"] for k in expected} == expected
    assert "sbatch accepted account testacct" in checks["account"]["detail"]
    assert checks["gpus"]["detail"].startswith("1 node(s), 8 GPUs each (NVIDIA H100")
    assert "pmix" in checks["pmix"]["detail"]
    assert checks["disk"]["status"] in ("pass", "warn")
    root = site[0]
    saved = json.loads((root / "preflight" / "latest.json").read_text())
    assert saved["checks"] == list(checks.values())


def test_preflight_fails_what_a_benchmark_would_trip_on(site):
    """4 GPUs requested per node (gres gpu:4) where h100 runs need 8: refused when the config
    is read, before any job (the one GRES rule holds for preflight as for every job); two
    nodes with one excluded: sbatch refuses the job. Exit 1, named checks."""
    root, _ = site
    config = write_config(root, "gres4.yaml", gres="gpu:4")
    proc = llmb_run(site, "--config", str(config), "preflight", "--format=json")
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.splitlines() == [
        f"llmb-run: {config}: launcher.slurm.gres=gpu:4 asks for 4 GPUs per node, but a h100 "
        "job runs 8 tasks per node, each on one GPU: use gpu:8, or null when the cluster needs "
        "none; fix the file or rerun the installer"]

    proc = llmb_run(site, "preflight", "--nodes", "2", "--exclude", "node1", "--format=json")
    assert proc.returncode == 1
    checks = {c["name"]: c for c in json.loads(proc.stdout)["checks"]}
    assert checks["job"]["status"] == "fail"
    assert checks["job"]["detail"].startswith("sbatch refused the preflight job: ")


def test_exclude_places_the_job_on_the_other_node_then_rerun_and_status_after_purge(site):
    root, _ = site
    # 1. placed: --exclude node1 runs on node2, the job script says so, history records it
    good = submitted(llmb_run(site, "single", *SMOKE, "--exclude", "node1"))
    # 2. a run that fails on its node (the smoke workload refuses its own setting in every task)
    bad = submitted(llmb_run(site, "single", *SMOKE, "--env",
                             "LLMB_SMOKE_INIT_TIMEOUT_S=never"))
    waited = llmb_run(site, "status", "--wait", "--timeout", str(JOB_TIMEOUT_S), good, bad,
                      timeout=JOB_TIMEOUT_S + 60)
    assert waited.returncode == 0, waited.stderr
    rows = status(site, good, bad)
    assert (rows[good]["state"], rows[good]["nodes"], rows[good]["result"]) == (
        "COMPLETED", "node2", "Success")
    assert rows[good]["placement"] == {"exclude": "node1"}
    run_dir = Path(rows[good]["experiment_dir"])
    (script,) = [p.read_text() for p in run_dir.glob("*_sbatch.sh")]  # nemo-run's job script
    assert "#SBATCH --exclude=node1" in script
    manifest = json.loads((run_dir / "llmb_manifest.json").read_text())
    assert manifest["placement"] == {"exclude": "node1"}
    log = llmb_run(site, "jobs", "log", good)
    assert log.returncode == 0 and "iteration 11/11" in log.stdout, log.stderr
    assert (rows[bad]["state"], rows[bad]["result"]) == ("FAILED", "Failed")
    failed_on = rows[bad]["nodes"]

    # 3. rerun --failed --exclude-suspect: the same configuration, recorded as a rerun, away
    # from the node the analyzer names (srun's "node: tasks ...: Exited" lines are in the
    # job's batch output).
    other = "node1" if failed_on == "node2" else "node2"
    proc = llmb_run(site, "rerun", "--failed", "--exclude-suspect")
    again = submitted(proc)
    assert f"rerun of job {bad} (FAILED/Failed)" in proc.stderr
    assert f"excluding suspect node(s) {failed_on}" in proc.stderr
    wait_quietly(site, again)
    history = [json.loads(line) for line in (root / "llmb_run_history.jsonl").read_text()
               .splitlines()]
    (rec,) = [r for r in history if r.get("job_id") == again and r["type"] == "submit"]
    assert rec["rerun_of"] == bad
    assert rec["env"]["LLMB_SMOKE_INIT_TIMEOUT_S"] == "never"
    assert (rec["env"]["SMOKE_TEST"], rec["env"]["MAX_STEPS"], rec["smoke"]) == (
        "true", "12", True)
    assert rec["placement"] == {"exclude": failed_on}

    # 4. Slurm forgets a job. The test cluster keeps finished jobs for MinJobAge (an hour)
    # and a restart mid-session is not safe on the shared cluster, so the rerun's record is
    # copied under a job id this controller never had: the real squeue and scontrol answer
    # "Invalid job id", the real sacct "accounting storage is disabled". Recorded final
    # states survive; the forgotten job is PURGED and its logs still tell how it ended.
    forgotten = str(10**8 + int(again))
    with (root / "llmb_run_history.jsonl").open("a") as fh:
        fh.write(json.dumps({**rec, "job_id": forgotten}) + "\n")
    assert squeue_state(site, forgotten) == "GONE"
    rows = status(site)
    assert (rows[good]["state"], rows[good]["result"]) == ("COMPLETED", "Success")
    assert (rows[bad]["state"], rows[bad]["nodes"]) == ("FAILED", failed_on)
    assert rows[forgotten]["state"] == "PURGED"
    assert rows[forgotten]["state_detail"] == ("squeue and scontrol no longer know it; no "
                                               "accounting")
    assert rows[forgotten]["result"] == "Failed"
    assert rows[forgotten]["rerun_of"] == bad
    table = llmb_run(site, "status", "--all")
    assert re.search(rf"^{forgotten}\s+PURGED\s+Failed", table.stdout, re.MULTILINE), \
        table.stdout
    batch = llmb_run(site, "jobs", "log", again, "--batch").stdout
    assert f"srun: error: {other}: task" in batch  # the rerun ran on the other node

    # 5. --failed now picks the failed reruns, not the run they replaced
    dry = llmb_run(site, "rerun", "--failed", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    # (one run directory under two job ids: the analyzer reports it once, for the copy)
    assert f"rerun of job {again} (FAILED" in dry.stderr
    assert f"rerun of job {forgotten} (PURGED/Failed)" in dry.stderr
    assert f"rerun of job {bad} (" not in dry.stderr
