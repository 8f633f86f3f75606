"""The llmb installer: interactive prompts or a YAML config -> a plan -> idempotent steps.

    installer/install.sh                       interactive (needs a terminal)
    installer/install.sh --config FILE         headless
    installer/install.sh --config FILE --dry-run   print the plan, change nothing

Steps (each idempotent, recorded in $LLMB_INSTALL/.llmb_install_state.json so that a rerun
after an interruption resumes after the last completed one): layout, hf_token, venv:<w>,
setup:<w> (<recipe>/setup.sh with LLMB_SETUP_STEPS=venv in that venv), image:<file> (once per
image: setup.sh with LLMB_SETUP_STEPS=image, here or through srun on a CPU partition),
cluster_config ($LLMB_INSTALL/cluster_config.yaml), llmb_run ($LLMB_INSTALL/llmb-run).
See installer/README.md for the config keys.
"""

from __future__ import annotations

import argparse
import getpass
import hashlib
import json
import os
import shlex
import shutil
import sys
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from llmb import catalog, files, images, progress, slurm

REPO = catalog.REPO_ROOT
STATE_FILE = ".llmb_install_state.json"
HF_TOKEN_FILE = ".hf_token"
CONFIG_FILE = "cluster_config.yaml"
CLUSTER_TYPES = ("slurm", "runai")
VENV_KINDS = ("venv", "conda")
IMAGE_METHODS = ("local", "srun", "skip")
CONFIG_KEYS = {"install_path", "cluster_type", "gpu_type", "workloads", "slurm", "venv", "image",
               "hf_token_file", "env"}
SLURM_KEYS = {"account", "partition", "cpu_partition", "gres"}
VENV_KEYS = {"kind", "python", "system_site_packages", "reuse", "requirements", "pip_args"}
IMAGE_KEYS = {"method", "time_limit"}


class InstallError(Exception):
    """A bad input or a failed step: one line for the user."""


@dataclass
class Plan:
    install_path: str
    cluster_type: str
    gpu_type: str
    workloads: list[str]
    slurm: dict[str, Any] = field(default_factory=dict)
    venv: dict[str, Any] = field(default_factory=dict)
    image: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    hf_token: str | None = field(default=None, repr=False)

    def digest(self) -> str:
        data = asdict(self)
        data["hf_token"] = bool(self.hf_token)
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]

    @property
    def root(self) -> Path:
        return Path(self.install_path)

    def venv_path(self, workload: str) -> Path:
        reuse = self.venv.get("reuse")
        return Path(reuse) if reuse else self.root / "venvs" / workload


# --- building and validating a plan ------------------------------------------------------------

def _fail(msg: str) -> None:
    raise InstallError(msg)


def _check_keys(where: str, data: Any, allowed: set[str]) -> dict[str, Any]:
    if data is None:
        return {}
    if not isinstance(data, dict):
        _fail(f"{where} must be a mapping, got {type(data).__name__}")
    unknown = sorted(set(data) - allowed)
    if unknown:
        _fail(f"{where} has unknown key(s) {', '.join(unknown)}; allowed: "
              f"{', '.join(sorted(allowed))}")
    return data


def workload_keys() -> list[str]:
    return [r.workload for r in catalog.all_recipes()]


