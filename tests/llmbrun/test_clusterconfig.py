"""llmb.llmbrun.clusterconfig: cluster_config.yaml found (--config, the current directory, then
$LLMB_INSTALL) and checked field by field as a person may have edited it: each bad field is one
line naming the file, the field and the value; what may be left out gets its default; an env
entry may not set what llmb-run sets itself. The content is the installer's
(tests/helpers/runinstall.py); llmb-run's commands over such files are in test_cli.py."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import runinstall
import yaml
from llmb.launch import overrides
from llmb.llmbrun import clusterconfig
from llmb.llmbrun.errors import RunError

PATH = Path("/lustre/llmb/cluster_config.yaml")
ROOT = PATH.parent


def config(change: Callable[[dict[str, Any]], object] = lambda d: None) -> dict[str, Any]:
    data = copy.deepcopy(runinstall.cluster_config(ROOT, gres="gpu:8"))
    change(data)
    return data


def launcher(**fields: Any) -> Callable[[dict[str, Any]], object]:
    return lambda d: d["launcher"].update(fields)


def slurm(**fields: Any) -> Callable[[dict[str, Any]], object]:
    return lambda d: d["launcher"]["slurm"].update(fields)


def workload(**fields: Any) -> Callable[[dict[str, Any]], object]:
    return lambda d: d["workloads"]["pretrain_llama3.1"].update(fields)


FIX = "; fix the file or rerun the installer"
BAD = [
    (lambda d: d.pop("llmb"), "llmb is missing; rerun the installer"),
    (lambda d: d.update(schema=2), "schema=2 is not supported; this llmb-run reads schema 1" + FIX),
    (lambda d: d.update(launcher=["slurm"]), "launcher=['slurm'] must be a mapping" + FIX),
    (lambda d: d.pop("workloads"), "workloads is missing; rerun the installer"),
    (lambda d: d["llmb"].update(install_path="llmb"),
     "llmb.install_path=llmb must be an absolute path" + FIX),
    (lambda d: d["llmb"].pop("repo"), "llmb.repo is missing; rerun the installer"),
    (launcher(cluster_type="k8s"), "launcher.cluster_type=k8s is not supported; allowed: slurm, "
                                   "runai" + FIX),
    (launcher(gpu_type="a100"), "launcher.gpu_type=a100 is not a GPU type; allowed: h100, b200, "
                                "gb200, h200, b300, gb300" + FIX),
    (launcher(gpu_type=True), "launcher.gpu_type is true (true or false), not text or a whole "
                              "number or a number" + FIX),
    (launcher(gpu_type="  "), "launcher.gpu_type=   must be a non-empty text value"),
    (launcher(slurm=None), "launcher.slurm is missing; rerun the installer"),
    (slurm(account=""), "launcher.slurm.account= must be a non-empty text value" + FIX),
    (slurm(partition="batch\n#SBATCH --exclusive"),
     "launcher.slurm.partition=batch\\n#SBATCH --exclusive contains control characters" + FIX),
    (slurm(gres="8"), "launcher.slurm.gres=8 is not a GPU GRES request; use gpu:N or gpu:TYPE:N "
                      "(e.g. gpu:8), or null when the cluster needs none" + FIX),
    (slurm(gres="gpu:h100:4"), "launcher.slurm.gres=gpu:h100:4 asks for 4 GPUs per node, but a "
                               "h100 job runs 8 tasks per node, each on one GPU: use gpu:h100:8, "
                               "or null when the cluster needs none" + FIX),
    (launcher(env=["NCCL_DEBUG=WARN"]), "launcher.env=['NCCL_DEBUG=WARN'] must be a mapping"),
    (launcher(env={"NCCL_DEBUG": ["WARN"]}),
     "launcher.env NCCL_DEBUG=['WARN'] must be a text or number value"),
    (launcher(env={"GPUS_PER_NODE": 4}), "launcher.env GPUS_PER_NODE=4: llmb-run sets "
                                         "GPUS_PER_NODE itself"),
    (lambda d: d["workloads"].update({"pretrain_llama3.1": "venv"}),
     "workloads.pretrain_llama3.1=venv must be a mapping with venv, venv_kind, image" + FIX),
    (workload(venv=None), "workloads.pretrain_llama3.1.venv is missing; rerun the installer"),
    (workload(venv_kind="pipenv"), "workloads.pretrain_llama3.1.venv_kind=pipenv is not "
                                   "supported; allowed: venv, conda" + FIX),
    (workload(image={"file": "x.sqsh"}), "workloads.pretrain_llama3.1.image is a mapping of 1 "
                                         "key(s), not text or a whole number or a number or null"),
]


@pytest.mark.parametrize(("change", "message"), BAD, ids=[m[:40] for _, m in BAD])
def test_a_bad_field_is_one_line_naming_file_field_and_value(
        change: Callable[[dict[str, Any]], object], message: str) -> None:
    with pytest.raises(RunError) as err:
        clusterconfig.check_config(config(change), PATH)
    assert str(err.value).startswith(f"{PATH}: ")
    assert message in str(err.value)
    assert "\n" not in str(err.value) and err.value.status == 1


@pytest.mark.parametrize("data", [None, "schema: 1", ["llmb"],
                                  "root:x:0:0:root:/root:/bin/bash daemon:x:1:1"])
def test_a_file_that_is_no_mapping_is_described_never_printed(data: object) -> None:
    """--config /etc/passwd: the file's type and size, not its content."""
    with pytest.raises(RunError, match=r"the file is .*, not a mapping with llmb, launcher, "
                                       "workloads") as err:
        clusterconfig.check_config(data, PATH)
    assert "root" not in str(err.value) and "schema" not in str(err.value)


