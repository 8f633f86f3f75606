"""llmb.install.fields: each installer field checked before anything is written, as a YAML file
gives it (a number where a string belongs, a string where a list belongs, null): the value to use,
or one line (exit status 2) naming the field, the value and what would work. The installer's
command line over whole config files is in test_cli.py."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from llmb.install import fields
from llmb.recipes import catalog
from llmb.shared.values import BadValue
from paths import REPO

LAUNCH_TXT = "common/requirements/launch.txt"


def refused(check: Callable[..., Any], *args: Any) -> str:
    with pytest.raises(BadValue) as err:
        check(*args)
    assert err.value.status == 2 and "\n" not in str(err.value)
    return str(err.value)


@pytest.mark.parametrize(("value", "text"), [
    ("acct", "acct"), ("  batch  ", "batch"), (12345, "12345"), (1.5, "1.5"),
    ("naïve-ü", "naïve-ü"),
])
def test_a_string_as_yaml_gives_it(value: object, text: str) -> None:
    assert fields.string("slurm.account", value) == text


@pytest.mark.parametrize(("value", "example", "message"), [
    (True, "", "slurm.account must be a string; got a boolean True"),
    (None, "", "slurm.account must be a string; got empty None"),
    ([1], "gpu:8", "slurm.account must be a string, e.g. gpu:8; got a list [1]"),
    ({"name": "acct"}, "", "slurm.account must be a string; got a mapping {'name': 'acct'}"),
    ("", "", "slurm.account is empty"),
    ("   ", "", "slurm.account is empty"),
    ("a\tb", "", "slurm.account=a\\tb contains control character(s) \\t, which would end or "
                 "garble a line of the job script; remove them"),
])
def test_a_string_that_is_not_one(value: object, example: str, message: str) -> None:
    assert refused(fields.string, "slurm.account", value, example) == message


@pytest.mark.parametrize(("value", "result", "message"), [
    ([], [], None),
    (["a", 1], ["a", "1"], None),
    ("--no-index", None, "venv.pip_args must be a list, e.g. [--x]; got a string --no-index"),
    ({"a": 1}, None, "venv.pip_args must be a list, e.g. [--x]; got a mapping {'a': 1}"),
    (["a", None], None, "venv.pip_args[1] must be a string; got empty None"),
])
def test_a_list_is_a_yaml_list(value: object, result: list[str] | None,
                               message: str | None) -> None:
    if message is None:
        assert fields.string_list("venv.pip_args", value, "[--x]") == result
    else:
        assert refused(fields.string_list, "venv.pip_args", value, "[--x]") == message


@pytest.mark.parametrize(("value", "result"), [
    (True, True), ("yes", True), ("OFF", False), (False, False),
    ("", None), (1, None), ("sometimes", None), (None, None),
])
def test_a_boolean_is_strict_and_never_empty(value: object, result: bool | None) -> None:
    if result is None:
        assert refused(fields.boolean, "venv.system_site_packages", value).startswith(
            "venv.system_site_packages=")
    else:
        assert fields.boolean("venv.system_site_packages", value) is result


def test_pip_arguments_are_one_word_each() -> None:
    args = ["--no-index", "--find-links", "/wheels", "--trusted-host=mirror"]
    assert fields.pip_args("venv.pip_args", args) == args
    assert refused(fields.pip_args, "venv.pip_args", ["--no-index", "-f /w"]) == (
        "venv.pip_args[1]=-f /w contains a space; give each pip argument as its own list "
        "item, e.g. [--find-links, /wheels]")
    assert "control character(s) \\t" in refused(fields.pip_args, "venv.pip_args", ["a\tb"])


@pytest.mark.parametrize(("value", "message"), [
    ([LAUNCH_TXT], None),
    ([LAUNCH_TXT, "common/requirements/report.txt"], None),
    (["common/requirements/none.txt"], "venv.requirements: common/requirements/none.txt does not "
                                       f"exist under {REPO}"),
    (["common/requirements"], "venv.requirements[0]=common/requirements cannot be read "
                              "(Is a directory)"),  # a folder is no file
    (["a:b.txt"], "venv.requirements[0]=a:b.txt contains ':', which separates the files handed "
                  "to setup.sh; rename the file"),
])
def test_requirement_files_exist_under_the_repository(value: list[str],
                                                      message: str | None) -> None:
    if message is None:
        assert fields.requirements("venv.requirements", value, REPO) == value
    else:
        assert refused(fields.requirements, "venv.requirements", value, REPO) == message


@pytest.mark.parametrize(("value", "gres"), [
    (None, None), ("", None), ("none", None), ("None", None), (" NONE ", None),
    ("gpu:8", "gpu:8"), (" gpu:4 ", "gpu:4"), ("gpu:h100:8", "gpu:h100:8"),
    ("gpu:nvidia_h100_80gb_hbm3:8", "gpu:nvidia_h100_80gb_hbm3:8"), ("gpu:999", "gpu:999"),
])
def test_a_gpu_gres(value: object, gres: str | None) -> None:
    assert fields.gres("slurm.gres", value) == gres


@pytest.mark.parametrize("value", ["8", 8, "gpu:0", "gpu:1000", "gpu:08", "gpu:8,nic:1",
                                   "gpu:a b:8", "gres/gpu:8", "gpu:"])
def test_not_a_gpu_gres(value: object) -> None:
    assert refused(fields.gres, "slurm.gres", value) == (
        f"slurm.gres={str(value).strip()} is not a GPU GRES request; use gpu:N or gpu:TYPE:N "
        "(e.g. gpu:8), or null when the cluster needs none")


def test_a_gpu_gres_asks_for_every_gpu_of_a_node() -> None:
    """The count is the GPU type's GPUs per node, as for every job (llmb.launch.slurmjob)."""
    gb200 = catalog.get_gpu_type("gb200")
    assert fields.gres("slurm.gres", "gpu:gb200:4", gb200) == "gpu:gb200:4"
    assert refused(fields.gres, "slurm.gres", "gpu:8", gb200) == (
        "slurm.gres=gpu:8 asks for 8 GPUs per node, but a gb200 job runs 4 tasks per node, "
        "each on one GPU: use gpu:4, or null when the cluster needs none")


