"""The llmb installer: interactive prompts or a YAML config -> a checked plan -> steps.

    installer/install.sh                       interactive (needs a terminal)
    installer/install.sh --config FILE         headless
    installer/install.sh --config FILE --dry-run   print the plan, change nothing

Every field is checked before anything is written (llmb.install.fields: types, the characters a
shell or Slurm cannot take, secrets kept out of cluster_config.yaml, an install path this user
can create). The steps (llmb.install.steps: layout, hf_token, venv:<w>, setup:<w>,
image:<file>, cluster_config, llmb_run) each check the disk to say whether they are done, so a
rerun after an interruption, a deletion or a change does what is missing and nothing else.
See installer/README.md for the config keys.
"""

from __future__ import annotations

import argparse
import getpass
import os
import shutil
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NoReturn, cast

from llmb.install import fields
from llmb.install import steps as installsteps
from llmb.install.steps import Plan, Step
from llmb.recipes import catalog
from llmb.shared import files, shellsafe, slurmquery, values
from llmb.shared.errors import LlmbError
from llmb.shared.values import shown

REPO = catalog.REPO_ROOT
VENV_KINDS = ("venv", "conda")
IMAGE_METHODS = ("local", "srun", "skip")
CONFIG_KEYS = {"install_path", "cluster_type", "gpu_type", "workloads", "slurm", "venv", "image",
               "hf_token_file", "env"}
SLURM_KEYS = {"account", "partition", "cpu_partition", "gres"}
VENV_KEYS = {"kind", "python", "system_site_packages", "reuse", "requirements", "pip_args"}
IMAGE_KEYS = {"method", "time_limit"}
DEFAULT_REQUIREMENTS = ["common/requirements/launch.txt"]


class InstallError(LlmbError):
    """A bad input or a failed step: one line for the user."""


# --- building and validating a plan ------------------------------------------------------------

def workload_keys() -> list[str]:
    return [r.workload for r in catalog.all_recipes()]


def validate_plan(plan: Plan, environ: Mapping[str, str] | None = None) -> Plan:
    """Check every field; raise InstallError naming the first bad one. Nothing is written."""
    try:
        return _validate(plan, os.environ if environ is None else environ)
    except values.BadValue as err:
        raise InstallError(str(err)) from None


def _validate(plan: Plan, environ: Mapping[str, str]) -> Plan:
    check = fields
    if not plan.install_path:
        raise InstallError("install_path is required (the LLMB_INSTALL directory)")
    plan.cluster_type = check.string("cluster_type", plan.cluster_type).lower()
    if plan.cluster_type not in catalog.INSTALL_CLUSTER_TYPES:
        raise InstallError(f"cluster_type={shown(plan.cluster_type)} is not supported; "
                           f"allowed: {', '.join(catalog.INSTALL_CLUSTER_TYPES)}")
    plan.gpu_type = check.string("gpu_type", plan.gpu_type).lower()
    if plan.gpu_type not in catalog.gpu_types():
        raise InstallError(f"gpu_type={shown(plan.gpu_type)} is not supported; allowed: "
                           f"{', '.join(catalog.gpu_types())}")
    plan.install_path = check.install_path("install_path", str(plan.install_path),
                                           plan.cluster_type)
    known = workload_keys()
    if not plan.workloads:
        raise InstallError(f"workloads is empty; choose from: {', '.join(known)}")
    for w in plan.workloads:
        if w not in known:
            raise InstallError(f"workloads: {shown(w)} is not a workload; allowed: "
                               f"{', '.join(known)}")
        recipe = catalog.find_recipe(w)
        if plan.gpu_type not in recipe.gpu_types:
            raise InstallError(f"workloads: {w} is not published for gpu_type={plan.gpu_type}; "
                               f"it runs on {', '.join(recipe.gpu_types)}")
        if plan.cluster_type not in recipe.data["cluster_types"]:
            raise InstallError(f"workloads: {w} does not support cluster_type="
                               f"{plan.cluster_type}; it supports "
                               f"{', '.join(recipe.data['cluster_types'])}")
    if plan.cluster_type == "slurm":
        _validate_slurm(plan)
    _validate_venv(plan)
    _validate_image(plan)
    needs_token = any(catalog.find_recipe(w).data["requires_hf_token"] for w in plan.workloads)
    if needs_token and not plan.hf_token:
        raise InstallError("HF_TOKEN is required for pretrain_llama3.1: export HF_TOKEN, or set "
                           "hf_token_file in the config")
    if not needs_token:
        plan.hf_token = None  # stored only where a workload needs it
    elif plan.hf_token:
        plan.hf_token = shellsafe.hf_token(plan.token_source, plan.hf_token)
    plan.env = check.env("env", plan.env, check.secret_values(environ, plan.hf_token))
    return plan


