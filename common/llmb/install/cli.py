"""The llmb installer: interactive prompts or a YAML config -> a checked plan -> steps.

    installer/install.sh                       interactive (needs a terminal)
    installer/install.sh --config FILE         headless
    installer/install.sh --config FILE --dry-run   print the plan, change nothing

Every field is checked before anything is written (llmb.install.fields: types, the characters a
shell or Slurm cannot take, secrets kept out of cluster_config.yaml, an install path this user
can create). The steps (llmb.install.steps: layout, hf_token, venv:<w>, setup:<w>,
image:<file>, cluster_config, llmb_run) each check the disk to say whether they are done, so a
rerun after an interruption, a deletion or a change does what is missing and nothing else.
See docs/installer.md for the config keys.
"""

from __future__ import annotations

import argparse
import getpass
import os
import shutil
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import NoReturn

from llmb.install import fields, prompts, record
from llmb.install import steps as installsteps
from llmb.install.fields import InstallError
from llmb.install.prompts import Answers, Ask
from llmb.install.steps import Plan, Step
from llmb.recipes import catalog
from llmb.shared import front, shellsafe, slurmquery, values, yamlfile
from llmb.shared.errors import UsageError
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
    plan.workloads = list(dict.fromkeys(plan.workloads))  # one workload named twice: one step
    only = plan.gpu_type in check.screen_only_gpu_types()
    if not plan.workloads and not only:
        raise InstallError(f"workloads is empty; choose from: {', '.join(known)}")
    for w in plan.workloads:
        if w not in known:
            raise InstallError(f"workloads: {shown(w)} is not a workload; allowed: "
                               f"{', '.join(known)}")
        recipe = catalog.find_recipe(w)
        if plan.gpu_type not in recipe.gpu_types:
            raise InstallError(
                f"workloads: {w} is not published for gpu_type={plan.gpu_type}; it publishes "
                f"rows for {', '.join(recipe.gpu_types)}" + (
                    f" ({plan.gpu_type}: {check.SCREEN_ONLY}; give workloads: [])"
                    if only else ""))
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
    s["gres"] = check.gres("slurm.gres", s.get("gres"), catalog.get_gpu_type(plan.gpu_type))


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
        if not os.path.exists(Path(reuse) / "bin" / "python"):  # never raises: a long name
            raise InstallError(f"venv.reuse={shown(reuse)} is not a venv (no bin/python)")
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
    """The token hf_token_file holds, by the rule --record asked for it with."""
    try:
        return fields.token_file("hf_token_file", path_value)[1]
    except values.BadValue as err:
        raise InstallError(str(err)) from None


def plan_from_config(path: Path, environ: Mapping[str, str]) -> Plan:
    label = f"--config {path}"
    data = yamlfile.read_yaml(path, label, InstallError)
    try:
        data = fields.check_map(label, data)
        fields.unknown_keys(label, data, CONFIG_KEYS)
        sections = {}
        for name, keys in (("slurm", SLURM_KEYS), ("venv", VENV_KEYS), ("image", IMAGE_KEYS)):
            sections[name] = dict(fields.check_map(name, data.get(name)))
            fields.unknown_keys(name, sections[name], keys)
        workloads = data.get("workloads", [])
        if workloads == "all":  # every workload that publishes rows for the GPU and cluster type
            workloads = [c.name for c in prompts.workload_choices(
                str(data.get("gpu_type", "h100")), str(data.get("cluster_type", "slurm")))]
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
        venv=sections["venv"], image=sections["image"], env=data.get("env", {}), hf_token=token,
        token_source=source,
    ), environ)


# --- interactive ------------------------------------------------------------------------------

def discover(user: str, out=None) -> prompts.Found:
    """What the cluster says about itself; missing facts are None (the user types them)."""
    out = out or sys.stdout
    found: prompts.Found = {"partitions": None, "accounts": None}
    try:
        found["partitions"] = slurmquery.partitions()
    except slurmquery.SlurmUnavailable as exc:
        print(f"  (cannot list partitions: {shown(str(exc))}; type it)", file=out)
    try:
        found["accounts"] = slurmquery.accounts(user)
    except slurmquery.SlurmUnavailable as exc:
        print(f"  (cannot list accounts: {shown(str(exc))}; type it)", file=out)
    return found


