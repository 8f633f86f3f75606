"""llmb.install.steps: every step says from the disk whether it is done (the directories, the
0600 token file, a venv's completion marker, the setup fingerprint of THIS venv and these
requirements, a squashfs image at its final name, the exact cluster_config.yaml and wrapper),
and `execute` runs only what the disk lacks and checks each result is there. The plans are the
installer's own (llmb.install.cli.validate_plan); the whole installer, venvs and setup.sh
included, runs in test_cli.py."""

from __future__ import annotations

import io
import json
import os
import sys
from pathlib import Path

import pytest
from llmb.install import cli, steps
from llmb.install.steps import Step, StepError
from llmb.shared import files

TOKEN = "hf_abcdefghijklmnopqrst"
LLAMA, NEMOTRON = "pretrain_llama3.1", "pretrain_nemotron4"
IMAGE = "nvidia+nemo+25.04.01.sqsh"


def make_plan(root: Path, image: str | None = "local", venv: dict | None = None,
              cluster_type: str = "slurm") -> steps.Plan:
    """image None: the installer's default for the cluster type (Run:ai: skip)."""
    plan = steps.Plan(install_path=str(root), cluster_type=cluster_type, gpu_type="h100",
                      workloads=[LLAMA, NEMOTRON] if cluster_type == "slurm" else [NEMOTRON],
                      slurm={"account": "acct", "partition": "batch"},
                      venv=venv or {"reuse": sys.prefix},
                      image={"method": image} if image else {},
                      hf_token=TOKEN)
    return cli.validate_plan(plan, {})


@pytest.fixture
def plan(tmp_path: Path) -> steps.Plan:
    return make_plan(tmp_path / "llmb")


def by_name(plan: steps.Plan) -> dict[str, Step]:
    return {s.name: s for s in steps.build_steps(plan, sys.executable)}


def test_the_steps_of_an_install_and_none_done_on_an_empty_disk(plan: steps.Plan) -> None:
    found = steps.build_steps(plan, sys.executable)
    assert [s.name for s in found] == [
        "layout", "hf_token", f"venv:{LLAMA}", f"setup:{LLAMA}", f"venv:{NEMOTRON}",
        f"setup:{NEMOTRON}", f"image:{IMAGE}", "cluster_config", "llmb_run"]  # one image
    # a reused venv is there already; nothing else is
    assert [s.name for s in found if s.done()] == [f"venv:{LLAMA}", f"venv:{NEMOTRON}"]


def test_no_token_step_where_no_workload_needs_one(tmp_path: Path) -> None:
    names = [s.name for s in steps.build_steps(make_plan(tmp_path, None, cluster_type="runai"),
                                               sys.executable)]
    assert names == ["layout", f"venv:{NEMOTRON}", f"setup:{NEMOTRON}", "cluster_config",
                     "llmb_run"]  # Run:ai pulls the image itself: no image step


def test_the_layout_is_done_while_every_folder_is_there(plan: steps.Plan) -> None:
    layout = by_name(plan)["layout"]
    layout.run()
    assert layout.done()
    for folder in ("images", "datasets", "venvs", f"workloads/{LLAMA}", f"workloads/{NEMOTRON}"):
        assert (plan.root / folder).is_dir()
    os.rmdir(plan.root / "workloads" / NEMOTRON)
    assert not layout.done()


def test_the_token_file_is_done_only_with_this_token_and_mode_0600(plan: steps.Plan) -> None:
    token = by_name(plan)["hf_token"]
    token.run()
    path = plan.root / ".hf_token"
    assert token.done() and path.read_text() == TOKEN + "\n"
    path.chmod(0o644)
    assert not token.done()
    steps.write_secret(path, "hf_another_token_value")
    assert not token.done()


def test_a_venv_is_done_by_its_completion_marker(tmp_path: Path) -> None:
    """What a killed `python -m venv` leaves (bin/python, no marker) is not a venv."""
    plan = make_plan(tmp_path / "llmb", venv={"kind": "venv"})
    venv = plan.venv_path(LLAMA)
    assert venv == plan.root / "venvs" / LLAMA
    step = by_name(plan)[f"venv:{LLAMA}"]
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    assert not step.done() and not steps.venv_complete(venv)
    (venv / steps.VENV_MARKER).write_text('{"id": "1"}\n')
    assert step.done()
    (venv / "bin" / "python").unlink()
    assert not step.done()