def _validate_slurm(plan: Plan) -> None:
    check, s = fields, plan.slurm
    for key in ("account", "partition"):
        if s.get(key) in (None, ""):
            raise InstallError(f"slurm.{key} is required for cluster_type=slurm")
    s["account"] = shellsafe.slurm_name("slurm.account", check.string("slurm.account",
                                                                    s["account"]), "account")
    for key in ("partition", "cpu_partition"):
        if s.get(key) is not None:
            s[key] = shellsafe.slurm_name(f"slurm.{key}", check.string(f"slurm.{key}", s[key]),
                                          "partition", True)
    s.setdefault("cpu_partition", s["partition"])
    s["gres"] = check.gres("slurm.gres", s.get("gres"))


def _validate_image(plan: Plan) -> None:
    check = fields
    method = plan.image.setdefault("method", "skip" if plan.cluster_type == "runai" else "local")
    method = plan.image["method"] = check.string("image.method", method)
    if method not in IMAGE_METHODS:
        raise InstallError(f"image.method={shown(method)} is not supported; allowed: "
                           f"{', '.join(IMAGE_METHODS)}")
    if plan.cluster_type == "runai" and method != "skip":
        raise InstallError(f"image.method={method} with cluster_type=runai: Run:ai pulls the "
                           "image; use skip")
    plan.image["time_limit"] = shellsafe.slurm_time(
        "image.time_limit", check.string("image.time_limit",
                                         plan.image.get("time_limit", "02:00:00")))


def _validate_venv(plan: Plan) -> None:
    check, v = fields, plan.venv
    kind = v["kind"] = check.string("venv.kind", v.get("kind", "venv"))
    if kind not in VENV_KINDS:
        raise InstallError(f"venv.kind={shown(kind)} is not supported; allowed: "
                           f"{', '.join(VENV_KINDS)}")
    reuse = v.get("reuse")
    if reuse is not None:
        reuse = v["reuse"] = str(Path(os.path.expanduser(check.string("venv.reuse", reuse)))
                                 .absolute())
        if not (Path(reuse) / "bin" / "python").exists():
            raise InstallError(f"venv.reuse={reuse} is not a venv (no bin/python)")
    elif kind == "conda" and shutil.which("conda") is None:
        raise InstallError("venv.kind=conda but conda is not on PATH; use venv.kind=venv or "
                           "install conda")
    python = v["python"] = check.string("venv.python", v.get(
        "python", sys.executable if kind == "venv" else "python3"))
    if reuse is None and kind == "venv" and shutil.which(python) is None:
        raise InstallError(f"venv.python={shown(python)} is not an executable Python; give a "
                           "path or a command on PATH, e.g. python3")
    v["system_site_packages"] = check.boolean("venv.system_site_packages",
                                              v.get("system_site_packages", False))
    v["requirements"] = check.requirements("venv.requirements",
                                           v.get("requirements", DEFAULT_REQUIREMENTS), REPO)
    v["pip_args"] = check.pip_args("venv.pip_args", v.get("pip_args", []))


