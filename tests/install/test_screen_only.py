"""A GPU type gpus.yaml knows but no recipe publishes a row for (h200): offered,
said to serve the screen and the analyzer only, installed with no workload (cluster_config.yaml
with an empty workloads mapping, which llmb-run reads), and a workload chosen for it refused in
one line naming the GPU types that workload publishes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from llmb.install import cli, fields, prompts, steps
from llmb.llmbrun import clusterconfig
from llmb.recipes import catalog
from paths import REPO, SHIMS

ONLY = fields.SCREEN_ONLY
ONLY_TYPES = fields.screen_only_gpu_types()


def answers(*replies: str):
    it, asked = iter(replies), []

    def input_fn(prompt: str) -> str:
        asked.append(prompt)
        return next(it)

    return input_fn, asked


def install_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("HF_TOKEN", "LLMB_INSTALL", "VIRTUAL_ENV", "STAGE_PATH")}
    return {**env, "PATH": f"{SHIMS}:{env['PATH']}", "LLMB_PYTHON": sys.executable,
            "ENROOT_SHIM_DELAY": "0", "ENROOT_SHIM_LOG": str(tmp_path / "enroot.log"),
            "LLMB_IMAGE_SPACE_GB": "0"}


def test_the_screen_only_types_are_the_ones_no_recipe_publishes() -> None:
    only = fields.screen_only_gpu_types()
    assert only == ["h200"]  # (b300 and gb300: the Megatron-Bridge recipes publish them)
    assert not {g for r in catalog.all_recipes() for g in r.gpu_types} & set(only)


def test_every_gpu_type_is_offered_and_a_screen_only_one_says_so() -> None:
    choices = {c.name: c.description for c in prompts.gpu_choices()}
    assert list(choices) == catalog.gpu_types()
    for name, description in choices.items():
        assert description.endswith(f"; {ONLY}") == (name in fields.screen_only_gpu_types())


def plan(tmp_path: Path, gpu_type: str, workloads: list[str]) -> steps.Plan:
    return steps.Plan(install_path=str(tmp_path / "install"), cluster_type="slurm",
                      gpu_type=gpu_type, workloads=workloads,
                      slurm={"account": "acct", "partition": "batch"},
                      venv={"kind": "venv"}, image={"method": "local"})


@pytest.mark.parametrize("gpu_type", ONLY_TYPES)
def test_no_workload_is_an_install_llmb_run_reads(tmp_path: Path, gpu_type: str) -> None:
    checked = cli.validate_plan(plan(tmp_path, gpu_type, []), {})
    assert checked.workloads == []
    text = steps.cluster_config_text(checked)
    assert yaml.safe_load(text)["workloads"] == {}
    path = tmp_path / "cluster_config.yaml"
    path.write_text(text)
    config = clusterconfig.from_data(path, yaml.safe_load(text))
    assert config.workloads == {} and config.gpu.name == gpu_type and config.images() == []


@pytest.mark.parametrize("workload", ["pretrain_nemotron4", "pretrain_nemotronh"])
def test_a_workload_chosen_for_a_screen_only_type_is_one_line(tmp_path: Path,
                                                              workload: str) -> None:
    publishes = ", ".join(catalog.find_recipe(workload).gpu_types)
    with pytest.raises(cli.InstallError) as err:
        cli.validate_plan(plan(tmp_path, "h200", [workload]), {})
    assert str(err.value) == (f"workloads: {workload} is not published for gpu_type=h200; it "
                              f"publishes rows for {publishes} (h200: {ONLY}; give "
                              "workloads: [])")


def test_no_workload_for_a_published_type_is_still_refused(tmp_path: Path) -> None:
    with pytest.raises(cli.InstallError, match=r"^workloads is empty; choose from: "):
        cli.validate_plan(plan(tmp_path, "h100", []), {})


def test_the_questions_skip_the_workloads_for_a_screen_only_type(tmp_path: Path,
                                                                 capsys) -> None:
    input_fn, asked = answers(str(tmp_path / "i"), "slurm", "h200", "myacct", "batch", "none",
                              "local", "", "venv", "yes")
    done = cli.interactive_plan(input_fn, lambda _p: "", {}, {"partitions": None,
                                                              "accounts": None})
    out = capsys.readouterr().out
    assert done.gpu_type == "h200" and done.workloads == []
    assert not any("Workloads to install" in q for q in asked)
    assert f"Workloads to install: none (h200: {ONLY}, and preflight)" in out
    assert "Workloads         : none (llmb-run screen and preflight, the analyzer)" in out
    assert "h200   8 GPUs per node, x86_64" in out and f"; {ONLY}" in out


def test_a_headless_install_with_no_workload(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({
        "install_path": str(tmp_path / "install"), "gpu_type": "h200", "workloads": [],
        "slurm": {"account": "acct", "partition": "batch"}, "venv": {"reuse": sys.prefix},
        "image": {"method": "local"}}))
    proc = subprocess.run(["bash", str(REPO / "installer" / "install.sh"), "--config",
                           str(config)], env=install_env(tmp_path), capture_output=True,
                          text=True, stdin=subprocess.DEVNULL, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "./llmb-run screen" in proc.stdout
    root = tmp_path / "install"
    conf = yaml.safe_load((root / "cluster_config.yaml").read_text())
    assert conf["workloads"] == {} and conf["launcher"]["gpu_type"] == "h200"
    listing = subprocess.run([str(root / "llmb-run"), "list"], capture_output=True, text=True,
                             cwd=tmp_path, env=install_env(tmp_path), timeout=60)
    assert listing.returncode == 0, listing.stderr
