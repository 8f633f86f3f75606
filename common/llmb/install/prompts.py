"""The installer's questions: every multiple-choice one a numbered list with a line per choice.

    GPU type:
       1) h100   8 GPUs per node, x86_64, 989/1979 dense TFLOPS per GPU (BF16/FP8)
       2) b200   ...
    GPU type (a number or a name) (default: h100):

An answer is a number of the list or a name (workloads: several, space or comma separated, or
`all`); Enter takes the default; anything else is refused and asked again, with the reason. The
descriptions come from the data (common/gpus.yaml, each recipe's metadata.yaml, what sinfo says
about a partition) where it has them.

`questions()` asks them all and returns the answers as an unchecked Plan; llmb.install.cli checks
it. With `record` (install.sh --record FILE) the Hugging Face token is not asked for: the token
is read at install time from HF_TOKEN, or from a file whose path is asked and recorded instead.
"""

from __future__ import annotations

import re
import shutil
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO, TypedDict

from llmb.install import fields
from llmb.install.fields import InstallError
from llmb.install.steps import Plan
from llmb.recipes import catalog
from llmb.shared import redact, shellsafe, slurmquery, values
from llmb.shared.values import shown

Ask = Callable[[str], str]
Check = Callable[[str], str | None]
CLUSTER_TYPES = {  # what each install cluster type means for the install
    "slurm": "Slurm with enroot/pyxis: sbatch jobs, the image imported as a squashfs file",
    "runai": "Run:ai: jobs through its API; the cluster pulls the image itself",
}
VENV_KINDS = {"venv": "python -m venv, one per workload under $LLMB_INSTALL/venvs",
              "conda": "a conda environment per workload"}


@dataclass(frozen=True)
class Choice:
    name: str
    description: str


def ask(input_fn: Ask, question: str, default: str | None = None,
        choices: list[str] | None = None, check: Check | None = None, out=None) -> str:
    """Ask until the answer is valid; an empty answer takes the default."""
    out = out or sys.stdout
    hint = f" [{'/'.join(choices)}]" if choices and len(choices) <= 6 else ""
    default_hint = f" (default: {default})" if default else ""
    while True:
        try:
            answer = input_fn(f"{question}{hint}{default_hint}: ").strip()
        except EOFError:
            raise InstallError(f"no answer to '{question}' (input ended)") from None
        if not answer and default is not None:
            answer = default
        problem = None
        if not answer:
            problem = "an answer is required"
        elif choices and answer not in choices:
            problem = f"{shown(answer)} is not one of: {', '.join(choices)}"
        elif check:
            problem = check(answer)
        if problem is None:
            return answer
        print(f"  {redact.for_people(problem)}", file=out)


def answer_check(check: Callable[..., object], *args: object) -> Check:
    """A fields/shellsafe check as an `ask` check: its refusal is the problem shown."""
    def run(answer: str) -> str | None:
        try:
            check(*args[:1], answer, *args[1:])
        except values.BadValue as err:
            return str(err)
        return None

    return run


def ask_secret(secret_fn: Ask, question: str, name: str, out=None) -> str:
    """A secret typed at a prompt that does not echo; asked again until it can be a token."""
    out = out or sys.stdout
    while True:
        try:
            answer = secret_fn(f"{question}: ").strip()
        except EOFError:
            raise InstallError(f"no answer to '{question}' (input ended)") from None
        if not answer:
            print("  an answer is required", file=out)
            continue
        try:
            return shellsafe.hf_token(name, answer)
        except values.BadValue as err:
            print(f"  {err}", file=out)


# --- numbered choices -------------------------------------------------------------------------

def picked(answer: str, choices: Sequence[Choice], many: bool) -> list[str] | str:
    """The names an answer picks (numbers or names; `all` with many), or why it picks none."""
    names = [c.name for c in choices]
    words = [w for w in re.split(r"[\s,]+", answer.strip()) if w]
    if many and [w.lower() for w in words] == ["all"]:
        return names
    if not many and len(words) != 1:
        return f"{shown(answer)}: give one number or name"
    out = []
    for word in words:
        if re.fullmatch(r"[0-9]+", word) and 1 <= int(word) <= len(names):
            out.append(names[int(word) - 1])
            continue
        match = [n for n in names if n.lower() == word.lower()]
        if not match:
            return (f"{shown(word)} is not one of: {', '.join(names)} (or their numbers "
                    f"1-{len(names)}{', or all' if many else ''})")
        out.append(match[0])
    return list(dict.fromkeys(out))