def _read_token(path_value: object) -> str:
    path = Path(os.path.expanduser(fields.string("hf_token_file", path_value)))
    try:
        return files.read_token(path)
    except files.FileRefused as exc:
        if exc.reason == "is not UTF-8 text":
            raise InstallError(f"hf_token_file={path} is not text (not UTF-8); it must hold "
                               "the token only") from None
        raise InstallError(f"hf_token_file={path} {exc.reason}; it must be a file holding "
                           "the token only") from None


def plan_from_config(path: Path, environ: Mapping[str, str]) -> Plan:
    label = f"--config {path}"
    data = files.read_yaml(path, label, InstallError)
    try:
        data = fields.check_map(label, data)
        fields.unknown_keys(label, data, CONFIG_KEYS)
        sections = {}
        for name, keys in (("slurm", SLURM_KEYS), ("venv", VENV_KEYS), ("image", IMAGE_KEYS)):
            sections[name] = dict(fields.check_map(name, data.get(name)))
            fields.unknown_keys(name, sections[name], keys)
        workloads = data.get("workloads", [])
        if workloads == "all":
            workloads = workload_keys()
        workloads = fields.string_list("workloads", workloads,
                                             "[pretrain_nemotron4] or all")
        install = data.get("install_path") or environ.get("LLMB_INSTALL") or ""
        install = fields.string("install_path", install) if install else ""
    except values.BadValue as err:
        raise InstallError(str(err)) from None
    token, source = environ.get("HF_TOKEN") or None, "HF_TOKEN"
    if data.get("hf_token_file"):
        token, source = _read_token(data["hf_token_file"]), "the token in hf_token_file"
    return validate_plan(Plan(
        install_path=install, cluster_type=data.get("cluster_type", "slurm"),
        gpu_type=data.get("gpu_type", "h100"), workloads=workloads, slurm=sections["slurm"],
        venv=sections["venv"], image=sections["image"],
        env=cast(dict[str, Any], data.get("env")), hf_token=token,  # checked by _validate
        token_source=source,
    ), environ)


# --- interactive ------------------------------------------------------------------------------

Ask = Callable[[str], str]


def ask(input_fn: Ask, question: str, default: str | None = None,
        choices: list[str] | None = None, check: Callable[[str], str | None] | None = None,
        out=None) -> str:
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
        print(f"  {problem}", file=out)


def _answer_check(check: Callable[..., object], *args: object) -> Callable[[str], str | None]:
    """An installcheck/jobsafe check as an `ask` check: its refusal is the problem shown."""
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


def discover(user: str, out=None) -> dict[str, Any]:
    """What the cluster says about itself; missing facts are None (the user types them)."""
    out = out or sys.stdout
    found: dict[str, Any] = {"partitions": None, "accounts": None}
    try:
        found["partitions"] = slurmquery.partitions()
    except slurmquery.SlurmUnavailable as exc:
        print(f"  (cannot list partitions: {exc}; type it)", file=out)
    try:
        found["accounts"] = slurmquery.accounts(user)
    except slurmquery.SlurmUnavailable as exc:
        print(f"  (cannot list accounts: {exc}; type it)", file=out)
    return found