def validate_plan(plan: Plan) -> Plan:
    """Check every field; raise InstallError naming the first bad one."""
    if not plan.install_path:
        _fail("install_path is required (the LLMB_INSTALL directory)")
    plan.install_path = str(Path(os.path.expanduser(plan.install_path)).absolute())
    if plan.cluster_type not in CLUSTER_TYPES:
        _fail(f"cluster_type={plan.cluster_type} is not supported; allowed: "
              f"{', '.join(CLUSTER_TYPES)}")
    if plan.gpu_type not in catalog.gpu_types():
        _fail(f"gpu_type={plan.gpu_type} is not supported; allowed: "
              f"{', '.join(catalog.gpu_types())}")
    known = workload_keys()
    if not plan.workloads:
        _fail(f"workloads is empty; choose from: {', '.join(known)}")
    for w in plan.workloads:
        if w not in known:
            _fail(f"workloads: {w} is not a workload; allowed: {', '.join(known)}")
        recipe = catalog.find_recipe(w)
        if plan.gpu_type not in recipe.gpu_types:
            _fail(f"workloads: {w} is not published for gpu_type={plan.gpu_type}; it runs on "
                  f"{', '.join(recipe.gpu_types)}")
        if plan.cluster_type not in recipe.data["cluster_types"]:
            _fail(f"workloads: {w} does not support cluster_type={plan.cluster_type}; it "
                  f"supports {', '.join(recipe.data['cluster_types'])}")
    if plan.cluster_type == "slurm":
        for key in ("account", "partition"):
            if not plan.slurm.get(key):
                _fail(f"slurm.{key} is required for cluster_type=slurm")
        plan.slurm.setdefault("cpu_partition", plan.slurm["partition"])
        plan.slurm.setdefault("gres", None)
    kind = plan.venv.setdefault("kind", "venv")
    if kind not in VENV_KINDS:
        _fail(f"venv.kind={kind} is not supported; allowed: {', '.join(VENV_KINDS)}")
    if kind == "conda" and not plan.venv.get("reuse") and shutil.which("conda") is None:
        _fail("venv.kind=conda but conda is not on PATH; use venv.kind=venv or install conda")
    reuse = plan.venv.get("reuse")
    if reuse and not (Path(reuse) / "bin" / "python").exists():
        _fail(f"venv.reuse={reuse} is not a venv (no bin/python)")
    plan.venv.setdefault("python", sys.executable if kind == "venv" else "python3")
    plan.venv.setdefault("system_site_packages", False)
    reqs = plan.venv.setdefault("requirements", ["common/requirements/launch.txt"])
    for req in reqs:
        if not (REPO / req).is_file():
            _fail(f"venv.requirements: {req} does not exist under {REPO}")
    plan.venv.setdefault("pip_args", [])
    method = plan.image.setdefault("method", "skip" if plan.cluster_type == "runai" else "local")
    if method not in IMAGE_METHODS:
        _fail(f"image.method={method} is not supported; allowed: {', '.join(IMAGE_METHODS)}")
    if plan.cluster_type == "runai" and method != "skip":
        _fail(f"image.method={method} with cluster_type=runai: Run:ai pulls the image; use skip")
    plan.image.setdefault("time_limit", "02:00:00")
    if not isinstance(plan.env, dict):
        _fail("env must be a mapping of variable names to values")
    plan.env = {str(k): str(v) for k, v in plan.env.items()}
    if any(catalog.find_recipe(w).data["requires_hf_token"] for w in plan.workloads) \
            and not plan.hf_token:
        _fail("HF_TOKEN is required for pretrain_llama3.1: export HF_TOKEN, or set "
              "hf_token_file in the config")
    return plan


def plan_from_config(path: Path, environ: Mapping[str, str]) -> Plan:
    data = catalog.read_yaml(path, f"--config {path}", InstallError)
    data = _check_keys(f"--config {path}", data, CONFIG_KEYS)
    workloads = data.get("workloads", [])
    if workloads == "all":
        workloads = workload_keys()
    if not isinstance(workloads, list):
        _fail(f"workloads must be a list or 'all', got {workloads!r}")
    token = environ.get("HF_TOKEN") or None
    if data.get("hf_token_file"):
        token_path = Path(os.path.expanduser(str(data["hf_token_file"])))
        try:
            token = token_path.read_text().strip()
        except OSError as exc:
            raise InstallError(f"hf_token_file={token_path}: {exc.strerror}") from None
    return validate_plan(Plan(
        install_path=str(data.get("install_path") or environ.get("LLMB_INSTALL") or ""),
        cluster_type=str(data.get("cluster_type", "slurm")),
        gpu_type=str(data.get("gpu_type", "h100")).lower(),
        workloads=[str(w) for w in workloads],
        slurm=dict(_check_keys("slurm", data.get("slurm"), SLURM_KEYS)),
        venv=dict(_check_keys("venv", data.get("venv"), VENV_KEYS)),
        image=dict(_check_keys("image", data.get("image"), IMAGE_KEYS)),
        env=data.get("env") or {},
        hf_token=token,
    ))


# --- interactive ------------------------------------------------------------------------------

Ask = Callable[[str], str]


