"""llmb.entrypoint, the dispatch behind every recipe's entrypoint (pretrain_llama31.py, ...):
--help, an unknown argument, a launch request that cannot be built, and `train --manifest` with a
manifest that is missing, broken or a smoke test asked for --print-config: each one line on
stderr starting with "llmb: " and exit status 2, before nemo-run, torch or NeMo is imported.
launch.sh's own handling is in tests/bats/launch_validation.bats; what a good manifest trains
is in tests/container."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fronts import into_closed_pipe
from llmb import entrypoint
from llmb.recipes import catalog
from paths import REPO, SHIMS
from stacks import fresh_python
from trainmanifests import find, make_manifest

RECIPES = {r.name: r for r in catalog.all_recipes() if not r.is_bridge}  # bridge/*: below


def script(recipe: str) -> Path:
    return REPO / recipe / RECIPES[recipe].data["entrypoint"]


def run_entry(recipe: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """The recipe's entrypoint as the job (or launch.sh) runs it, in a bare environment."""
    return subprocess.run([sys.executable, str(script(recipe)), *args], capture_output=True,
                          text=True, timeout=120, cwd="/",
                          env={"PATH": os.environ["PATH"], "HOME": str(REPO), **env})


def one_line(text: str) -> str:
    assert text.endswith("\n") and text.count("\n") == 1, text
    assert text.startswith("llmb: ") and "Traceback" not in text
    return text[len("llmb: "):-1]


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_help_names_the_recipe_and_its_readme(recipe: str) -> None:
    done = run_entry(recipe, "--help")
    assert (done.returncode, done.stderr) == (0, "")
    lines = done.stdout.splitlines()
    assert lines[0] == f"usage: {script(recipe).name} [train --manifest PATH [--print-config]]"
    assert f"launch the {recipe} benchmark described by the environment" in done.stdout
    assert f"see {REPO / recipe / 'README.md'})" in done.stdout


@pytest.mark.parametrize("flag", ["-h", "help"])
def test_every_spelling_of_help(flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert entrypoint.main(REPO / "nemotron", [flag]) == 0
    out = capsys.readouterr()
    assert out.out.startswith("usage: ") and "launch the nemotron benchmark" in out.out
    assert out.err == ""


@pytest.mark.parametrize("args", [["--bogus"], ["Train"], ["--manifest", "m.json"],
                                  ["launch", "train"], ["x\ny"]])
def test_an_unknown_argument_is_one_line(args: list[str],
                                         capsys: pytest.CaptureFixture[str]) -> None:
    assert entrypoint.main(REPO / "llama3.1", args) == 2
    out = capsys.readouterr()
    assert out.out == ""
    assert one_line(out.err) == f"unknown argument {args[0]!r}; run with --help"


def write(path: Path, data: object | bytes) -> Path:
    path.write_bytes(data if isinstance(data, bytes) else json.dumps(data).encode())
    return path


@pytest.mark.parametrize(("make", "reason"), [
    (lambda d: d / "none.json", "cannot be read (No such file or directory)"),
    (lambda d: d, "cannot be read (Is a directory)"),
    (lambda d: write(d / "m.json", b'{"schema": 1,'), "is not valid JSON (Expecting property "
                                                      "name enclosed in double quotes"),
    (lambda d: write(d / "m.json", ["not", "an", "object"]), "is not a JSON object"),
    (lambda d: write(d / "m.json", {"schema": 2}), "has schema=2, which is not supported; "
                                                   "supported: 1"),
    (lambda d: write(d / "m.json", b" " * (1 << 20) + b"{}"),
     "is larger than 1048576 bytes: not a run manifest"),
    (lambda d: Path("/dev/zero"), "is not a regular file"),
])
@pytest.mark.parametrize("print_config", [False, True])
def test_a_manifest_that_cannot_be_read_is_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], make, reason: str,
        print_config: bool) -> None:
    path = make(tmp_path)
    args = ["train", "--manifest", str(path)] + (["--print-config"] if print_config else [])
    assert entrypoint.main(REPO / "llama3.1", args) == 2
    out = capsys.readouterr()
    assert out.out == ""
    assert one_line(out.err).startswith(f"manifest {path} {reason}")


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_a_smoke_manifest_has_no_config_to_print(tmp_path: Path, recipe: str) -> None:
    """As the job runs it, through each recipe's own entrypoint script."""
    defaults = RECIPES[recipe].defaults
    row = RECIPES[recipe].scales(defaults["model_size"], defaults["dtype"], defaults["gpu_type"])
    m = make_manifest(*find(recipe, defaults["model_size"], defaults["dtype"],
                            defaults["gpu_type"], row[0]), smoke_test=True)
    path = write(tmp_path / "llmb_manifest.json", m)
    done = run_entry(recipe, "train", "--manifest", str(path), "--print-config",
                     PYTHONPATH="")
    assert (done.returncode, done.stdout) == (2, "")
    assert one_line(done.stderr) == (
        f"manifest {path} is a SMOKE_TEST run: it trains a tiny PyTorch model, no NeMo recipe; "
        "--print-config needs a benchmark manifest")