def choose(input_fn: Ask, question: str, choices: Sequence[Choice], default: str | None,
           many: bool = False, check: Check | None = None, out=None) -> list[str]:
    """A numbered list, one line per choice; the names picked (one unless `many`)."""
    out = out or sys.stdout
    print(f"{question}:", file=out)
    width = max(len(c.name) for c in choices)
    for i, c in enumerate(choices, 1):
        print(shown(f"  {i:>2}) {c.name.ljust(width)}  {c.description}".rstrip()),
              file=out)  # what sinfo and sacctmgr said, escaped

    def valid(answer: str) -> str | None:
        found = picked(answer, choices, many)
        if isinstance(found, str):
            return found
        return next((p for p in map(check, found) if p), None) if check else None

    hint = "numbers or names, or all" if many else "a number or a name"
    answer = ask(input_fn, f"{question} ({hint})", default, check=valid, out=out)
    found = picked(answer, choices, many)
    assert isinstance(found, list)
    return found


class Found(TypedDict):
    """What the cluster says about itself (llmb.install.cli.discover); None: not known."""

    partitions: list[slurmquery.Partition] | None
    accounts: list[str] | None


def gpu_choices() -> list[Choice]:
    """Every GPU type gpus.yaml knows; one no recipe publishes says what it serves."""
    out, only = [], fields.screen_only_gpu_types()
    for g in catalog.all_gpu_types():
        out.append(Choice(g.name, f"{g.gpus_per_node} GPUs per node, {g.arch}, "
                                f"{g.peak_tflops['bf16']:g}/{g.peak_tflops['fp8']:g} dense "
                                "TFLOPS per GPU (BF16/FP8)"
                                + (f"; {fields.SCREEN_ONLY}" if g.name in only else "")))
    return out


def workload_choices(gpu_type: str, cluster_type: str) -> list[Choice]:
    out = []
    for r in catalog.all_recipes():
        if gpu_type not in r.gpu_types or cluster_type not in r.data["cluster_types"]:
            continue
        sizes = sorted({c.model_size for c in r.rows(gpu_type=gpu_type)}, key=r.sizes.index)
        token = "; needs a Hugging Face token" if r.data["requires_hf_token"] else ""
        out.append(Choice(r.workload, f"{r.data['name']} {', '.join(sizes)} on {gpu_type}"
                                      f"{token}"))
    return out


def partition_choices(parts: Sequence[slurmquery.Partition]) -> list[Choice]:
    """sinfo's partitions (llmb.shared.slurmquery.Partition), described by what it says."""
    out = []
    for p in parts:
        gpus = f"{p.gpus} GPUs per node ({p.gres})" if p.gpus else "no GPUs"
        state = "" if p.available else ", not up"
        out.append(Choice(p.name, f"{'the default, ' if p.default else ''}{gpus}{state}"))
    return out


def import_choices(local_enroot: bool) -> list[Choice]:
    here = "enroot is on PATH here" if local_enroot else "enroot is not on PATH here"
    return [Choice("local", f"enroot on this node ({here})"),
            Choice("srun", "enroot on a compute node, through a short srun job on a "
                           "partition you choose next")]


# --- the questions ----------------------------------------------------------------------------

@dataclass
class Answers:
    plan: Plan
    token_file: str | None = None  # record: where the token will be read from (None: HF_TOKEN)


def token_file_check(answer: str) -> str | None:
    """A file that holds a Hugging Face token (read, never shown), by the rule replaying the
    recorded hf_token_file holds it to (llmb.install.fields.token_file)."""
    try:
        fields.token_file("", answer)
    except values.BadValue as err:
        return str(err)
    return None