def ask(input_fn: Ask, question: str, default: str | None = None,
        choices: list[str] | None = None, check: Callable[[str], str | None] | None = None,
        out=None) -> str:
    """Ask until the answer is valid; an empty answer takes the default."""
    out = out or sys.stdout
    hint = f" [{'/'.join(choices)}]" if choices and len(choices) <= 6 else ""
    shown = f" (default: {default})" if default else ""
    while True:
        try:
            answer = input_fn(f"{question}{hint}{shown}: ").strip()
        except EOFError:
            raise InstallError(f"no answer to '{question}' (input ended)") from None
        if not answer and default is not None:
            answer = default
        problem = None
        if not answer:
            problem = "an answer is required"
        elif choices and answer not in choices:
            problem = f"{answer} is not one of: {', '.join(choices)}"
        elif check:
            problem = check(answer)
        if problem is None:
            return answer
        print(f"  {problem}", file=out)


def _check_install_path(answer: str) -> str | None:
    path = Path(os.path.expanduser(answer)).absolute()
    parent = next((p for p in (path, *path.parents) if p.exists()), None)
    if parent is None or not parent.is_dir() or not os.access(parent, os.W_OK):
        return f"{path} cannot be created here (no writable parent directory)"
    return None


def discover(user: str, out=None) -> dict[str, Any]:
    """What the cluster says about itself; missing facts are None (the user types them)."""
    out = out or sys.stdout
    found: dict[str, Any] = {"partitions": None, "accounts": None}
    try:
        found["partitions"] = slurm.partitions()
    except slurm.SlurmUnavailable as exc:
        print(f"  (cannot list partitions: {exc}; type it)", file=out)
    try:
        found["accounts"] = slurm.accounts(user)
    except slurm.SlurmUnavailable as exc:
        print(f"  (cannot list accounts: {exc}; type it)", file=out)
    return found


def interactive_plan(input_fn: Ask, secret_fn: Ask, environ: Mapping[str, str],
                     found: Mapping[str, Any], out=None) -> Plan:
    out = out or sys.stdout
    print("llmb installer: answer each question; Enter takes the default.", file=out)
    install = ask(input_fn, "Install directory (LLMB_INSTALL, on a shared file system)",
                  environ.get("LLMB_INSTALL") or str(Path.home() / "llmb"),
                  check=_check_install_path, out=out)
    ctype = ask(input_fn, "Cluster type", "slurm", list(CLUSTER_TYPES), out=out)
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
                                   environ.get("SBATCH_ACCOUNT"), accounts, out=out)
        names = [p.name for p in parts] or None
        default_part = next((p.name for p in gpu_parts if p.default),
                            gpu_parts[0].name if gpu_parts else
                            environ.get("SBATCH_PARTITION"))
        part = ask(input_fn, "GPU partition", default_part, names, out=out)
        slurm_cfg["partition"] = part
        chosen_part = next((p for p in parts if p.name == part), None)
        gres_default = f"gpu:{chosen_part.gpus}" if chosen_part and chosen_part.gpus else "none"
        gres = ask(input_fn, "GPU GRES request per node (none: the cluster needs none)",
                   gres_default, out=out)
        slurm_cfg["gres"] = None if gres == "none" else gres
        local_enroot = shutil.which("enroot") is not None
        image_method = ask(input_fn, "Import the image here (local) or on a compute node (srun)",
                           "local" if local_enroot else "srun", ["local", "srun"], out=out)
        cpu_parts = [p.name for p in parts if not p.gpus]
        slurm_cfg["cpu_partition"] = part if image_method == "local" else ask(
            input_fn, "Partition for the image import (CPU nodes are fine)",
            cpu_parts[0] if cpu_parts else part, names, out=out)
    kinds = ["venv", "conda"] if shutil.which("conda") else ["venv"]
    kind = ask(input_fn, "Python environment kind", "venv", kinds, out=out)
    token = None
    if any(catalog.find_recipe(w).data["requires_hf_token"] for w in workloads):
        token = environ.get("HF_TOKEN") or None
        while not token:
            token = secret_fn("HuggingFace token for Llama 3.1 (HF_TOKEN, not echoed): ").strip()
    plan = validate_plan(Plan(install_path=install, cluster_type=ctype, gpu_type=gpu_type,
                              workloads=workloads, slurm=slurm_cfg, venv={"kind": kind},
                              image={"method": image_method}, hf_token=token))
    print_plan(plan, out)
    if ask(input_fn, "Install now?", "yes", ["yes", "no"], out=out) != "yes":
        raise InstallError("cancelled; nothing was changed")
    return plan


