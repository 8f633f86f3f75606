"""The acceptance scenario on the real test Slurm cluster: a headless install into an empty
directory (image imported through srun by the enroot test double), then `llmb-run bulk` of a
2-scale smoke sweep (SMOKE_TEST: tiny real torch jobs), then `llmb-run status` until both rows
read COMPLETED / Success. Discovery through the real sinfo is in test_installer.py."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from paths import REPO

NUMA_DOUBLE = REPO / "tests" / "e2e" / "bin"  # this one-socket host has no NUMA node 1

pytestmark = pytest.mark.e2e


def client_env(slurm_cluster: dict[str, str], tmp_path: Path) -> dict[str, str]:
    only_enroot = tmp_path / "enroot-bin"
    only_enroot.mkdir(exist_ok=True)
    link = only_enroot / "enroot"
    if not link.exists():
        link.symlink_to(REPO / "tests" / "shims" / "enroot")
    env = {k: v for k, v in os.environ.items()
           if k not in ("LLMB_INSTALL", "VIRTUAL_ENV", "STAGE_PATH", "HF_TOKEN")}
    env.update(slurm_cluster)
    path = [str(only_enroot), str(Path(sys.executable).parent), env.get("PATH", "/usr/bin:/bin")]
    if (NUMA_DOUBLE / "numactl").exists():
        path.insert(0, str(NUMA_DOUBLE))
    env.update(PATH=os.pathsep.join(path), LLMB_PYTHON=sys.executable, ENROOT_SHIM_DELAY="0.2",
               LLMB_IMAGE_SPACE_GB="0")
    return env


def test_headless_install_then_bulk_sweep_succeeds(slurm_cluster, tmp_path):
    env = client_env(slurm_cluster, tmp_path)
    install = tmp_path / "install"
    token = tmp_path / "hf_token"
    token.write_text("hf_e2e_not_a_real_token\n")
    token.chmod(0o600)
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({
        "install_path": str(install), "gpu_type": "h100", "workloads": ["pretrain_llama3.1"],
        "slurm": {"account": "bench", "partition": "batch"},
        "venv": {"reuse": sys.prefix},  # the dev venv: nemo-run, pyyaml, torch
        "image": {"method": "srun"}, "hf_token_file": str(token)}))
    proc = subprocess.run(["bash", str(REPO / "installer" / "install.sh"), "--config",
                           str(config)], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (install / "images" / "nvidia+nemo+25.04.01.sqsh").read_bytes()[:4] == b"hsqs"
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(yaml.safe_dump({
        "defaults": {"env": {"SMOKE_TEST": True}},
        "tasks": [{"workload": "pretrain_llama3.1", "size": "8b", "dtype": "fp8",
                   "scales": [8, 16]}]}))
    llmb_run = str(install / "llmb-run")
    proc = subprocess.run([llmb_run, "bulk", str(sweep)], cwd=install, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("llmb: submitted") == 2
    deadline = time.time() + 540
    while True:
        status = subprocess.run([llmb_run, "status", "--format=json"], cwd=install, env=env,
                                capture_output=True, text=True, timeout=120)
        assert status.returncode == 0, status.stderr
        jobs = yaml.safe_load(status.stdout)["jobs"]
        assert len(jobs) == 2
        if all(j["state"] not in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING")
               for j in jobs) or time.time() > deadline:
            break
        time.sleep(2)
    table = subprocess.run([llmb_run, "status"], cwd=install, env=env, capture_output=True,
                           text=True, timeout=120).stdout
    print(table)
    assert [(j["scale"], j["state"], j["result"]) for j in jobs] == [
        (8, "COMPLETED", "Success"), (16, "COMPLETED", "Success")], table