def test_a_venvs_identity(tmp_path: Path) -> None:
    built = tmp_path / "built"
    (built / "bin").mkdir(parents=True)
    (built / steps.VENV_MARKER).write_text('{"id": "abc"}\n')
    assert steps.venv_identity(built) == '{"id": "abc"}'
    external = tmp_path / "external"
    (external / "bin").mkdir(parents=True)
    (external / "bin" / "python").write_text("")
    st = (external / "bin" / "python").stat()
    assert steps.venv_identity(external) == (
        f"external:{external.resolve()}:{st.st_ino}:{st.st_ctime_ns}")
    assert steps.venv_identity(tmp_path / "gone") == f"missing:{tmp_path / 'gone'}"


def test_setup_is_done_for_this_venv_and_these_requirements_only(plan: steps.Plan) -> None:
    setup = by_name(plan)[f"setup:{LLAMA}"]
    assert not setup.done()
    plan.root.mkdir()  # the layout step's
    steps.record_setup(plan.root, LLAMA, steps.setup_fingerprint(plan, LLAMA))
    state = plan.root / ".llmb_install_state.json"
    assert setup.done() and not by_name(plan)[f"setup:{NEMOTRON}"].done()
    assert oct(state.stat().st_mode & 0o777) == "0o600"
    plan.venv["pip_args"] = ["--no-index"]  # other requirements: set up again
    assert not setup.done()
    plan.venv["pip_args"] = []
    assert setup.done()
    data = json.loads(state.read_text())
    state.write_text(json.dumps({**data, "schema": steps.STATE_SCHEMA + 1}))
    assert not setup.done()  # a state file of another installer is not trusted
    state.write_text("{half a record")
    assert not setup.done() and steps.load_state(plan.root) == {}


def test_setup_records_accumulate(plan: steps.Plan) -> None:
    plan.root.mkdir()
    steps.record_setup(plan.root, LLAMA, "a")
    steps.record_setup(plan.root, NEMOTRON, "b")
    steps.record_setup(plan.root, LLAMA, "c")
    assert steps.load_state(plan.root) == {"schema": steps.STATE_SCHEMA,
                                           "setup": {LLAMA: "c", NEMOTRON: "b"}}


def test_the_requirements_digest_is_of_what_setup_installs(plan: steps.Plan) -> None:
    digest = steps.requirements_digest(plan)
    assert len(digest) == 16 and steps.requirements_digest(plan) == digest
    plan.venv["requirements"] = [*plan.venv["requirements"], "common/requirements/report.txt"]
    assert steps.requirements_digest(plan) != digest


@pytest.mark.parametrize(("content", "done"), [
    (b"hsqs" + b"\0" * 92, True),
    (b"hsq", False),  # an import cut short
    (b"", False),
    (b"\x1f\x8b\x08\0", False),  # a tarball, not a squashfs
    (None, False),
])
def test_an_image_is_done_when_a_squashfs_is_at_its_final_name(
        plan: steps.Plan, content: bytes | None, done: bool) -> None:
    image = by_name(plan)[f"image:{IMAGE}"]
    target = plan.root / "images" / IMAGE
    if content is not None:
        target.parent.mkdir(parents=True)
        target.write_bytes(content)
    assert image.done() is done


def test_an_image_folder_or_link(plan: steps.Plan, tmp_path: Path) -> None:
    target = plan.root / "images" / IMAGE
    target.mkdir(parents=True)
    assert not steps.valid_image(target)
    target.rmdir()
    real = tmp_path / "shared.sqsh"
    real.write_bytes(b"hsqs" + b"\0" * 60)
    target.symlink_to(real)  # an image kept elsewhere, linked in
    assert by_name(plan)[f"image:{IMAGE}"].done()


def test_the_image_step_says_what_it_imports_and_how(tmp_path: Path) -> None:
    plan = make_plan(tmp_path / "llmb", image="srun")
    image = by_name(plan)[f"image:{IMAGE}"]
    setup_sh = steps.REPO / "llama3.1" / "setup.sh"
    assert image.describe == (
        f"import docker://nvcr.io#nvidia/nemo:25.04.01 -> {plan.root}/images/{IMAGE} via srun "
        "--account=acct --partition=batch --nodes=1 --ntasks=1 --time=02:00:00 "
        f"--job-name=llmb-image-import bash {setup_sh}")
    assert f"image:{IMAGE}" not in by_name(make_plan(tmp_path / "skip", image="skip"))


@pytest.mark.parametrize(("name", "path", "mode"), [
    ("cluster_config", "cluster_config.yaml", 0o600),
    ("llmb_run", "llmb-run", 0o700),
])
def test_a_written_file_is_done_while_it_is_exactly_this_plans(
        plan: steps.Plan, name: str, path: str, mode: int) -> None:
    step = by_name(plan)[name]
    plan.root.mkdir(parents=True)
    step.run()
    target = plan.root / path
    assert step.done() and target.stat().st_mode & 0o777 == mode
    target.write_text(target.read_text() + "# edited by hand\n")
    target.chmod(mode)
    assert not step.done()
    step.run()
    target.chmod(0o644)
    assert not step.done()