# --- steps --------------------------------------------------------------------------------

@dataclass
class Step:
    name: str
    describe: str
    run: Callable[[], None]


def _recipe_dir(workload: str) -> Path:
    return catalog.find_recipe(workload).directory


def _venv_env(plan: Plan, workload: str) -> dict[str, str]:
    env = dict(os.environ)
    venv = plan.venv_path(workload)
    env.pop("CONDA_PREFIX" if plan.venv["kind"] == "venv" else "VIRTUAL_ENV", None)
    env["VIRTUAL_ENV" if plan.venv["kind"] == "venv" else "CONDA_PREFIX"] = str(venv)
    env["PATH"] = f"{venv}/bin{os.pathsep}{env.get('PATH', '')}"
    env.pop("PYTHONHOME", None)
    env.pop("STAGE_PATH", None)
    env.update(LLMB_INSTALL=plan.install_path, LLMB_REPO=str(REPO), GPU_TYPE=plan.gpu_type,
               CLUSTER_TYPE=plan.cluster_type)
    return env


def _check_call(argv: list[str], env: Mapping[str, str] | None, what: str) -> None:
    returncode = progress.run_command(argv, env, what)  # a progress line on a terminal
    if returncode != 0:
        raise InstallError(f"{what} failed (exit {returncode}): {shlex.join(argv)}")


def build_steps(plan: Plan, python: str) -> list[Step]:
    root = plan.root
    def layout() -> None:
        for d in ("images", "datasets", "venvs", *(f"workloads/{w}" for w in plan.workloads)):
            (root / d).mkdir(parents=True, exist_ok=True)

    steps = [Step("layout", f"create {root}/{{images,datasets,venvs,workloads/<w>}}", layout)]
    if plan.hf_token:
        steps.append(Step("hf_token", f"write {root / HF_TOKEN_FILE} (mode 0600)",
                          lambda: write_secret(root / HF_TOKEN_FILE, plan.hf_token or "")))
    for w in plan.workloads:
        venv = plan.venv_path(w)
        if not plan.venv.get("reuse"):
            steps.append(Step(f"venv:{w}", f"create {plan.venv['kind']} {venv}",
                              lambda w=w: create_venv(plan, w)))
        else:
            steps.append(Step(f"venv:{w}", f"reuse {venv}", lambda: None))
        recipe_dir = _recipe_dir(w)

        def setup_venv(w: str = w, recipe_dir: Path = recipe_dir) -> None:
            env = _venv_env(plan, w)
            env["LLMB_SETUP_STEPS"] = "venv"
            env["LLMB_REQUIREMENTS"] = ":".join(str(REPO / r) for r in plan.venv["requirements"])
            env["LLMB_PIP_ARGS"] = " ".join(plan.venv["pip_args"])
            _check_call(["bash", str(recipe_dir / "setup.sh")], env, f"{recipe_dir.name}/setup.sh")

        steps.append(Step(f"setup:{w}", f"{recipe_dir.name}/setup.sh (requirements into {venv})",
                          setup_venv))
    seen: set[str] = set()
    for w in plan.workloads:
        image = images.for_recipe(w)
        if plan.image["method"] == "skip" or image.file_name in seen:
            continue
        seen.add(image.file_name)
        steps.append(Step(f"image:{image.file_name}", _image_describe(plan, w, image),
                          lambda w=w: import_image(plan, w)))
    steps.append(Step("cluster_config", f"write {root / CONFIG_FILE}",
                      lambda: write_cluster_config(plan)))
    steps.append(Step("llmb_run", f"install {root / 'llmb-run'}",
                      lambda: install_llmb_run(plan, python)))
    return steps


def _image_argv(plan: Plan, workload: str) -> list[str]:
    setup = str(_recipe_dir(workload) / "setup.sh")
    if plan.image["method"] == "srun":
        return ["srun", f"--account={plan.slurm['account']}",
                f"--partition={plan.slurm['cpu_partition']}", "--nodes=1", "--ntasks=1",
                f"--time={plan.image['time_limit']}", "--job-name=llmb-image-import",
                "bash", setup]
    return ["bash", setup]