def interactive_plan(input_fn: Ask, secret_fn: Ask, environ: Mapping[str, str],
                     found: prompts.Found, out=None) -> Plan:
    """The questions (llmb.install.prompts), the answers checked as a config file's are, the
    plan shown, then `Install now?`."""
    out = out or sys.stdout
    plan = validate_plan(prompts.questions(input_fn, secret_fn, environ, found, False,
                                           out).plan, environ)
    print_plan(plan, out)
    if prompts.ask(input_fn, "Install now?", "yes", ["yes", "no"], out=out) != "yes":
        raise InstallError("cancelled; nothing was changed")
    return plan


def recorded_answers(input_fn: Ask, environ: Mapping[str, str], found: prompts.Found,
                     out=None) -> Answers:
    """--record: the questions (the token's file, not the token), the answers checked."""
    answers = prompts.questions(input_fn, input_fn, environ, found, True, out)
    answers.plan = validate_plan(answers.plan, environ)
    return answers


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
    named = ", ".join(plan.workloads) or "none (llmb-run screen and preflight, the analyzer)"
    print(f"Workloads         : {named}", file=out)
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
    if not plan.workloads:  # a GPU type no recipe publishes: the screen and preflight
        print("  ./llmb-run preflight\n  ./llmb-run screen", file=out)
        return
    print("  ./llmb-run list", file=out)
    w = plan.workloads[0]
    recipe = catalog.find_recipe(w)
    size = recipe.defaults["model_size"]
    dtype = recipe.defaults["dtype"] if recipe.defaults["dtype"] in recipe.dtypes else \
        recipe.dtypes[0]
    scales = recipe.scales(size, dtype, plan.gpu_type) or [recipe.rows()[0].num_gpus]
    print(f"  ./llmb-run single -w {w} -s {size} --dtype {dtype} --scale {scales[0]}", file=out)
    print("  ./llmb-run status", file=out)


class Parser(front.ArgParser):
    """argparse with one-line errors: a UsageError (exit 2), `llmb-install: <what is wrong>;
    see install.sh --help`."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message}; see {self.prog} --help")


NO_TERMINAL = ("stdin is not a terminal, so there is no one to answer the prompts; run it in "
               "a terminal or pass --config FILE (see installer/example-config.yaml)")


def record_answers(target: str, input_fn: Ask, isatty: Callable[[], bool], python: str) -> int:
    """--record FILE: ask, check, write the config file; install nothing."""
    path = record.check_path(target)
    if not isatty():
        raise InstallError(NO_TERMINAL.replace("pass --config FILE", "record answers there "
                                               "and replay them with --config FILE"))
    found = discover(os.environ.get("USER") or getpass.getuser())
    answers = recorded_answers(input_fn, os.environ, found)
    record.write(answers, path)
    print(f"Recorded the answers in {path} (0600; the Hugging Face token is not in it).")
    print(f"Replay: installer/install.sh --config {path} [--dry-run]. The plan it replays:")
    print_plan(answers.plan, steps=installsteps.build_steps(answers.plan, python))
    return 0


def main(argv: list[str] | None = None, input_fn: Ask = input,
         secret_fn: Ask = getpass.getpass, stdin_isatty: Callable[[], bool] | None = None) -> int:
    parser = Parser(prog="install.sh", description=__doc__.split("\n")[0], allow_abbrev=False)
    parser.add_argument("--config", type=Path, help="headless: answers from this YAML file")
    parser.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    parser.add_argument("--record", metavar="FILE", help="ask the questions and write the "
                        "answers as a --config file (without the token); install nothing")
    isatty = stdin_isatty or sys.stdin.isatty
    return front.run("llmb-install",
                     lambda: install(parser.parse_args(argv), input_fn, secret_fn, isatty),
                     "interrupted; run the same command again to resume")


def install(args: argparse.Namespace, input_fn: Ask, secret_fn: Ask,
            isatty: Callable[[], bool]) -> int:
    """What the command line asks: record the answers, print the plan, or install."""
    python = sys.executable  # the Python running this, which has PyYAML
    if args.record is not None:
        if args.config or args.dry_run:
            raise InstallError("--record asks the questions and writes FILE; it does not "
                               "go with --config or --dry-run (replay the file with "
                               "--config FILE [--dry-run])")
        return record_answers(args.record, input_fn, isatty, python)
    if args.config:
        plan = plan_from_config(args.config, os.environ)
    elif not isatty():
        raise InstallError(NO_TERMINAL)
    else:
        found = discover(os.environ.get("USER") or getpass.getuser())
        plan = interactive_plan(input_fn, secret_fn, os.environ, found)
    if args.dry_run:
        print("Dry run: nothing will be changed. The plan:")
        print_plan(plan, steps=installsteps.build_steps(plan, python))
        return 0
    execute(plan, python)
    return 0


if __name__ == "__main__":
    front.leave(main())