def test_cluster_config_is_the_plan(plan: steps.Plan, tmp_path: Path) -> None:
    conf = steps.cluster_config(plan)
    assert conf["launcher"]["hf_token_file"] == str(plan.root / ".hf_token")
    assert conf["launcher"]["slurm"] == {"account": "acct", "partition": "batch",
                                         "cpu_partition": "batch", "gres": None}
    assert conf["workloads"][LLAMA] == {"recipe": "llama3.1", "venv": sys.prefix,
                                        "venv_kind": "venv",
                                        "image": str(plan.root / "images" / IMAGE)}
    runai = steps.cluster_config(make_plan(tmp_path / "r", None, cluster_type="runai"))
    assert runai["launcher"]["slurm"] is None and runai["launcher"]["hf_token_file"] is None
    assert runai["workloads"][NEMOTRON]["image"] is None
    assert steps.cluster_config_text(plan).startswith("# Written by the llmb installer")


def test_setup_sh_runs_with_the_workloads_venv_active(plan: steps.Plan,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONDA_PREFIX", "/opt/conda")
    monkeypatch.setenv("STAGE_PATH", "/old/stage")
    monkeypatch.setenv("PYTHONHOME", "/elsewhere")
    env = steps.venv_env(plan, LLAMA)
    assert env["VIRTUAL_ENV"] == sys.prefix
    assert env["PATH"].startswith(f"{sys.prefix}/bin{os.pathsep}")
    assert not {"CONDA_PREFIX", "STAGE_PATH", "PYTHONHOME"} & set(env)
    assert (env["LLMB_INSTALL"], env["LLMB_REPO"], env["GPU_TYPE"], env["CLUSTER_TYPE"]) == (
        str(plan.root), str(steps.REPO), "h100", "slurm")


# --- execute ----------------------------------------------------------------------------------

def file_step(path: Path, text: str = "x", leaves: bool = True) -> Step:
    """A step whose result is a file (or, leaves=False, one that forgets to write it)."""
    return Step(path.name, f"write {path.name}",
                lambda: files.atomic_write(path, text) if leaves else None,
                lambda: path.is_file() and path.read_text() == text)


def test_execute_runs_what_the_disk_lacks(tmp_path: Path) -> None:
    (tmp_path / "a").write_text("x")
    out = io.StringIO()
    steps.execute([file_step(tmp_path / "a"), file_step(tmp_path / "b")], out)
    assert out.getvalue().splitlines() == [
        "Resuming: 1 of 2 steps already done (checked on disk)",
        "[1/2] a: already done, kept", "[2/2] b: write b"]
    assert (tmp_path / "b").read_text() == "x"


def test_a_step_that_leaves_nothing_on_disk_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(StepError) as err:
        steps.execute([file_step(tmp_path / "a", leaves=False)], io.StringIO())
    assert str(err.value) == "step a ran but its result is not on disk (write a)"


def test_a_result_undone_while_installing_is_an_error(tmp_path: Path) -> None:
    a = tmp_path / "a"
    undo = Step("b", "remove a", lambda: a.unlink(), lambda: not a.exists())
    with pytest.raises(StepError) as err:
        steps.execute([file_step(a), undo], io.StringIO())
    assert str(err.value) == ("not installed: a changed on disk while installing; run the same "
                              "command again")


def test_the_plans_own_file_steps_run_once(plan: steps.Plan) -> None:
    """layout, token, cluster_config.yaml and the wrapper (no venv, setup or image work)."""
    mine = [s for s in steps.build_steps(plan, sys.executable)
            if s.name in ("layout", "hf_token", "cluster_config", "llmb_run")]
    steps.execute(mine, io.StringIO())
    assert all(s.done() for s in mine)
    again = io.StringIO()
    steps.execute(mine, again)
    assert again.getvalue().count("already done, kept") == 4


@pytest.mark.parametrize("text", ['{"schema": 2, "setup": ["pretrain_nemotron4"]}',
                                  '{"schema": 2, "setup": {"w": 5}}', '[2]',
                                  '{"schema": 2, "setup": {"w": "' + "x" * 70000 + '"}}'])
def test_a_state_file_not_of_its_type_is_no_state(tmp_path, text):
    """The state is a cache the disk overrules: a hand-edited one is read as none (every setup
    is checked again), never a traceback."""
    (tmp_path / ".llmb_install_state.json").write_text(text)
    assert steps.load_state(tmp_path) == {}
    steps.record_setup(tmp_path, "w", "fp")
    assert steps.load_state(tmp_path) == {"schema": steps.STATE_SCHEMA, "setup": {"w": "fp"}}