def _slurm(input_fn: Ask, environ: Mapping[str, str], found: Found,
           out: TextIO | None, gpu: catalog.GpuType) -> tuple[dict[str, str | None], str]:
    """The Slurm answers (account, partitions, GRES) and the image method."""
    cfg: dict[str, str | None] = {}
    parts = found.get("partitions") or []
    gpu_parts = [p for p in parts if p.gpus]
    accounts = found.get("accounts")
    account_check = answer_check(shellsafe.slurm_name, "account", "account")
    cfg["account"] = choose(input_fn, "Slurm account", [
        Choice(a, "an account sacctmgr lists for you") for a in accounts], accounts[0],
        check=account_check, out=out)[0] if accounts else ask(
        input_fn, "Slurm account", environ.get("SBATCH_ACCOUNT"), check=account_check, out=out)
    part_check = answer_check(shellsafe.slurm_name, "partition", "partition", True)
    default_part = next((p.name for p in gpu_parts if p.default),
                        gpu_parts[0].name if gpu_parts else environ.get("SBATCH_PARTITION"))

    def partition(question: str, default: str | None) -> str:
        if parts:
            return choose(input_fn, question, partition_choices(parts), default,
                          check=part_check, out=out)[0]
        return ask(input_fn, question, default, check=part_check, out=out)

    part = cfg["partition"] = partition("GPU partition", default_part)
    chosen = next((p for p in parts if p.name == part), None)
    gres = ask(input_fn, "GPU GRES request per node (none: the cluster needs none)",
               f"gpu:{chosen.gpus}" if chosen and chosen.gpus else "none",
               check=answer_check(fields.gres, "GRES", gpu), out=out)
    cfg["gres"] = fields.gres("GRES", gres, gpu)
    local_enroot = shutil.which("enroot") is not None
    method = choose(input_fn, "Where to import the image", import_choices(local_enroot),
                    "local" if local_enroot else "srun", out=out)[0]
    cpu_parts = [p.name for p in parts if not p.gpus]
    cfg["cpu_partition"] = part if method == "local" else partition(
        "Partition for the image import (CPU nodes are fine)", cpu_parts[0] if cpu_parts
        else part)
    return cfg, method


def _token(secret_fn: Ask, input_fn: Ask, environ: Mapping[str, str], record: bool,
           out: TextIO | None) -> tuple[str | None, str | None]:
    """(the token, the file it is read from on replay) for a workload that needs one."""
    if environ.get("HF_TOKEN"):
        return environ["HF_TOKEN"], None
    if not record:
        return ask_secret(secret_fn, "HuggingFace token for Llama 3.1 (HF_TOKEN, not echoed)",
                          "the token", out), None
    print("  The token is not recorded: the install will read it from this file (or export "
          "HF_TOKEN before recording and replaying).", file=out)
    answer = ask(input_fn, "File holding the Hugging Face token",
                 str(Path.home() / ".hf_token"), check=token_file_check, out=out)
    path, token = fields.token_file("", answer)
    return token, path


def questions(input_fn: Ask, secret_fn: Ask, environ: Mapping[str, str],
              found: Found, record: bool = False, out=None) -> Answers:
    """Every question of an interactive install; the answers, not yet checked as a whole."""
    out = out or sys.stdout
    print("llmb installer: answer each question; Enter takes the default.", file=out)
    install = ask(input_fn, "Install directory (LLMB_INSTALL, on a shared file system)",
                  environ.get("LLMB_INSTALL") or str(Path.home() / "llmb"),
                  check=answer_check(fields.install_path, "install directory", "slurm"),
                  out=out)
    ctype = choose(input_fn, "Cluster type", [Choice(c, CLUSTER_TYPES[c])
                                              for c in catalog.INSTALL_CLUSTER_TYPES],
                   "slurm", out=out)[0]
    parts = found.get("partitions") or []
    models = [p.gpu_model for p in parts if p.gpus and p.gpu_model in catalog.gpu_types()]
    gpu_type = choose(input_fn, "GPU type", gpu_choices(), models[0] if models else "h100",
                      out=out)[0]
    offered = workload_choices(gpu_type, ctype)
    if offered:
        workloads = choose(input_fn, "Workloads to install", offered, "all", many=True, out=out)
    elif gpu_type in fields.screen_only_gpu_types():
        print(f"Workloads to install: none ({gpu_type}: {fields.SCREEN_ONLY}, and preflight)",
              file=out)
        workloads = []
    else:
        raise InstallError(f"no workload is published for gpu_type={gpu_type} on {ctype}")
    slurm_cfg: dict[str, str | None] = {}
    method = "skip"
    if ctype == "slurm":
        slurm_cfg, method = _slurm(input_fn, environ, found, out, catalog.get_gpu_type(gpu_type))
    kinds = ["venv", "conda"] if shutil.which("conda") else ["venv"]
    kind = choose(input_fn, "Python environment kind", [Choice(k, VENV_KINDS[k])
                                                        for k in kinds], "venv", out=out)[0]
    token = token_file = None
    if any(catalog.find_recipe(w).data["requires_hf_token"] for w in workloads):
        token, token_file = _token(secret_fn, input_fn, environ, record, out)
    plan = Plan(install_path=install, cluster_type=ctype, gpu_type=gpu_type,
                workloads=workloads, slurm=slurm_cfg, venv={"kind": kind},
                image={"method": method}, hf_token=token,
                token_source="the token in hf_token_file" if token_file else "HF_TOKEN")
    return Answers(plan, token_file)