def interactive_plan(input_fn: Ask, secret_fn: Ask, environ: Mapping[str, str],
                     found: Mapping[str, Any], out=None) -> Plan:
    out = out or sys.stdout
    print("llmb installer: answer each question; Enter takes the default.", file=out)
    install = ask(input_fn, "Install directory (LLMB_INSTALL, on a shared file system)",
                  environ.get("LLMB_INSTALL") or str(Path.home() / "llmb"),
                  check=_answer_check(fields.install_path, "install directory", "slurm"),
                  out=out)
    ctype = ask(input_fn, "Cluster type", "slurm", list(catalog.INSTALL_CLUSTER_TYPES), out=out)
    parts = found.get("partitions") or []
    gpu_parts = [p for p in parts if p.gpus]
    models = [p.gpu_model for p in gpu_parts if p.gpu_model in catalog.gpu_types()]
    gpu_type = ask(input_fn, "GPU type", models[0] if models else "h100", catalog.gpu_types(),
                   out=out)
    offered = [r.workload for r in catalog.all_recipes()
               if gpu_type in r.gpu_types and ctype in r.data["cluster_types"]]
    if not offered:
        raise InstallError(f"no workload is published for gpu_type={gpu_type} on {ctype}")

    def check_workloads(answer: str) -> str | None:
        bad = [w for w in answer.replace(",", " ").split() if w not in offered and w != "all"]
        return f"not offered: {', '.join(bad)}; choose from {', '.join(offered)}" if bad else None

    print(f"  workloads for {gpu_type}: {', '.join(offered)}", file=out)
    chosen = ask(input_fn, "Workloads to install (space separated, or all)", "all",
                 check=check_workloads, out=out).replace(",", " ").split()
    workloads = offered if "all" in chosen else list(dict.fromkeys(chosen))
    slurm_cfg: dict[str, Any] = {}
    image_method = "skip"
    if ctype == "slurm":
        accounts = found.get("accounts")
        slurm_cfg["account"] = ask(input_fn, "Slurm account", accounts[0] if accounts else
                                   environ.get("SBATCH_ACCOUNT"), accounts,
                                   _answer_check(shellsafe.slurm_name, "account", "account"),
                                   out=out)
        names = [p.name for p in parts] or None
        default_part = next((p.name for p in gpu_parts if p.default),
                            gpu_parts[0].name if gpu_parts else
                            environ.get("SBATCH_PARTITION"))
        part_check = _answer_check(shellsafe.slurm_name, "partition", "partition", True)
        part = ask(input_fn, "GPU partition", default_part, names, part_check, out=out)
        slurm_cfg["partition"] = part
        chosen_part = next((p for p in parts if p.name == part), None)
        gres_default = f"gpu:{chosen_part.gpus}" if chosen_part and chosen_part.gpus else "none"
        gres = ask(input_fn, "GPU GRES request per node (none: the cluster needs none)",
                   gres_default, check=_answer_check(fields.gres, "GRES"), out=out)
        slurm_cfg["gres"] = fields.gres("GRES", gres)
        local_enroot = shutil.which("enroot") is not None
        image_method = ask(input_fn, "Import the image here (local) or on a compute node (srun)",
                           "local" if local_enroot else "srun", ["local", "srun"], out=out)
        cpu_parts = [p.name for p in parts if not p.gpus]
        slurm_cfg["cpu_partition"] = part if image_method == "local" else ask(
            input_fn, "Partition for the image import (CPU nodes are fine)",
            cpu_parts[0] if cpu_parts else part, names, part_check, out=out)
    kinds = ["venv", "conda"] if shutil.which("conda") else ["venv"]
    kind = ask(input_fn, "Python environment kind", "venv", kinds, out=out)
    token = None
    if any(catalog.find_recipe(w).data["requires_hf_token"] for w in workloads):
        token = environ.get("HF_TOKEN") or ask_secret(
            secret_fn, "HuggingFace token for Llama 3.1 (HF_TOKEN, not echoed)", "the token",
            out)
    plan = validate_plan(Plan(install_path=install, cluster_type=ctype, gpu_type=gpu_type,
                              workloads=workloads, slurm=slurm_cfg, venv={"kind": kind},
                              image={"method": image_method}, hf_token=token), environ)
    print_plan(plan, out)
    if ask(input_fn, "Install now?", "yes", ["yes", "no"], out=out) != "yes":
        raise InstallError("cancelled; nothing was changed")
    return plan


# --- driver ------------------------------------------------------------------------------