def test_a_long_value_is_cut_short_in_the_message() -> None:
    with pytest.raises(RunError) as err:
        clusterconfig.check_config(config(slurm(account="a" * 500 + "\n#")), PATH)
    assert "a" * 77 + "..." in str(err.value) and len(str(err.value)) < 250


@pytest.mark.parametrize(("change", "field", "value"), [
    (launcher(cluster_type=None), ("launcher", "cluster_type"), "slurm"),
    (launcher(cluster_type="SLURM"), ("launcher", "cluster_type"), "slurm"),
    (lambda d: (launcher(gpu_type=" GB200 ")(d), slurm(gres="gpu:4")(d)),
     ("launcher", "gpu_type"), "gb200"),
    (slurm(account=12345), ("launcher", "slurm", "account"), "12345"),  # YAML read a number
    (slurm(gres=None), ("launcher", "slurm", "gres"), None),
    (slurm(gres="gpu:h100:8"), ("launcher", "slurm", "gres"), "gpu:h100:8"),
    (lambda d: d["launcher"].pop("hf_token_file"), ("launcher", "hf_token_file"), None),
    (launcher(env=None), ("launcher", "env"), {}),
    (launcher(env={"NCCL_DEBUG": "WARN", "NCCL_IB_TIMEOUT": 22, "UCX_TLS_OFF": True}),
     ("launcher", "env"), {"NCCL_DEBUG": "WARN", "NCCL_IB_TIMEOUT": "22", "UCX_TLS_OFF": "true"}),
    (workload(venv_kind=None), ("workloads", "pretrain_llama3.1", "venv_kind"), "venv"),
    (workload(venv_kind="Conda"), ("workloads", "pretrain_llama3.1", "venv_kind"), "conda"),
    (workload(image=None), ("workloads", "pretrain_llama3.1", "image"), None),
])
def test_what_may_be_left_out_gets_its_default(change: Callable[[dict[str, Any]], object],
                                               field: tuple[str, ...], value: object) -> None:
    checked: Any = clusterconfig.check_config(config(change), PATH)
    for key in field:
        checked = checked[key]
    assert checked == value


def test_a_runai_install_needs_no_slurm_section() -> None:
    cfg = clusterconfig.from_data(PATH, config(launcher(cluster_type="runai", slurm="unused")))
    assert (cfg.cluster_type, cfg.slurm) == ("runai", None)


def test_the_views_of_a_checked_config() -> None:
    data = config(lambda d: (launcher(gpu_type="gb200")(d), slurm(gres="gpu:gb200:4")(d)))
    cfg = clusterconfig.from_data(PATH, data)
    assert (cfg.install, cfg.repo) == (ROOT, Path(data["llmb"]["repo"]))
    assert (cfg.gpu_type, cfg.gpus_per_node, cfg.cluster_type) == ("gb200", 4, "slurm")
    assert cfg.slurm is not None and cfg.slurm.account == "acct" and cfg.env == {}
    assert cfg.gpu.name == "gb200" and str(cfg.slurm.gres) == "gpu:gb200:4"
    assert cfg.slurm.gres is not None and (cfg.slurm.gres.type, cfg.slurm.gres.count) == (
        "gb200", 4)
    assert list(cfg.workloads) == list(runinstall.WORKLOADS)
    assert cfg.history.path == ROOT / "llmb_run_history.jsonl"
    assert cfg.workloads_dir == ROOT / "workloads" and cfg.tree.root == ROOT


# --- finding the file -------------------------------------------------------------------------

def install(root: Path, account: str) -> Path:
    root.mkdir(parents=True)
    path = root / clusterconfig.CONFIG_FILE
    path.write_text(yaml.safe_dump(runinstall.cluster_config(root, account=account)))
    return path


