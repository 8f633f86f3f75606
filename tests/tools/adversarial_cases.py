"""The hostile inputs of `make adversarial` (tests/tools/adversarial.py), per surface.

A case is a front's command line, environment and files, with `{marker}` (a file the payload
would create), `{work}` (the case's scratch folder) and `{install}` (the throw-away install) put
in when it runs. Values come from VALUES: empty and blank, option look-alikes, shell payloads,
control and direction characters, other scripts' digits, paths to secrets and special files,
huge and non-finite numbers, very long text. Each surface's generator pairs them with what the
surface reads (a variable, a flag, a file's field or line).
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import runinstall
from paths import REPO

CANARY = "hf_CanaryTokenNeverShown0123456789abcdef"
PAYLOADS = ("$(touch {marker})", "`touch {marker}`", "x; touch {marker}", "x' ; touch {marker} #")
VALUES: tuple[str, ...] = (
    "", " ", "-", "--", "--help", "-h", *PAYLOADS, "a\nb", "a\rb", "\x1b[31mred", "tab\there",
    "\u202egpu", "\uff48100", "\u0668", "\u00b2", "H100", "../../../etc/passwd", "/etc/shadow",
    "/proc/self/environ", "/dev/zero", "9" * 400, "-1", "0", "1e309", "nan", "inf", "x" * 70_000,
    "%s%n", "{0}", "*", "~root",
)


@dataclass(frozen=True)
class Site:
    """The throw-away install every case runs against."""

    install: Path
    python: str


@dataclass(frozen=True)
class Case:
    surface: str
    name: str
    argv: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    files: dict[str, bytes] = field(default_factory=dict)
    cwd: str = "{install}"
    max_error_lines: int = 2  # the error and one hint

    def build(self, site: Site, work: Path, marker: Path
              ) -> tuple[list[str], dict[str, str], Path]:
        def put(text: str) -> str:
            return (text.replace("{marker}", str(marker)).replace("{work}", str(work))
                    .replace("{install}", str(site.install)))

        for rel, data in self.files.items():
            path = work / put(rel)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data.replace(b"{marker}", str(marker).encode()))
        env = {k: put(v) for k, v in self.env.items()}
        return [put(a) for a in self.argv], env, Path(put(self.cwd))


def make_site(root: Path) -> Site:
    """An h100 install with the 25.04 Llama 3.1 and Nemotron-4 and the Megatron-Bridge Qwen3,
    and one Exemplar suite (planned, not run), so that `suite report --baseline` reads the
    file it is given."""
    from llmb.llmbrun import clusterconfig
    from llmb.llmbrun.suite import record, sets

    install = runinstall.make_install(root / "install", token=CANARY,
                                      workloads=(*runinstall.WORKLOADS, "pretrain_qwen3"))
    images = install / "images"
    images.mkdir(exist_ok=True)
    (images / "nvidia+nemo+25.04.01.sqsh").write_bytes(b"hsqs" + b"\0" * 60)
    cfg = clusterconfig.find_config(str(install / "cluster_config.yaml"), {})
    configs, found = sets.plan_set(cfg, sets.load("exemplar"), 512, {})
    record.create(cfg, record.plan_data("adversarial", configs, [],
                                        {"repeats": 1, "set": found}))
    return Site(install, sys.executable)


def base_env(**extra: str) -> dict[str, str]:
    venv = str(Path(sys.executable).parent.parent)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "{work}", "LANG": "C.UTF-8",
           "VIRTUAL_ENV": venv, "LLMB_INSTALL": "{install}", "LLMB_PYTHON": sys.executable,
           "HF_TOKEN": CANARY}
    env.update(extra)
    return env


def label(value: str) -> str:
    """A short printable name for a value."""
    text = value if len(value) <= 24 else f"{value[:12]}...({len(value)})"
    return ascii(text)


# --- launch.sh -------------------------------------------------------------------------------

LAUNCH_VARS = ("GPU_TYPE", "DTYPE", "MODEL_SIZE", "JOB_TOTAL_GPUS", "SBATCH_ACCOUNT",
               "SBATCH_PARTITION", "SBATCH_GPUS_PER_NODE", "TIME_LIMIT", "MAX_STEPS",
               "ENABLE_PROFILE", "CLUSTER_TYPE", "ADDITIONAL_SLURM_PARAMS", "LLMB_INSTALL")


def launch_cases(recipe: str = "llama3.1", surface: str = "launch.sh",
                 defaults: dict[str, str] | None = None) -> Iterator[Case]:
    settings = {"SBATCH_ACCOUNT": "acct", "SBATCH_PARTITION": "batch", "DRY_RUN": "true",
                "JOB_TOTAL_GPUS": "16", "GPU_TYPE": "h100", "MODEL_SIZE": "8b", "DTYPE": "fp8",
                **(defaults or {})}
    script = str(REPO / recipe / "launch.sh")
    for var in LAUNCH_VARS:
        for value in VALUES:
            if "\x00" in value:
                continue
            env = base_env(**{**settings, var: value})
            yield Case(surface, f"{var}={label(value)}", ("bash", script), env, cwd="{work}")


# --- llmb-run -------------------------------------------------------------------------------

LLMB_RUN_FLAGS: tuple[tuple[str, ...], ...] = (
    ("single", "-w", "{}", "-s", "8b", "--dtype", "fp8", "--scale", "16", "--dry-run"),
    ("single", "-w", "pretrain_llama3.1", "-s", "{}", "--dtype", "fp8", "--scale", "16",
     "--dry-run"),
    ("single", "-w", "pretrain_llama3.1", "-s", "8b", "--dtype", "{}", "--scale", "16",
     "--dry-run"),
    ("single", "-w", "pretrain_llama3.1", "-s", "8b", "--dtype", "fp8", "--scale", "{}",
     "--dry-run"),
    ("single", "-w", "pretrain_llama3.1", "-s", "8b", "--dtype", "fp8", "--scale", "16",
     "--dry-run", "--env", "{}"),
    ("single", "-w", "pretrain_llama3.1", "-s", "8b", "--dtype", "fp8", "--scale", "16",
     "--dry-run", "--exclude", "{}"),
    ("status", "--format", "{}"),
    ("archive", "--output", "{}"),
)


def llmb_run_cases() -> Iterator[Case]:
    script = str(REPO / "installer" / "llmb-run")
    for flags in LLMB_RUN_FLAGS:
        for value in VALUES:
            argv = tuple(value if a == "{}" else a for a in flags)
            flag = flags[flags.index("{}") - 1]
            yield Case("llmb-run", f"{flags[0]} {flag} {label(value)}", ("bash", script, *argv),
                       base_env())


def bulk_cases() -> Iterator[Case]:
    script = str(REPO / "installer" / "llmb-run")
    bodies = [b"", b"\x00\x01\x02", b"root:$6$salt$hash:19000:0:99999:7:::\n" * 3,
              b"- workload: pretrain_llama3.1\n  size: 8b\n  dtype: [fp8]\n  scales: [16]\n"
              b"  repeats: 99999999999999999999\n",
              b"a: &a [*a]\n", b"- " * 100_000, b"{" * 10_000, b"x: $(touch {marker})\n",
              b"- workload: '$(touch {marker})'\n", ("- workload: \u0661\n").encode()]
    for i, body in enumerate(bodies):
        yield Case("bulk", f"file {i}", ("bash", script, "bulk", "{work}/sweep.yaml",
                                         "--dry-run"), base_env(), {"sweep.yaml": body})
    for path in ("/etc/shadow", "/dev/zero", "/proc/self/environ", "{work}", "{install}/.hf_token"):
        yield Case("bulk", f"path {path}", ("bash", script, "bulk", path, "--dry-run"),
                   base_env())


# --- the analyzer ---------------------------------------------------------------------------

LOG_LINES = (
    b"Training epoch 0, iteration 11/49 | train_step_timing in s: " + b"9" * 100_000 + b"_\n",
    b"iteration 1/ 50 | elapsed time per iteration (ms): " + b"1" * 100_000 + b"x |\n",
    b"Step Time : " + b" " * 200_000 + b"s GPU utilization: 1.0MODEL_TFLOP/s/GPU\n",
    b"Training epoch 0, iteration 1/49 |" + b" a: 1 |" * 50_000 + b"\n",
    b"\xff\xfe" + "Training epoch 0".encode("utf-16-le"),
    b"train_step_timing in s: nan | TFLOPS_per_GPU: inf\n" * 50,
    b"x" * 5_000_000,
    b"\x00" * 100_000,
    b"NCCL INFO" + b" " * 200_000 + b"via NET/IB\n",
)


def analyzer_cases() -> Iterator[Case]:
    parse = str(REPO / "common" / "parse_train_timing.sh")
    for i, body in enumerate(LOG_LINES):
        yield Case("analyzer", f"log {i}", ("bash", parse, "--format=json", "{work}/logs"),
                   base_env(), {"logs/run/log-x_1_0.out": body})
    for flag in ("--window", "--tolerance", "--format", "--gpu-type", "--baseline", "--report"):
        for value in VALUES:
            yield Case("analyzer", f"{flag}={label(value)}",
                       ("bash", parse, f"{flag}={value}", "{work}"), base_env())


# --- the installer --------------------------------------------------------------------------

def installer_cases() -> Iterator[Case]:
    installer = str(REPO / "installer" / "install.sh")
    bodies = [b"", b"- 1\n", b"install_path: '$(touch {marker})'\n", b"gpu_type: " + b"9" * 400,
              b"a: &a [*a, *a]\nb: &b [*a, *a]\nc: [*b, *b, *b]\n", b"\t\x00",
              b"root:x:0:0:root:/root:/bin/bash\n", b"install_path: /etc\ngpu_type: h100\n",
              b"hf_token: '" + CANARY.encode() + b"'\ninstall_path: [1]\n"]
    for i, body in enumerate(bodies):
        yield Case("installer", f"config {i}", ("bash", installer, "--config",
                                                "{work}/config.yaml"), base_env(),
                   {"config.yaml": body})
    for path in ("/etc/shadow", "/dev/zero", "{work}", "-", "--"):
        yield Case("installer", f"--config {path}", ("bash", installer, "--config", path),
                   base_env())


# --- a Megatron-Bridge recipe's launch.sh ---------------------------------------------------

BRIDGE_VARS = ("GPU_TYPE", "DTYPE", "FP8_RECIPE", "MODEL_SIZE", "JOB_TOTAL_GPUS", "TP", "GBS",
               "SMOKE_TEST")


def bridge_cases() -> Iterator[Case]:
    settings = {"SBATCH_ACCOUNT": "acct", "SBATCH_PARTITION": "batch", "DRY_RUN": "true",
                "JOB_TOTAL_GPUS": "512", "GPU_TYPE": "gb300", "MODEL_SIZE": "235b",
                "DTYPE": "fp8"}
    script = str(REPO / "bridge" / "qwen3" / "launch.sh")
    for var in BRIDGE_VARS:
        for value in VALUES:
            yield Case("bridge launch.sh", f"{var}={label(value)}", ("bash", script),
                       base_env(**{**settings, var: value}), cwd="{work}")


# --- llmb-run suite report --baseline FILE ------------------------------------------------------

SUITE_BASELINES = (
    b"", b"schema: 1\n", b"\x00\xff" * 100, b"[1, 2]\n", b"a: &a [*a]\n",
    b"schema: 1\nset: exemplar\nfigure: step_time_s\nscale: 512\nbaselines:\n  h100:\n"
    b"    pretrain_qwen3_235b: {bf16: .nan}\n",
    b"schema: 1\nset: exemplar\nfigure: step_time_s\nscale: 512\nbaselines:\n  h100:\n"
    b"    pretrain_qwen3_235b: {bf16: -1}\n",
    b"schema: 1\nset: exemplar\nfigure: step_time_s\nscale: 512\nbaselines:\n  h100:\n"
    b"    '$(touch {marker})': {bf16: 1}\n",
    b"schema: 1\nset: exemplar\nfigure: step_time_s\nscale: 512\nbaselines:\n  h100:\n"
    b"    pretrain_qwen3_235b: {bf16: " + b"9" * 5000 + b"}\n",
    b"schema: 1\nschema: 2\n", b"- " * 50_000,
)


def suite_baseline_cases() -> Iterator[Case]:
    script = str(REPO / "installer" / "llmb-run")
    for i, body in enumerate(SUITE_BASELINES):
        yield Case("suite baseline", f"file {i}", ("bash", script, "suite", "report",
                                                   "--baseline", "{work}/b.yaml"),
                   base_env(), {"b.yaml": body})
    for path in ("/etc/shadow", "/dev/zero", "/proc/self/environ", "{work}", "-", "--"):
        yield Case("suite baseline", f"path {path}",
                   ("bash", script, "suite", "report", "--baseline", path), base_env())


SURFACES: tuple[Callable[[], Iterator[Case]], ...] = (
    launch_cases, bridge_cases, llmb_run_cases, bulk_cases, analyzer_cases, installer_cases,
    suite_baseline_cases)


def all_cases() -> list[Case]:
    if shutil.which("bash") is None:
        raise SystemExit("adversarial: bash is not on PATH")
    return [case for surface in SURFACES for case in surface()]
