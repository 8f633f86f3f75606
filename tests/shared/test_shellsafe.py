"""llmb.shared.shellsafe: what a value may hold where a shell, Slurm or pyxis reads it."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from llmb.shared import shellsafe
from llmb.shared.values import BadValue
from paths import REPO


def refused(check, *args) -> str:
    with pytest.raises(BadValue) as info:
        check(*args)
    text = str(info.value)
    assert "\n" not in text
    return text


@pytest.mark.parametrize(("value", "chars"), [
    ("/x/y$(touch pwned)", "$ ( a space )"),
    ("/x/my dir", "a space"),
    ("/x/it's", "'"),
    ("/x/a;b", ";"),
    ("/x/`id`", "`"),
    ("/x/%j", "%"),
    ("/x/a,b:c", ", :"),
    ("~/llmb", "~"),
    ("/x/a\u00a0b", "\u00a0"),
])
def test_job_path_refuses_what_a_shell_would_read(value: str, chars: str) -> None:
    text = refused(shellsafe.job_path, "LLMB_INSTALL", value)
    assert text.startswith(f"LLMB_INSTALL={value} contains {chars}, which a job path")
    assert "nemo-run passes the run directory" in text and "use letters, digits" in text


@pytest.mark.parametrize("value", ["/lustre/fsw/u_1/llmb", "/a/b.c/d+e-f@g=h", "/données/llmb"])
def test_job_path_accepts_ordinary_paths(value: str) -> None:
    assert shellsafe.job_path("LLMB_INSTALL", value) == value


def test_control_characters_are_named_and_shown_escaped() -> None:
    text = refused(shellsafe.printable, "SBATCH_ACCOUNT", "acct\n#SBATCH --x")
    assert text == ("SBATCH_ACCOUNT=acct\\n#SBATCH --x contains control character(s) \\n, which "
                    "would end or garble a line of the job script; remove them")
    assert refused(shellsafe.printable, "HF_TOKEN", "hf_secret\x1b", True).startswith(
        "HF_TOKEN contains control character(s) \\x1b")
    shellsafe.printable_env({"A": "ok", "B": "fine"}, ["A", "B", "C"])
    assert "B=x\\ry" in refused(shellsafe.printable_env, {"A": "ok", "B": "x\ry"}, ["A", "B"])


def test_mount_paths_refuse_what_pyxis_splits_on() -> None:
    assert "splits entries on ','" in refused(shellsafe.mount_path, "LOAD_CHECKPOINT_PATH", "/a,b")
    assert refused(shellsafe.mount_path, "the llmb repository", "/a:b", True).startswith(
        "the llmb repository /a:b contains :")
    assert shellsafe.mount_path("LOAD_CHECKPOINT_PATH", "/ck pt/$x") == "/ck pt/$x"


def test_slurm_names() -> None:
    assert "job name that nemo-run writes unquoted" in refused(
        shellsafe.slurm_name, "SBATCH_ACCOUNT", "a$(id)", "account")
    assert "contains a leading -" in refused(shellsafe.slurm_name, "SBATCH_PARTITION", "-x",
                                             "partition")
    assert "contains ," in refused(shellsafe.slurm_name, "SBATCH_ACCOUNT", "a,b", "account")
    assert shellsafe.slurm_name("SBATCH_PARTITION", "batch,backfill", "partition", True)
    assert shellsafe.slurm_name("SBATCH_ACCOUNT", "coreai_dlalgo-llm.x", "account")


@pytest.mark.parametrize("value", ["forever", "1h", "00:61:00", "١٢:٠٠:٠٠", "1234-00:00:00",
                                   "00:30:00\n"])
def test_slurm_time_refused(value: str) -> None:
    assert "is not a Slurm time" in refused(shellsafe.slurm_time, "TIME_LIMIT", value)


def test_slurm_time_accepted() -> None:
    for value in ("00:30:00", "2-00:00:00", "100:00:00"):
        assert shellsafe.slurm_time("TIME_LIMIT", value) == value


def test_container_image(tmp_path: Path) -> None:
    assert shellsafe.container_image("RUN_CONF_IMAGE", "images/x.sqsh", tmp_path) == \
        str(tmp_path / "images" / "x.sqsh")
    assert shellsafe.container_image("RUN_CONF_IMAGE", "./x", tmp_path) == str(tmp_path / "x")
    assert shellsafe.container_image("RUN_CONF_IMAGE", "~/x.sqsh") == \
        os.path.expanduser("~/x.sqsh")
    for ref in ("nvcr.io#nvidia/nemo:25.04.01", "nvcr.io/nvidia/nemo:25.04.01", "ubuntu",
                "docker://nvcr.io#nvidia/nemo:25.04.01", "user@registry.example:5000#a/b:1",
                "nvcr.io/nvidia/nemo@sha256:" + "a" * 64):
        assert shellsafe.container_image("RUN_CONF_IMAGE", ref) == ref
    for bad in ("Bad Image", "nvcr.io/nvidia/nemo:25.04.01 --x", "$(id)", "a;b"):
        assert "is neither an image file" in refused(shellsafe.container_image, "RUN_CONF_IMAGE",
                                                       bad)


@pytest.mark.parametrize(("value", "problem"), [
    ("true", "is a yes/no word"), ("1", "is a yes/no word"), ("hf_x", "is 4 characters long"),
    ("hf_abc def_ghijkl", "contains a space"),
])
def test_hf_token_never_shown(value: str, problem: str) -> None:
    text = refused(shellsafe.hf_token, "HF_TOKEN", value)
    assert text.startswith(f"HF_TOKEN {problem}, which is not a Hugging Face access token")
    assert f"={value}" not in text
    assert shellsafe.hf_token("HF_TOKEN", " hf_abcdefghijklmnop ") == "hf_abcdefghijklmnop"


def test_local_process_limit() -> None:
    cpus = len(os.sched_getaffinity(0))
    assert shellsafe.local_process_limit(True) == (cpus, f"the {cpus} CPUs this process may use")
    assert shellsafe.local_process_limit(False, {"CUDA_VISIBLE_DEVICES": "0,1,2"})[0] == 3
    limit, what = shellsafe.local_process_limit(False, {"CUDA_VISIBLE_DEVICES": ""})
    assert limit == cpus and what.startswith("no GPU is visible here")


def test_shell_env_quotes_values_bash_reads_back() -> None:
    env = {"A": "plain", "B": "x $(touch pwned) 'q'", "C": "COLL,P2P,NET"}
    quoted = shellsafe.shell_env(env)
    assert quoted["A"] == "plain" and quoted["C"] == "COLL,P2P,NET"
    script = "".join(f"export {k}={v}\n" for k, v in quoted.items()) + 'printf "%s|" "$B"'
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True,
                         cwd="/tmp").stdout
    assert out == "x $(touch pwned) 'q'|"
    assert shlex.split(quoted["B"]) == [env["B"]]


def test_cli_for_setup_sh() -> None:
    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "llmb.shared.shellsafe", *args],
                              capture_output=True, text=True,
                              env={**os.environ, "PYTHONPATH": str(REPO / "common")})

    assert cli("job-path", "LLMB_INSTALL", "/ok/path").returncode == 0
    bad = cli("job-path", "LLMB_INSTALL", "/x y")
    assert bad.returncode == 1 and bad.stderr.startswith("llmb: LLMB_INSTALL=/x y contains a ")
    assert cli("nope").returncode == 2


@pytest.mark.parametrize("check", [lambda v: shellsafe.job_path("LLMB_INSTALL", v),
                                   lambda v: shellsafe.mount_path("CUSTOM_MOUNT", v),
                                   lambda v: shellsafe.container_image("RUN_CONF_IMAGE", v)])
def test_a_path_or_image_of_100_KB_is_refused_short(check) -> None:
    """A 100 KB RUN_CONF_IMAGE or CUSTOM_MOUNT reached the job script whole."""
    with pytest.raises(shellsafe.BadValue) as err:
        check("q" * 100_000)
    assert "=" + "q" * 60 + "... (100000 characters) is longer than the 4096 characters" in \
        str(err.value)
    assert len(str(err.value)) < 200
