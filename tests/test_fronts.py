"""Every Python front of llmb, as a shell starts it, through the same failures, held to one
table of exit statuses: llmb-run (installer/llmb-run), the analyzer
(common/parse_train_timing.sh), the installer (installer/install.sh) and launch.sh's entrypoint
(a recipe's pretrain_*.py, llmb.entrypoint). Each ends by llmb.shared.front's rule: one line
`<prog>: <message>` on stderr (nothing when stdout's reader went away, nor where stderr is
closed) and the status below."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from fakeinstall import make_install
from fronts import (
    PROBE_MESSAGE,
    UNICODE_LINE,
    failing_front,
    interrupted_front,
    into_closed_pipe,
    signalled_front,
    unicode_front,
)
from paths import REPO, SHIMS

ERROR_STATUS = 7  # an LlmbError's own status, whatever it is

# failure -> the exit status of each front:
#                                      llmb-run  analyzer  installer  entrypoint
STATUSES: dict[str, tuple[int, int, int, int]] = {
    "a usage error":                   (2,       2,        2,         2),
    # the entrypoint's manifest is the request it was given: a bad request, 2
    "a missing file":                  (1,       1,        1,         2),
    "an LlmbError":                    (ERROR_STATUS,) * 4,
    "Ctrl-C":                          (130,     130,      130,       130),
    "stdout's reader gone":            (141,     141,      141,       141),
    "SIGTERM":                         (143,     143,      143,       143),
    "SIGHUP":                          (129,     129,      129,       129),
    # >&-: refused before any work, one line on stderr
    "stdout closed":                   (1,       1,        1,         1),
    # 2>&- on a usage error: its status, its line nowhere (never on stdout)
    "stderr closed":                   (2,       2,        2,         2),
    # stdout is /dev/full: one line naming what could not be written
    "a full disk":                     (1,       1,        1,         1),
    # PYTHONIOENCODING=ascii: the characters escaped on stdout and stderr, the error's status
    "an encoding without the text":    (ERROR_STATUS,) * 4,
    # --opt=--: argparse would take the value for the end of the options
    "an option given --":              (2,       2,        2,         2),
    # PYTHONWARNINGS=error: the output printed, no warning (a file left open, ...)
    "warnings as errors":              (0,       0,        0,         0),
}
SILENT = ("stdout's reader gone", "stderr closed")
FRONTS = ("llmb-run", "analyzer", "installer", "entrypoint")


@dataclass(frozen=True)
class Front:
    """How a shell starts the front, the arguments of each failure, and what is probed."""

    prog: str  # what starts its lines
    command: list[str]
    usage: list[str]
    missing: Callable[[Path], list[str]]
    output: Callable[[Path], list[str]]  # arguments that print something
    module: str  # its Python module, with `main`
    probed: str  # a function of that module its work calls
    probe_argv: Callable[[Path], list[str]]
    leading: tuple[str, ...] = ()  # main's arguments ahead of argv
    interrupted: str = "interrupted"


def installer_config(tmp: Path) -> list[str]:
    cfg = tmp / "config.yaml"
    cfg.write_text(yaml.safe_dump({
        "install_path": str(tmp / "install"), "gpu_type": "h100",
        "workloads": ["pretrain_nemotron4"], "slurm": {"account": "a", "partition": "batch"},
        "venv": {"reuse": sys.prefix}, "image": {"method": "local"}}))
    return ["--config", str(cfg), "--dry-run"]


LOGS = REPO / "tests" / "fixtures" / "logs" / "experiments"
FRONT = {
    "llmb-run": Front(
        "llmb-run", ["bash", str(REPO / "installer" / "llmb-run")], ["list", "--bogus"],
        lambda t: ["--config", str(t / "none.yaml"), "list"], lambda t: ["list"],
        "llmb.llmbrun.cli", "find_config", lambda t: ["list"]),
    "analyzer": Front(
        "parse_train_timing.sh", [str(REPO / "common" / "parse_train_timing.sh")], ["--bogus"],
        lambda t: [str(t / "none")], lambda t: [str(LOGS)],
        "llmb.analysis.cli", "analyze_tree", lambda t: [str(LOGS)]),
    "installer": Front(
        "llmb-install", ["bash", str(REPO / "installer" / "install.sh")], ["--bogus"],
        lambda t: ["--config", str(t / "none.yaml")], installer_config,
        "llmb.install.cli", "plan_from_config", lambda t: ["--config", str(t / "c.yaml")],
        interrupted="interrupted; run the same command again to resume"),
    "entrypoint": Front(
        "llmb", [sys.executable, str(REPO / "llama3.1" / "pretrain_llama31.py")], ["--bogus"],
        lambda t: ["train", "--manifest", str(t / "none.json")], lambda t: ["--help"],
        "llmb.entrypoint", "login", lambda t: [], leading=(str(REPO / "llama3.1"),)),
}


DASHED = {"llmb-run": ["archive", "--output=--"], "analyzer": ["--baseline=--"],
          "installer": ["--config=--"], "entrypoint": ["train", "--manifest=--"]}


def environment(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("LLMB_ANALYZE_PROG", "HF_TOKEN", "VIRTUAL_ENV", "STAGE_PATH")}
    env.update(LLMB_INSTALL=str(make_install(tmp / "llmb")), LLMB_PYTHON=sys.executable,
               PATH=f"{SHIMS}:{env['PATH']}", LLMB_IMAGE_SPACE_GB="0")
    return env


def ended(name: str, failure: str, tmp: Path, env: dict[str, str]
          ) -> subprocess.CompletedProcess[str]:
    """The front's process after this failure."""
    front = FRONT[name]
    def shell(args: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*front.command, *args], capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, env=env, cwd=tmp, timeout=120)

    if failure == "a usage error":
        return shell(front.usage)
    if failure == "an option given --":
        return shell(DASHED[name])
    if failure == "stderr closed":
        return subprocess.run([*front.command, *front.usage],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                              stdin=subprocess.DEVNULL, env=env, cwd=tmp, timeout=120,
                              preexec_fn=lambda: os.close(2))
    if failure == "stdout closed":
        return subprocess.run([*front.command, *front.output(tmp)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
                              env=env, cwd=tmp, timeout=120, preexec_fn=lambda: os.close(1))
    if failure == "a full disk":
        with open("/dev/full", "w") as full:
            return subprocess.run([*front.command, *front.output(tmp)], stdout=full,
                                  stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
                                  env=env, cwd=tmp, timeout=120)
    if failure == "warnings as errors":
        return shell(front.output(tmp)) if env.get("PYTHONWARNINGS") else ended(
            name, failure, tmp, {**env, "PYTHONWARNINGS": "error"})
    if failure == "a missing file":
        return shell(front.missing(tmp))
    if failure == "stdout's reader gone":
        return into_closed_pipe([*front.command, *front.output(tmp)], env=env, cwd=tmp)
    argv = front.probe_argv(tmp)
    if failure.startswith("SIG"):
        return signalled_front(front.module, front.probed, failure, argv, env=env,
                               leading=front.leading)
    if failure == "an encoding without the text":
        return unicode_front(front.module, front.probed, argv, leading=front.leading,
                             env={**env, "PYTHONIOENCODING": "ascii"})
    if failure == "an LlmbError":
        return failing_front(front.module, front.probed, ERROR_STATUS, argv, env=env,
                             leading=front.leading)
    return interrupted_front(front.module, front.probed, argv, env=env, leading=front.leading)


@pytest.mark.parametrize("failure", sorted(STATUSES))
def test_every_front_ends_each_failure_by_the_one_table(tmp_path: Path, failure: str) -> None:
    env = environment(tmp_path)
    for name, expected in zip(FRONTS, STATUSES[failure], strict=True):
        front = FRONT[name]
        proc = ended(name, failure, tmp_path, env)
        assert proc.returncode == expected, (name, failure, proc.stderr)
        if failure in SILENT:
            assert not proc.stderr, name
            assert f"{front.prog}:" not in (proc.stdout or ""), name
            continue
        if failure == "warnings as errors":
            assert proc.stderr == "" and proc.stdout, (name, proc.stderr)
            continue
        lines = proc.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"{front.prog}: "), (name, proc.stderr)
        assert "Traceback" not in proc.stderr
        said = lines[0].removeprefix(f"{front.prog}: ")
        escaped = UNICODE_LINE.encode("ascii", "backslashreplace").decode()
        assert said == {
            "an LlmbError": PROBE_MESSAGE,
            "Ctrl-C": front.interrupted,
            "SIGTERM": front.interrupted.replace("interrupted", "stopped by SIGTERM"),
            "SIGHUP": front.interrupted.replace("interrupted", "stopped by SIGHUP"),
            "stdout closed": ("stdout is closed (>&-): nothing printed could be read; send it "
                              "somewhere, e.g. >/dev/null to discard it"),
            "a full disk": "cannot write the output: No space left on device",
            "an option given --": (f"{DASHED[name][-1]} gives {DASHED[name][-1][:-3]} no value "
                                   "('--' marks the end of the options); write "
                                   f"{DASHED[name][-1][:-3]}=VALUE (a path named -- as ./--)"),
            "an encoding without the text": f"{PROBE_MESSAGE} at {escaped}",
        }.get(failure, said), (name, failure)
        if failure == "an encoding without the text":
            assert proc.stdout == escaped + "\n", name