def print_plan(plan: Plan, out=None, steps: list[Step] | None = None) -> None:
    out = out or sys.stdout
    print(f"Install directory : {plan.install_path}", file=out)
    print(f"Cluster           : {plan.cluster_type}, GPU type {plan.gpu_type}", file=out)
    if plan.cluster_type == "slurm":
        s = plan.slurm
        print(f"Slurm             : account {s['account']}, partition {s['partition']}, "
              f"gres {s.get('gres') or 'none'}, image partition {s.get('cpu_partition')}",
              file=out)
    print(f"Workloads         : {', '.join(plan.workloads)}", file=out)
    print(f"Environments      : {plan.venv['kind']}"
          + (f" (reusing {plan.venv['reuse']})" if plan.venv.get("reuse") else ""), file=out)
    print(f"Image             : {plan.image['method']}", file=out)
    print(f"HF_TOKEN          : {'provided (stored 0600)' if plan.hf_token else 'not needed'}",
          file=out)
    for i, step in enumerate(steps or [], 1):
        print(f"  {i:2d}. {step.name}: {step.describe}", file=out)


def execute(plan: Plan, python: str, out=None) -> None:
    """Every step the disk says is missing; "Installed." only when the disk says all are done."""
    out = out or sys.stdout
    try:
        plan.root.mkdir(parents=True, exist_ok=True)
        installsteps.execute(installsteps.build_steps(plan, python), out)
    except installsteps.StepError as err:
        raise InstallError(str(err)) from None
    except OSError as err:  # the disk filled up, a directory turned read-only, no conda
        where = f": {err.filename}" if err.filename else ""
        raise InstallError(f"{err.strerror or err}{where}; fix that and run the same command "
                           "again (the steps already done are kept)") from None
    print_summary(plan, out)


def print_summary(plan: Plan, out=None) -> None:
    out = out or sys.stdout
    print("\nInstalled. Next:", file=out)
    print(f"  cd {plan.install_path}", file=out)
    print("  ./llmb-run list", file=out)
    w = plan.workloads[0]
    recipe = catalog.find_recipe(w)
    size = recipe.defaults["model_size"]
    dtype = recipe.defaults["dtype"] if recipe.defaults["dtype"] in recipe.dtypes else \
        recipe.dtypes[0]
    scales = recipe.scales(size, dtype, plan.gpu_type) or [recipe.rows()[0].num_gpus]
    print(f"  ./llmb-run single -w {w} -s {size} --dtype {dtype} --scale {scales[0]}", file=out)
    print("  ./llmb-run status", file=out)


class _Parser(argparse.ArgumentParser):
    """argparse with a one-line error: `llmb-install: <what is wrong>; see install.sh --help`."""

    def error(self, message: str) -> NoReturn:
        print(f"llmb-install: {shown(message)}; see {self.prog} --help", file=sys.stderr)
        raise SystemExit(2)


def main(argv: list[str] | None = None, input_fn: Ask = input,
         secret_fn: Ask = getpass.getpass, stdin_isatty: Callable[[], bool] | None = None) -> int:
    parser = _Parser(prog="install.sh", description=__doc__.split("\n")[0])
    parser.add_argument("--config", type=Path, help="headless: answers from this YAML file")
    parser.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    args = parser.parse_args(argv)
    isatty = stdin_isatty or sys.stdin.isatty
    python = sys.executable  # the Python running this, which has PyYAML
    try:
        if args.config:
            plan = plan_from_config(args.config, os.environ)
        elif not isatty():
            raise InstallError("stdin is not a terminal, so there is no one to answer the "
                               "prompts; run it in a terminal or pass --config FILE "
                               "(see installer/example-config.yaml)")
        else:
            found = discover(os.environ.get("USER") or getpass.getuser())
            plan = interactive_plan(input_fn, secret_fn, os.environ, found)
        if args.dry_run:
            print("Dry run: nothing will be changed. The plan:")
            print_plan(plan, steps=installsteps.build_steps(plan, python))
            return 0
        execute(plan, python)
    except InstallError as exc:
        print(f"llmb-install: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("llmb-install: interrupted; run the same command again to resume",
              file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