def test_an_install_path_is_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert fields.install_path("install_path", "llmb", "slurm") == str(tmp_path / "llmb")
    assert fields.install_path("install_path", "~/llmb", "slurm") == str(
        tmp_path / "home" / "llmb")
    assert not (tmp_path / "llmb").exists()  # checked, not created
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".llmb")]  # probe removed


def test_a_job_path_only_where_jobs_run(tmp_path: Path) -> None:
    """A local run hands no path to a shell: a space is fine there, not on Slurm or Run:ai."""
    odd = str(tmp_path / "my runs")
    assert fields.install_path("install_path", odd, "local") == odd
    for cluster in ("slurm", "runai"):
        assert refused(fields.install_path, "install_path", odd, cluster).startswith(
            f"install_path={odd} contains a space, which a job path cannot hold")


@pytest.mark.parametrize(("make", "problem"), [
    (lambda t: t / "llmb", None),
    (lambda t: t / "a" / "b" / "c", None),
    (lambda t: t / ("x" * 256) / "llmb", "a name in it is longer than the file system allows "
                                         "(255 bytes)"),
    (lambda t: t / "file" / "llmb", "{t}/file is a file, not a directory"),
    (lambda t: t / "file", "{t}/file is a file, not a directory"),
    (lambda t: t / "loop" / "llmb", "{t}/loop is a link that leads nowhere (broken, or a loop)"),
    (lambda t: t / "dangling", "{t}/dangling is a link that leads nowhere (broken, or a loop)"),
])
def test_whether_this_user_can_create_it(tmp_path: Path, make: Callable[[Path], Path],
                                         problem: str | None) -> None:
    (tmp_path / "file").write_text("x")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    (tmp_path / "dangling").symlink_to(tmp_path / "gone")
    found = fields.creatable_problem(make(tmp_path))
    assert found == (problem.format(t=tmp_path) if problem else None)
    assert sorted(os.listdir(tmp_path)) == ["dangling", "file", "loop"]  # the probe removed


def test_env_entries_as_launch_sh_reads_them() -> None:
    assert fields.env("env", None, set()) == {}
    assert fields.env("env", {"NCCL_DEBUG": "WARN", "NCCL_IB_TIMEOUT": 22,
                              "TOKENIZERS_PARALLELISM": False}, set()) == {
        "NCCL_DEBUG": "WARN", "NCCL_IB_TIMEOUT": "22", "TOKENIZERS_PARALLELISM": "false"}


@pytest.mark.parametrize(("env", "message"), [
    (["NCCL_DEBUG=WARN"], "env must be a mapping of variable names to values, e.g. "
                          "{NCCL_DEBUG: WARN}; got a list ['NCCL_DEBUG=WARN']"),
    ({"A": {"b": 1}}, "env A={'b': 1} must be a text or number value"),
    ({"A": None}, "env A=None must be a text or number value"),
    ({"A-B": "x"}, "env: A-B is not a variable name (letters, digits and _, not starting with "
                   "a digit)"),
    ({"SLACK_WEBHOOK_SECRET": "x"}, "env.SLACK_WEBHOOK_SECRET looks like a secret (by its "
                                    "name) and cluster_config.yaml is no place for one"),
    ({"NOTE": "key=abcdefghijkl"}, "env.NOTE holds the value of a secret"),
])
def test_env_entries_that_cannot_be_stored(env: object, message: str) -> None:
    known = fields.secret_values({"MY_KEY": "abcdefghijkl"}, None)
    found = refused(fields.env, "env", env, known)
    assert found.startswith(message) and "abcdefghijkl" not in found


def test_the_secrets_the_installer_knows() -> None:
    environ = {"MY_KEY": "abcdefghijkl", "HF_TOKEN": "true", "PATH": "/usr/local/bin:/usr/bin",
               "DB_PASSWORD": " padded-secret "}
    assert fields.secret_values(environ, "hf_tokenvalue1") == {
        "abcdefghijkl", "padded-secret", "hf_tokenvalue1"}
    # too short to mask by value ("true" would turn every true into stars)
    assert fields.env("env", {"X": "true"}, fields.secret_values(environ, None)) == {"X": "true"}


def test_sections_and_their_keys() -> None:
    assert fields.check_map("venv", None) == {}
    section = {"account": "a"}
    assert fields.check_map("slurm", section) is section
    assert refused(fields.check_map, "venv", [1]) == (
        "venv must be a mapping of settings; it holds a list of 1 item(s) (not shown)")
    fields.unknown_keys("slurm", {"account": 1}, {"account", "partition"})
    assert refused(fields.unknown_keys, "slurm", {"qos": 1, "b\n": 2, "account": 3},
                   {"partition", "account"}) == (
        "slurm has unknown key(s) qos and 1 more (not shown); allowed: account, partition")
