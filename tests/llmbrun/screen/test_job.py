"""llmb-run screen before it submits: every flag refuses a bad value in one line (nothing is
written or submitted), the job it writes (the benchmark's srun path, image, environment, one
task per GPU; shellcheck-clean), the sbatch options; and --exclude-suspect on single and bulk
through the placement path (#SBATCH --exclude in the dry run). The screen itself runs on the
real test Slurm cluster in tests/e2e/test_screen_e2e.py."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import runinstall
import yaml
from llmb.launch import placement
from llmb.llmbrun import clusterconfig
from llmb.llmbrun.screen import job as screen
from paths import REPO


@pytest.fixture
def install(tmp_path: Path) -> Path:
    root = runinstall.make_install(tmp_path / "llmb", gpu_type="gb200", gres=None,
                                   workloads=("pretrain_nemotron4",))
    return root


def llmb_run(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # no Slurm on PATH: a refusal must come before anything would be submitted
    return runinstall.run(list(args), root, path=f"{Path(shutil.which('bash')).parent}")


REFUSED = [
    (["--nodes", "0"], "argument --nodes: 0 is not a node count: a whole number from 1 to "
                       "16384"),
    (["--nodes", "four"], "argument --nodes: four is not a node count"),
    (["--nodes", "04"], "argument --nodes: 04 is not a node count; write it as 4"),
    (["--nodes", "2", "--rounds", "0"], "argument --rounds: 0 is not a number of rounds"),
    (["--nodes", "2", "--rounds", "65"], "argument --rounds: 65 is not a number of rounds: a "
                                         "whole number from 1 to 64"),
    (["--nodes", "4", "--rounds", "4"], "--rounds 4: 4 node(s) give at most 3 round(s) of "
                                        "pairs with a new partner each"),
    (["--nodes", "1", "--rounds", "1"], "pairs need 2 nodes or more"),
    (["--nodes", "2", "--format=xml"], "argument --format: invalid choice: 'xml'"),
    (["--nodes", "2", "--timeout", "-5"], "argument --timeout: -5 is not seconds"),
    (["--nodes", "2", "--timeout", "604801"], "argument --timeout: 604801 is not seconds"),
    ([], "screen needs --nodes N or --nodelist NODES"),
    (["--nodes", "2", "--nodelist", "node[1-3]"], "--nodelist=node[1-3] names 3 nodes but the "
                                                  "job runs on 2"),
    (["--nodelist", "node[3-1]"], "--nodelist=node[3-1] is not a Slurm node list (range 3-1 "
                                  "runs backwards)"),
    (["--nodes", "2", "--exclude", "node'1"], "--exclude=node'1 contains '"),
    (["--nodes", "4", "--segment", "3"], "--segment=3 does not divide the job's 4 node(s)"),
    (["--nodes", "2", "--qos", "a b"], "--qos=a b is not a QOS name"),
    (["--nodes", "2", "--slurm-arg=--time=9"], "--slurm-arg=--time=9: llmb sets --time itself"),
    (["--nodes", "2", "--nodelist", "node1", "--exclude", "node1"],
     "both name node1; a node cannot be required and excluded"),
    (["--nodes", "2", "--smoke=yes"], "argument --smoke: ignored explicit argument 'yes'"),
    (["--nodes", "2", "--node", "3"], "unrecognized arguments: --node 3"),
    (["--nodes", "2", "--baseline", "/nonexistent/baseline.json"],
     "--baseline /nonexistent/baseline.json: cannot be read"),
]


@pytest.mark.parametrize(("args", "message"), REFUSED)
def test_every_flag_refuses_a_bad_value_in_one_line(install, args, message):
    proc = llmb_run(install, "screen", *args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stdout == ""
    (line,) = proc.stderr.splitlines()
    assert line.startswith("llmb-run: ") and message in line, line
    assert not (install / "screens").exists()  # nothing written, nothing submitted


def test_a_runai_install_is_refused(tmp_path):
    root = tmp_path / "llmb"
    runinstall.make_install(root)
    conf = yaml.safe_load((root / "cluster_config.yaml").read_text())
    conf["launcher"]["cluster_type"] = "runai"
    (root / "cluster_config.yaml").write_text(yaml.safe_dump(conf))
    proc = llmb_run(root, "screen", "--nodes", "2")
    assert proc.returncode == 1
    assert proc.stderr.strip() == ("llmb-run: screen runs on Slurm clusters only; this "
                                   "install's cluster_type is runai "
                                   f"({root / 'cluster_config.yaml'})")


def test_a_missing_image_is_refused_before_submission(install):
    conf = yaml.safe_load((install / "cluster_config.yaml").read_text())
    conf["workloads"]["pretrain_nemotron4"]["image"] = str(install / "images" / "gone.sqsh")
    (install / "cluster_config.yaml").write_text(yaml.safe_dump(conf))
    proc = llmb_run(install, "screen", "--nodes", "2")
    assert proc.returncode == 1
    assert "gone.sqsh does not exist; import it" in proc.stderr
    assert not (install / "screens").exists()


# --- the job ----------------------------------------------------------------------------------

def config(root: Path, gpu_type: str = "h100", gres: str | None = "gpu:8"
           ) -> clusterconfig.ClusterConfig:
    data = runinstall.cluster_config(root, gpu_type=gpu_type, gres=gres,
                                     image=str(root / "images" / "nemo.sqsh"))
    return clusterconfig.from_data(root / "cluster_config.yaml", data)


def test_sbatch_options_are_the_benchmarks(tmp_path):
    cfg = config(tmp_path)
    place = placement.build(exclude="node7", qos="high", slurm_args=["--constraint=h100"])
    args = screen.sbatch_options(cfg, 4, place, tmp_path)
    assert args == ["--account=acct", "--partition=batch", "--nodes=4",
                    "--ntasks-per-node=8", "--gres=gpu:8", "--exclusive", "--mem=0",
                    "--time=00:30:00", "--job-name=llmb-screen",
                    f"--output={tmp_path}/screen-%j.out", "--exclude=node7", "--qos=high",
                    "--constraint=h100"]
    # GB200 above 18 nodes: the segment a benchmark of that size gets, unless one is given
    gb200 = config(tmp_path, "gb200", None)
    assert screen.sbatch_options(gb200, 36, placement.Placement(), tmp_path)[-2:] == [
        f"--output={tmp_path}/screen-%j.out", "--segment=18"]
    assert "--gpus-per-node=4" in screen.sbatch_options(gb200, 2, placement.Placement(),
                                                         tmp_path)
    assert screen.sbatch_options(gb200, 36, placement.build(segment=9), tmp_path)[-1] == \
        "--segment=9"


def test_job_script_runs_the_probe_in_the_benchmark_image_with_its_environment(tmp_path):
    cfg = config(tmp_path, "gb200", None)
    folder = tmp_path / "screens" / "20260101-000000"
    args = screen.sbatch_options(cfg, 2, placement.Placement(), folder)
    text = screen.job_script(cfg, folder, str(tmp_path / "images" / "nemo.sqsh"), args)
    lines = text.splitlines()
    assert lines[0] == "#!/bin/bash" and lines[2].startswith("# sbatch --account=acct ")
    assert "export NCCL_NET_GDR_LEVEL=PHB" in lines  # the GPU type's job environment
    assert "export NCCL_NVLS_ENABLE=0" in lines  # and every benchmark's
    probe, again = [ln.strip() for ln in lines if "llmb.container.screenrun" in ln]
    container = (f"--container-image={tmp_path}/images/nemo.sqsh --container-mounts={REPO}:"
                 f"{REPO},{folder}:{folder} --container-name=llmb-screen --container-env=")
    assert probe.startswith(f"srun --mpi=pmix --ntasks-per-node=4 {container}")
    assert "NCCL_NET_GDR_LEVEL" in probe.split("--container-env=")[1].split()[0]
    assert f"--plan {folder}/plan.json" in probe
    # the confirm pass: one task on the batch host judges the first pass ...
    (step,) = [ln for ln in lines if "confirm.main" in ln]
    assert step.startswith('srun --mpi=pmix --nodes=1 --ntasks=1 ${SLURMD_NODENAME:+'
                           f'--nodelist="$SLURMD_NODENAME"}} {container}')
    assert step.endswith(f" {folder}'")
    # ... and, where it wrote a plan, the nodes it names are measured again, in the image
    assert again.startswith(f"srun --mpi=pmix --ntasks-per-node=4 {container}")
    assert '--nodes="$count" --ntasks="$((count * 4))" --nodelist="$nodes"' in again
    assert f"--plan {folder}/confirm/plan.json" in again
    assert 'read -r count nodes <"$second/nodes.txt"' in text
    assert [ln.strip() for ln in lines if ln.strip().startswith("allreduces ")] == [
        f"allreduces {folder}", 'allreduces "$second"']
    (perf,) = [ln for ln in lines if "all_reduce_perf" in ln]
    assert "all_reduce_perf -b 1048576 -e 1073741824 -f 2 -g 1 -n 20 -w 5 </dev/null" in perf
    assert '--nodes="$count" --ntasks="$((count * 4))" --nodelist="$nodes"' in perf
    assert 'logs="$1/nccl-logs"' in text
    script = tmp_path / "screen.sbatch"
    script.write_text(text)
    check = subprocess.run([str(Path(REPO / ".venv" / "bin" / "shellcheck")), str(script)],
                           capture_output=True, text=True)
    assert check.returncode == 0, check.stdout


def test_job_script_without_an_image_runs_on_the_host(tmp_path):
    cfg = config(tmp_path)
    text = screen.job_script(cfg, tmp_path, None, [])
    assert "--container" not in text
    assert "srun --mpi=pmix --ntasks-per-node=8 bash -c" in text


def test_plan_holds_both_paths_and_smoke_forces_the_cpu():
    plan = screen.plan(True, None, 4, "gb200")
    assert plan["force_cpu"] is True and plan["rounds"] is None
    assert plan["gpu"]["sizes"][-1] == 1 << 30  # up to 1 GiB, as the issue of busbw needs
    assert plan["cpu"]["sizes"][-1] <= 1 << 20
    assert json.loads(json.dumps(plan)) == plan


def test_the_plan_carries_the_leaves_the_tasks_pair_by():
    leaves = {"node1": "s0", "node2": "s1"}
    plan = screen.plan(False, None, 8, "h100", leaves)
    assert plan["leaves"] == leaves and screen.plan(False, None, 8, "h100")["leaves"] is None
    assert json.loads(json.dumps(plan)) == plan


def test_topology_is_asked_once_and_kept_to_the_nodelist(tmp_path, monkeypatch):
    # an scontrol written for the test (no Slurm here), answering as the topology/tree plugin
    folder = tmp_path / "bin"
    folder.mkdir()
    (folder / "scontrol").write_text(
        "#!/bin/sh\necho x >>\"$0.asked\"\nprintf '%s\\n' "
        "'SwitchName=s0 Level=0 LinkSpeed=1 Nodes=node[1-2]' "
        "'SwitchName=s1 Level=0 LinkSpeed=1 Nodes=node[3-4]'\n")
    (folder / "scontrol").chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}:/usr/bin:/bin")
    monkeypatch.delenv("SLURM_TOPO_LEN", raising=False)
    every = screen.topology(placement.Placement())
    assert every.leaves == {"node1": "s0", "node2": "s0", "node3": "s1", "node4": "s1"}
    listed = screen.topology(placement.Placement(nodelist="node[2-3]"))
    assert listed.leaves == {"node2": "s0", "node3": "s1"}
    assert listed.said == "Slurm's topology: 2 node(s) under 2 leaf switches"
    assert (folder / "scontrol.asked").read_text() == "x\nx\n"  # once per screen
    (folder / "scontrol").write_text("#!/bin/sh\necho 'No topology information available'\n")
    none = screen.topology(placement.Placement())
    assert none.leaves is None and none.said.startswith("one tier: ")


# --- --exclude-suspect ------------------------------------------------------------------------

def screen_result(root: Path, stamp: str, suspects: list[str]) -> None:
    folder = root / "screens" / stamp
    folder.mkdir(parents=True)
    (folder / "screen.json").write_text(json.dumps({  # the least a screen.json of its type holds
        "mode": "cpu", "gpus_per_node": 1, "backend": None, "measured_by": None, "nodes": [],
        "pairs": [], "rounds": [], "named": [], "suspects": suspects}))


SINGLE = ["single", "-w", "pretrain_nemotron4", "-s", "340b", "--dtype", "fp8", "--scale",
          "128", "--dry-run"]


def test_exclude_suspect_adds_the_newest_screens_nodes_to_exclude(install):
    screen_result(install, "20260101-000000", ["node9"])
    screen_result(install, "20260102-000000", ["node3", "node5"])
    proc = llmb_run(install, *SINGLE, "--exclude", "node1", "--exclude-suspect")
    assert proc.returncode == 0, proc.stderr
    assert "#SBATCH --exclude='node[1,3,5]'" in proc.stdout  # Slurm's hostlist form
    assert '"exclude": "node[1,3,5]"' in proc.stdout  # the manifest records it
    assert (f"llmb-run: --exclude-suspect: leaving out node[3,5] (named by {install}/screens/"
            "20260102-000000/screen.json)") in proc.stderr


def test_exclude_suspect_on_bulk(install, tmp_path):
    screen_result(install, "20260102-000000", ["node3"])
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(yaml.safe_dump({"tasks": [{"workload": "pretrain_nemotron4",
                                                "size": "340b", "dtype": "bf16",
                                                "scales": [128, 256]}]}))
    proc = llmb_run(install, "bulk", str(sweep), "--dry-run", "--exclude-suspect")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("#SBATCH --exclude=node3") == 2


def test_exclude_suspect_without_a_screen_or_with_a_clash(install):
    proc = llmb_run(install, *SINGLE, "--exclude-suspect")
    assert proc.returncode == 1
    assert proc.stderr.strip() == (f"llmb-run: --exclude-suspect needs a screen: no results "
                                   f"under {install}/screens; run llmb-run screen first")
    screen_result(install, "20260102-000000", ["node3"])
    proc = llmb_run(install, *SINGLE, "--nodelist", "node[2-4]", "--exclude-suspect")
    assert proc.returncode == 1
    assert proc.stderr.strip() == ("llmb-run: --exclude-suspect: node node3 is to be left out "
                                   "but --nodelist=node[2-4] requires it; give --nodelist "
                                   "without it")
    (install / "screens" / "20260103-000000").mkdir()  # a screen still running: not counted
    screen_result(install, "20260101-000000", [])
    proc = llmb_run(install, *SINGLE, "--exclude-suspect")
    assert proc.returncode == 0 and "#SBATCH --exclude=node3" in proc.stdout


def test_a_screen_naming_nobody_changes_nothing(install):
    screen_result(install, "20260102-000000", [])
    proc = llmb_run(install, *SINGLE, "--exclude-suspect")
    assert proc.returncode == 0, proc.stderr
    assert "--exclude" not in proc.stdout.replace("--exclude-suspect", "")
    assert "names no suspect" in proc.stderr