def test_found_by_flag_then_in_the_current_directory_then_under_llmb_install(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    here, there, flag = (install(tmp_path / n, n) for n in ("here", "there", "flag"))
    environ = {"LLMB_INSTALL": str(there.parent)}
    monkeypatch.chdir(here.parent)
    assert clusterconfig.find_config(str(flag), environ).slurm.account == "flag"
    assert clusterconfig.find_config(None, environ).slurm.account == "here"
    monkeypatch.chdir(tmp_path)
    found = clusterconfig.find_config(None, environ)
    assert (found.path, found.slurm.account) == (there, "there")


@pytest.mark.parametrize(("explicit", "environ", "message"), [
    (None, {}, "no cluster_config.yaml found ({cwd}/cluster_config.yaml); cd to your install "
               "directory, set LLMB_INSTALL, or run installer/install.sh"),
    (None, {"LLMB_INSTALL": "/nowhere"}, "no cluster_config.yaml found "
     "({cwd}/cluster_config.yaml or /nowhere/cluster_config.yaml)"),
    ("{cwd}/mine.yaml", {"LLMB_INSTALL": "/nowhere"},
     "no cluster_config.yaml found ({cwd}/mine.yaml)"),  # --config alone is asked
    ("{cwd}", {}, "no cluster_config.yaml found ({cwd})"),  # a directory
    ("{cwd}/" + "x" * 300, {}, "--config {cwd}/" + "x" * 300 + " cannot be read (File name "
                               "too long)"),
])
def test_not_found_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                               explicit: str | None, environ: dict[str, str],
                               message: str) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(RunError) as err:
        clusterconfig.find_config(explicit.format(cwd=tmp_path) if explicit else None, environ)
    assert str(err.value).startswith(message.format(cwd=tmp_path))
    assert "\n" not in str(err.value)


def test_a_found_file_that_is_wrong_is_not_passed_over(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A broken file in the current directory is reported, not skipped for $LLMB_INSTALL's."""
    good = install(tmp_path / "good", "good")
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / clusterconfig.CONFIG_FILE).write_text("launcher: [unclosed\n")
    monkeypatch.chdir(broken)
    with pytest.raises(RunError, match="is not valid YAML"):
        clusterconfig.find_config(None, {"LLMB_INSTALL": str(good.parent)})


# --- env entries ------------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "value", "text"), [
    ("NCCL_DEBUG", "WARN", "WARN"), ("NCCL_IB_TIMEOUT", 22, "22"), ("X", 1.5, "1.5"),
    ("NCCL_NVLS_ENABLE", False, "false"), ("_PRIVATE", "", ""),
])
def test_an_env_value_as_the_launch_gets_it(name: str, value: object, text: str) -> None:
    assert clusterconfig.check_env_value("--env", name, value) == text


@pytest.mark.parametrize(("name", "value", "message"), [
    ("1X", "a", "--env: 1X is not a variable name (letters, digits and _, not "
             "starting with a digit)"),
    ("A-B", "a", "--env: A-B is not a variable name"),
    (5, "a", "--env: 5 is not a variable name"),
    ("X", None, "--env X=None must be a text or number value"),
    ("X", {"a": 1}, "--env X={'a': 1} must be a text or number value"),
    ("X", "a\x1b[31m", "--env X=a\\x1b[31m contains control character(s) \\x1b; remove them"),
    ("PATH", "/x", "--env PATH=/x: llmb-run sets PATH itself (and records it in the history); "
                   "use the workload's venv in cluster_config.yaml"),
    ("LLMB_EXCLUDE", "node1", "--env LLMB_EXCLUDE=node1: llmb-run sets LLMB_EXCLUDE itself (and "
                              "records it in the history); use --exclude"),
    ("SBATCH_GRES", "gpu:4", "--env: SBATCH_GRES=gpu:4 is set; sbatch would apply it over the "
                             "job script's #SBATCH lines without llmb recording it"),
])
def test_an_env_entry_that_cannot_be_used(name: object, value: object, message: str) -> None:
    with pytest.raises(RunError) as err:
        clusterconfig.check_env_value("--env", name, value)
    assert str(err.value).startswith(message)
    assert "\n" not in str(err.value)


def test_every_reserved_name_says_what_to_use_instead() -> None:
    for name, instead in overrides.RESERVED.items():
        with pytest.raises(RunError) as err:
            clusterconfig.check_env_value("sweep.yaml: task 2: env", name, "x")
        assert str(err.value) == (f"sweep.yaml: task 2: env {name}=x: llmb-run sets {name} "
                                  f"itself (and records it in the history); use {instead}")
