"""`llmb-run preflight`: flag validation (nothing written, nothing submitted), the login-node
checks that need no Slurm (image, HF token), the preflight job's options and script, and the
judging of what common/preflight_probe.sh reports from the nodes. The whole command against the
real test cluster (a real job, the nvidia-smi test double): tests/e2e/test_operations_e2e.py."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml
from llmb.launch import placement
from llmb.llmbrun import clusterconfig, preflight, slurmjob
from llmb.llmbrun.preflight import Check
from paths import SHIMS
from runinstall import make_install, run


@pytest.fixture
def install(tmp_path: Path) -> Path:
    return make_install(tmp_path / "install")


def config(install: Path) -> clusterconfig.ClusterConfig:
    return clusterconfig.find_config(str(install / "cluster_config.yaml"), {})


@pytest.mark.parametrize(("args", "code", "message"), [
    (["--nodes", "0"], 2, "argument --nodes: 0 is not a node count: a whole number from 1 to "
                          "100000"),
    (["--nodes", "two"], 2, "argument --nodes: two is not a node count"),
    (["--nodes", "02"], 2, "argument --nodes: 02 is not a node count; write it as 2"),
    (["--nodes", "100001"], 2, "argument --nodes: 100001 is not a node count"),
    (["--nodes", "-1"], 2, "argument --nodes: -1 is not a node count"),
    (["--format=yaml"], 2, "argument --format: invalid choice: 'yaml' (choose from 'table', "
                           "'json')"),
    (["--timeout", "0"], 2, "argument --timeout: 0 is not seconds"),
    (["--timeout", "9999999"], 2, "argument --timeout: 9999999 is not seconds: a whole number "
                                  "from 1 to 604800"),
    (["--exclude", "node1 node2"], 2, "--exclude=node1 node2 is not a Slurm node list"),
    (["--nodelist", "node[1-3"], 2, "--nodelist=node[1-3 is not a Slurm node list (unbalanced "
                                    "brackets)"),
    (["--qos", "high$(id)"], 2, "--qos=high$(id) is not a QOS name"),
    (["--reservation", "r\nx"], 2, "--reservation=r\\nx contains control character(s) \\n"),
    (["--segment", "0"], 2, "--segment=0 is not a positive whole number of nodes"),
    (["--slurm-arg=--wrap=id"], 2, "--slurm-arg=--wrap=id: llmb sets --wrap itself"),
    (["--slurm-arg=--constraint"], 2, "--constraint needs a value"),
    # a placement that cannot hold the node count is a bad option, as in screen: exit 2
    (["--nodelist", "node[1-2]"], 2, "--nodelist=node[1-2] names 2 nodes but the job runs on 1"),
    (["--nodes", "3", "--segment", "2"], 2, "--segment=2 does not divide the job's 3 node(s)"),
    (["--nodes", "2", "--nodelist", "n1", "--exclude", "n1"], 2, "a node cannot be required "
                                                                   "and excluded"),
])
def test_bad_flags_are_one_line_nothing_written_nothing_submitted(install, tmp_path, args,
                                                                   code, message):
    log = tmp_path / "sbatch.log"
    proc = run(["preflight", *args], install, path=f"{SHIMS}:/usr/bin:/bin",
               SHIM_LOG=str(log))
    assert proc.returncode == code
    assert len(proc.stderr.splitlines()) == 1, proc.stderr
    assert proc.stderr.startswith("llmb-run: ") and message in proc.stderr, proc.stderr
    assert proc.stdout == ""
    assert not (install / "preflight").exists()
    assert not log.exists()


def test_placement_from_the_environment_and_other_cluster_types_are_refused(install, tmp_path):
    proc = run(["preflight"], install, path=f"{SHIMS}:/usr/bin:/bin", LLMB_EXCLUDE="node1")
    assert (proc.returncode, proc.stderr) == (1, "llmb-run: LLMB_EXCLUDE=node1 is set in the "
                                                 "environment; llmb-run takes placement from "
                                                 "its flags so that the history records it: "
                                                 "unset it and use --exclude\n")
    conf = yaml.safe_load((install / "cluster_config.yaml").read_text())
    conf["launcher"]["cluster_type"] = "runai"
    (install / "cluster_config.yaml").write_text(yaml.safe_dump(conf))
    proc = run(["preflight"], install, path=f"{SHIMS}:/usr/bin:/bin")
    assert (proc.returncode, proc.stderr) == (
        1, "llmb-run: preflight runs on Slurm clusters only; this install's cluster_type is "
           f"runai ({install / 'cluster_config.yaml'})\n")
    assert not (install / "preflight").exists()


def test_the_table_the_json_and_the_exit_status(install, monkeypatch, capsys):
    checks = [Check("partition", "pass", "batch: up"), Check("network", "warn", "sockets"),
              Check("gpus", "fail", "node1 sees 4 GPU(s)")]
    monkeypatch.setattr(preflight, "run_checks", lambda *a: [Check(**c.__dict__)
                                                             for c in checks])
    cfg = config(install)
    assert preflight.cmd_preflight(cfg, 1, "table", placement.Placement()) == 1
    out, err = capsys.readouterr()
    assert out == ("partition  pass  batch: up\n"
                   "network    warn  sockets\n"
                   "gpus       fail  node1 sees 4 GPU(s)\n")
    assert err == "llmb-run: preflight: 1 check(s) failed: gpus\n"
    checks.pop()
    assert preflight.cmd_preflight(cfg, 1, "json", placement.Placement()) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["checks"] == [{"name": "partition", "status": "pass", "detail": "batch: up"},
                             {"name": "network", "status": "warn", "detail": "sockets"}]
    latest = json.loads((install / "preflight" / "latest.json").read_text())
    assert latest["checks"] == out["checks"]
    assert (install / "preflight" / "latest.json").stat().st_mode & 0o777 == 0o600


# --- login-node checks without Slurm ----------------------------------------------------------

def test_image_check(install, tmp_path):
    cfg = config(install)
    assert preflight.check_image(cfg).status == "skip"
    image = tmp_path / "nvidia+nemo+25.04.01.sqsh"
    conf = yaml.safe_load((install / "cluster_config.yaml").read_text())
    conf["workloads"]["pretrain_llama3.1"]["image"] = str(image)
    (install / "cluster_config.yaml").write_text(yaml.safe_dump(conf))
    cfg = config(install)
    check = preflight.check_image(cfg)
    assert (check.status, check.detail) == ("fail", f"{image}: No such file or directory; "
                                            "import it (rerun the installer, or "
                                            "<recipe>/setup.sh)")
    image.write_bytes(b"<html>")  # a proxy's error page saved as the image
    assert "is not a squashfs image" in preflight.check_image(cfg).detail
    image.write_bytes(b"hsqs" + bytes(100))
    assert preflight.check_image(cfg) == Check("image", "pass",
                                               f"{image.name} (0.0 GB, squashfs)")


def test_hf_token_check(install, monkeypatch):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    cfg = config(install)
    token = install / ".hf_token"
    assert preflight.check_hf_token(cfg).status == "pass"  # llama3.1 needs one; 0600
    token.chmod(0o644)
    check = preflight.check_hf_token(cfg)
    assert check.status == "warn" and f"chmod 600 {token}" in check.detail
    token.write_text("\n")
    assert preflight.check_hf_token(cfg).status == "fail"
    assert "hf_from_file" not in preflight.check_hf_token(cfg).detail


# --- the job ----------------------------------------------------------------------------------

def test_job_options_carry_the_benchmark_request_and_the_placement(install, tmp_path):
    cfg = config(install)
    place = placement.build(exclude="node[3-4]", qos="high", segment=2,
                            slurm_args=["--constraint=h100", "--reboot"])
    args = slurmjob.sbatch_options(cfg, preflight.job_spec(2, tmp_path), place)
    assert args == ["--account=acct", "--partition=batch", "--nodes=2", "--ntasks-per-node=1",
                    "--gres=gpu:8", "--time=00:10:00", "--job-name=llmb-preflight",
                    f"--output={tmp_path}/preflight-%j.out", "--exclude=node[3-4]", "--qos=high",
                    "--constraint=h100", "--reboot", "--segment=2"]
    script = preflight.job_script("/x/my image.sqsh", args)
    assert "--container-image='/x/my image.sqsh'" in script
    assert f"bash {preflight.PROBE}" in script
    probe = subprocess.run(["bash", "-n", "-c", script], capture_output=True)
    assert probe.returncode == 0


PROBE_OUT = """\
LLMB_PREFLIGHT nodes node[1-2]
LLMB_PREFLIGHT pmix ok
LLMB_PROBE node1 gpus 8
LLMB_PROBE node1 gpu_name NVIDIA H100 80GB HBM3
LLMB_PROBE node1 driver 535.54.03
LLMB_PROBE node1 cuda_version 12.9.0
LLMB_PROBE node1 cuda_driver_version 575.51.03
LLMB_PROBE node1 require_cuda cuda>=12.9 brand=tesla,driver>=535,driver<536 {more}
LLMB_PROBE node1 rdma mlx5_0,mlx5_1
LLMB_PROBE node1 nccl_env NCCL_NET= NCCL_IB_DISABLE= NCCL_NET_PLUGIN=
LLMB_PROBE node1 imex_channels 0
LLMB_PROBE node2 gpus 7
LLMB_PROBE node2 driver 530.30.02
LLMB_PROBE node2 rdma
LLMB_PROBE node2 nccl_net_plugin
LLMB_PROBE node2 nccl_env NCCL_NET=Socket NCCL_IB_DISABLE= NCCL_NET_PLUGIN=
LLMB_PREFLIGHT probe ok
""".format(more="brand=tesla,driver>=550,driver<551")


def test_what_the_nodes_report_is_judged_per_node():
    nodes, marks = preflight.parse_output(PROBE_OUT)
    assert marks == {"nodes": "node[1-2]", "pmix": "ok", "probe": "ok"}
    assert nodes["node1"]["require_cuda"].startswith("cuda>=12.9 brand=tesla")
    gpus = preflight.judge_gpus(nodes, 8, "h100")
    assert gpus == Check("gpus", "fail", "node2 sees 7 GPU(s) (GPUS_PER_NODE for h100 is 8)")
    driver = preflight.judge_driver(nodes)
    # node1's 535 is a forward-compatible branch the image lists; node2's 530 is not
    assert driver.status == "fail"
    assert driver.detail.startswith("node2 has 530.30.02: older than 575.51.03, which the "
                                    "image's CUDA 12.9.0 needs")
    network = preflight.judge_network(nodes)
    assert network.status == "warn" and "node2: NCCL_NET=Socket" in network.detail
    assert preflight.judge_imex(nodes, "gb200") == Check(
        "imex", "fail", "no IMEX channel (/dev/nvidia-caps-imex-channels) on node1, node2: "
        "multi-node NVLink needs one")
    assert preflight.judge_imex(nodes, "h100").status == "skip"


def test_healthy_nodes_pass():
    healthy = PROBE_OUT.replace("gpus 7", "gpus 8").replace("530.30.02", "575.51.03") \
        .replace("NCCL_NET=Socket", "NCCL_NET=").replace("node2 rdma", "node2 rdma mlx5_0") \
        .replace("imex_channels 0", "imex_channels 1")
    nodes, _ = preflight.parse_output(healthy)
    assert preflight.judge_gpus(nodes, 8, "h100").status == "pass"
    assert preflight.judge_driver(nodes) == Check(
        "driver", "pass", "driver 535.54.03, 575.51.03 runs the image's CUDA 12.9.0")
    assert preflight.judge_network(nodes) == Check(
        "network", "pass", "NCCL can use RDMA mlx5_0; RDMA mlx5_0,mlx5_1")
    nodes, _ = preflight.parse_output("LLMB_PROBE n1 gpus_error nvidia-smi not found in the "
                                      "container\n")
    assert preflight.judge_gpus(nodes, 4, "gb200").detail == (
        "n1: nvidia-smi not found in the container (GPUS_PER_NODE for gb200 is 4)")
    assert preflight.judge_gpus({}, 8, "h100").status == "fail"


def test_the_probe_reports_without_gpus_or_rdma(tmp_path):
    """common/preflight_probe.sh on this host: no nvidia-smi on PATH, no RDMA device."""
    proc = subprocess.run(["bash", str(preflight.PROBE)], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "SLURMD_NODENAME": "nodeX"}, timeout=30)
    assert proc.returncode == 0, proc.stderr
    nodes, _ = preflight.parse_output(proc.stdout)
    assert nodes["nodeX"]["gpus_error"] == "nvidia-smi not found in the container"
    assert set(nodes["nodeX"]) >= {"rdma", "uverbs", "nccl_net_plugin", "nccl_env",
                                   "imex_channels", "cuda_version"}