def _image_describe(plan: Plan, workload: str, image: images.Image) -> str:
    return (f"import {image.enroot_uri} -> {plan.root / 'images' / image.file_name} via "
            f"{shlex.join(_image_argv(plan, workload))}")


def import_image(plan: Plan, workload: str) -> None:
    env = _venv_env(plan, workload)
    env["LLMB_SETUP_STEPS"] = "image"
    _check_call(_image_argv(plan, workload), env, "image import")


def write_secret(path: Path, secret: str) -> None:
    """Owner-only from the first byte: created 0600, never world-readable in between."""
    path.parent.mkdir(parents=True, exist_ok=True)
    files.write_private(path, secret + "\n")


def create_venv(plan: Plan, workload: str) -> None:
    venv = plan.venv_path(workload)
    if (venv / "bin" / "python").exists():
        return
    if plan.venv["kind"] == "conda":
        _check_call(["conda", "create", "-y", "-q", "-p", str(venv),
                     f"python={sys.version_info.major}.{sys.version_info.minor}", "pip"],
                    None, "conda create")
        return
    argv = [plan.venv["python"], "-m", "venv"]
    if plan.venv["system_site_packages"]:
        argv.append("--system-site-packages")
    _check_call([*argv, str(venv)], None, "python -m venv")


def cluster_config(plan: Plan) -> dict[str, Any]:
    return {
        "schema": 1,
        "llmb": {"repo": str(REPO), "install_path": plan.install_path},
        "launcher": {
            "cluster_type": plan.cluster_type,
            "gpu_type": plan.gpu_type,
            "slurm": dict(plan.slurm) if plan.cluster_type == "slurm" else None,
            "hf_token_file": str(plan.root / HF_TOKEN_FILE) if plan.hf_token else None,
            "env": dict(plan.env),
        },
        "workloads": {
            w: {"recipe": catalog.find_recipe(w).directory.name,
                "venv": str(plan.venv_path(w)), "venv_kind": plan.venv["kind"],
                "image": str(plan.root / "images" / images.for_recipe(w).file_name)
                if plan.image["method"] != "skip" else None}
            for w in plan.workloads
        },
    }


def write_cluster_config(plan: Plan) -> None:
    files.atomic_write(
        plan.root / CONFIG_FILE,
        "# Written by the llmb installer; read by llmb-run. See installer/README.md.\n"
        + yaml.safe_dump(cluster_config(plan), sort_keys=False))


def install_llmb_run(plan: Plan, python: str) -> None:
    files.atomic_write(
        plan.root / "llmb-run",
        "#!/usr/bin/env bash\n"
        "# llmb-run for this install (written by the llmb installer).\n"
        f"export LLMB_INSTALL=\"${{LLMB_INSTALL:-{plan.install_path}}}\"\n"
        f"export LLMB_PYTHON=\"${{LLMB_PYTHON:-{python}}}\"\n"
        f"exec {shlex.quote(str(REPO / 'installer' / 'llmb-run'))} \"$@\"\n",
        files.EXECUTABLE)


# --- state and driver -------------------------------------------------------------------------

def load_state(plan: Plan) -> set[str]:
    path = plan.root / STATE_FILE
    try:
        state = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return set()
    if state.get("plan") != plan.digest():
        return set()
    return set(state.get("done", []))


def save_state(plan: Plan, done: set[str]) -> None:
    files.atomic_write(plan.root / STATE_FILE,
                       json.dumps({"plan": plan.digest(), "done": sorted(done)}, indent=1))


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
    out = out or sys.stdout
    plan.root.mkdir(parents=True, exist_ok=True)
    steps = build_steps(plan, python)
    done = load_state(plan)
    if done:
        print(f"Resuming: {len(done)} of {len(steps)} steps already done", file=out)
    for i, step in enumerate(steps, 1):
        if step.name in done:
            print(f"[{i}/{len(steps)}] {step.name}: done before, skipped", file=out)
            continue
        print(f"[{i}/{len(steps)}] {step.name}: {step.describe}", file=out, flush=True)
        step.run()
        done.add(step.name)
        save_state(plan, done)
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


def main(argv: list[str] | None = None, input_fn: Ask = input,
         secret_fn: Ask = getpass.getpass, stdin_isatty: Callable[[], bool] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="install.sh", description=__doc__.split("\n")[0])
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
            print_plan(plan, steps=build_steps(plan, python))
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