@pytest.mark.parametrize(("recipe_dir", "env", "message"), [
    (REPO / "llama3.1", {}, "LLMB_INSTALL is not set; set it to your install root"),
    ("{tmp}", {}, "cannot read {tmp}/metadata.yaml: No such file or directory"),
])
def test_a_launch_that_cannot_be_built_is_one_line_without_nemo_run(
        tmp_path: Path, recipe_dir: Path | str, env: dict[str, str], message: str) -> None:
    """No arguments: the login-node launch from the environment, refused before nemo-run."""
    folder = str(recipe_dir).format(tmp=tmp_path)
    done, heavy = fresh_python("from llmb import entrypoint\n"
                               f"status = entrypoint.main({folder!r}, [])", env)
    assert (done.returncode, done.stdout, heavy) == (2, "", [])
    assert one_line(done.stderr) == message.format(tmp=tmp_path)


def test_train_without_its_manifest_is_one_line(capsys):
    assert entrypoint.main(REPO / "llama3.1", ["train"]) == 2
    assert capsys.readouterr().err == (
        "llmb: train: the following arguments are required: --manifest; usage: train "
        "--manifest PATH [--print-config]\n")


def test_smoke_test_must_be_true_not_a_truthy_string(tmp_path, capsys):
    """A manifest's options.smoke_test is a JSON boolean: the string "false" is no smoke run."""
    path = tmp_path / "llmb_manifest.json"
    path.write_text(json.dumps({"schema": 1, "options": {"smoke_test": "false"}}))
    code = entrypoint.main(REPO / "llama3.1", ["train", "--manifest", str(path),
                                               "--print-config"])
    assert "is a SMOKE_TEST run" not in capsys.readouterr().err and code != 0


def test_dry_runs_print_each_header_and_count_what_failed(capsys, monkeypatch) -> None:
    """llmb-run's dry runs of one recipe in one process: a run that cannot be launched is its
    one line, and the others go on; the environment is the process's own again afterwards."""
    monkeypatch.setenv("KEPT", "1")
    runs = [{"header": f"llmb-run: [{i}/2] run {i}",
             "env": {"DRY_RUN": "true", "GPU_TYPE": "h100", "MODEL_SIZE": "999b"}}
            for i in (1, 2)]
    assert entrypoint.dry_runs(REPO / "nemotron", runs) == 2
    out = capsys.readouterr()
    assert out.out == "llmb-run: [1/2] run 1\nllmb-run: [2/2] run 2\n"
    errors = out.err.splitlines()
    assert len(errors) == 2 and all(e.startswith("llmb: ") for e in errors)
    assert os.environ.get("KEPT") == "1" and "MODEL_SIZE" not in os.environ


def test_dry_runs_are_dry_runs_only(capsys) -> None:
    runs = [{"header": "h", "env": {"GPU_TYPE": "h100"}}]
    with pytest.raises(entrypoint.UsageError):
        entrypoint.dry_runs(REPO / "nemotron", runs)


@pytest.mark.parametrize("dry_run", ["true", "false"])
def test_launch_sh_with_its_reader_gone_is_141_as_every_front(tmp_path: Path,
                                                              dry_run: str) -> None:
    """`launch.sh | head` once head has gone: 141 and nothing on stderr, not "submission
    failed: BrokenPipeError" and 1 (the job, if submitted, is in the shim's log)."""
    install = tmp_path / "install"
    (install / "images").mkdir(parents=True)
    (install / "images" / "nvidia+nemo+25.04.01.sqsh").touch()
    env = {k: v for k, v in os.environ.items() if k not in ("STAGE_PATH", "CONDA_PREFIX")}
    env.update(PATH=f"{SHIMS}:{Path(sys.executable).parent}:{env['PATH']}",
               VIRTUAL_ENV=str(Path(sys.executable).parent.parent), LLMB_INSTALL=str(install),
               SHIM_LOG=str(tmp_path / "shim.log"), NEMORUN_HOME=str(tmp_path / "nemo_run"),
               SBATCH_ACCOUNT="acct", SBATCH_PARTITION="batch", GPU_TYPE="h100",
               JOB_TOTAL_GPUS="16", DRY_RUN=dry_run, HF_TOKEN="hf_abcdefghijklmnopqrstuvwxyz")
    proc = into_closed_pipe(["bash", str(REPO / "nemotron" / "launch.sh")], env=env,
                            cwd=tmp_path)
    assert (proc.returncode, proc.stderr) == (141, "")
