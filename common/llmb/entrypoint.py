"""Dispatch for the per-recipe entrypoints (pretrain_llama31.py, pretrain_nemotron4.py, ...).

    <entrypoint>                          login node: read launch.sh's variables, validate,
                                          build the nemo-run job, submit or DRY_RUN
    <entrypoint> train --manifest PATH    in the container: run the job the manifest describes
                                          (llmb.container.smoke when options.smoke_test,
                                          else llmb.container.train)
    <entrypoint> train --manifest PATH --print-config
                                          in the container: print the NeMo recipe that job
                                          would train, as nemo-run YAML; train nothing
    <entrypoint> dry-runs                 llmb-run's dry runs of this recipe, a JSON list on
                                          stdin: each what launch.sh prints with DRY_RUN, in
                                          one process (nemo-run imported once, not once a run)

Errors end by llmb.shared.front's rule, as every Python front of llmb: one line on stderr
starting with "llmb: " and the error's own exit status (2 for a request that cannot be done as
asked, 1 when nemo-run cannot submit it), 130 for Ctrl-C, 141 when stdout's reader went away.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import NoReturn

from llmb.shared import front
from llmb.shared.errors import EXIT_USAGE, LlmbError, UsageError
from llmb.shared.values import shown

PROG = "llmb"

USAGE = """usage: {prog} [train --manifest PATH [--print-config]]

With no arguments: launch the {recipe} benchmark described by the environment
(JOB_TOTAL_GPUS, DTYPE, MODEL_SIZE, GPU_TYPE, ...; see {readme}).
train --manifest PATH: the in-container half (run by the job itself).
train --manifest PATH --print-config: print the NeMo recipe that job trains (nemo-run YAML),
  train nothing; needs NeMo (the container), no GPU.
"""


class BadRequest(LlmbError):
    """A launch or a train request that cannot be done as asked (launch.sh's variables against
    the recipe, the run manifest): exit 2."""

    status = EXIT_USAGE


class SubmitFailed(LlmbError):
    """nemo-run could not submit the job: exit 1."""


def main(recipe_dir: Path | str, argv: list[str]) -> int:
    """The entrypoint's exit status: its work's, or how an error ends it (llmb.shared.front)."""
    return front.run(PROG, lambda: dispatch(Path(recipe_dir), argv))


def dispatch(recipe_dir: Path, argv: list[str]) -> int:
    if argv and argv[0] in ("-h", "--help", "help"):
        print(USAGE.format(prog=Path(sys.argv[0]).name, recipe=recipe_dir.name,
                           readme=recipe_dir / "README.md"), end="")
        return 0
    if argv and argv[0] == "train":
        return train(argv[1:])
    if argv == ["dry-runs"]:
        return dry_runs(recipe_dir, json.load(sys.stdin))
    if argv:
        raise UsageError(f"unknown argument {argv[0]!r}; run with --help")
    return login(recipe_dir)


def login(recipe_dir: Path) -> int:
    from llmb.launch import request
    from llmb.recipes import catalog

    try:
        recipe = catalog.load_recipe(recipe_dir)
    except catalog.CatalogError as err:
        raise BadRequest(str(err)) from None
    given = os.environ.get("GPU_TYPE", "")
    gpu_type = given.strip().lower()
    try:  # a GPU type the recipe has no row for: say which it has, and what else knows it
        catalog.require_gpu_type(recipe, gpu_type)
    except catalog.CatalogError as err:  # (quoting the value as it was given)
        raise BadRequest(f"GPU_TYPE={shown(given)}{str(err).removeprefix(gpu_type)}") from None
    if recipe.is_bridge:  # a Megatron-Bridge recipe: one launcher serves them all
        return _bridge(recipe)
    try:
        req = request.from_env(recipe)
    except (request.RequestError, catalog.CatalogError) as err:
        raise BadRequest(str(err)) from None
    # The login node never needs torch, but nemo-run's YAML serializer imports it when it is
    # installed (the dev venv has it for the smoke workload): 1-2 s of start-up for nothing.
    # Ranks are separate processes (srun/torchrun) and are not affected.
    sys.modules.setdefault("torch", None)  # type: ignore[arg-type]
    from llmb.launch import experiment  # nemo-run is imported only from here on

    try:
        return experiment.launch(req)
    except (LlmbError, BrokenPipeError):  # stdout's reader gone: the front's 141, no failure
        raise
    except Exception as err:  # one line for people; the traceback helps nobody here
        result = getattr(err, "result", None)  # invoke.UnexpectedExit: the command's stderr
        detail = (getattr(result, "stderr", "") or "").strip().splitlines()
        message = detail[-1] if detail else f"{type(err).__name__}: {err}"
        raise SubmitFailed(f"submission failed: {' '.join(message.split())}") from None


def _bridge(recipe) -> int:
    from llmb.launch import bridgejob, request

    try:
        return bridgejob.launch(recipe)
    except request.RequestError as err:
        raise BadRequest(str(err)) from None
    except (LlmbError, BrokenPipeError):
        raise
    except Exception as err:  # nemo-run's submission: one line, as login's
        raise SubmitFailed(f"submission failed: {type(err).__name__}: {err}") from None


def dry_runs(recipe_dir: Path, runs: list[dict[str, object]]) -> int:
    """Each of llmb-run's dry runs ({"header": a line, "env": launch.sh's environment}, as
    llmb-run builds it, bash's checks done): its header on stdout, then login's work on that
    environment (DRY_RUN: what would be submitted), or its one line on stderr. The exit status:
    how many failed (at most 100)."""
    failed = 0
    saved = dict(os.environ)
    for run in runs:
        print(run["header"], flush=True)
        env = run["env"]
        if not isinstance(env, dict) or env.get("DRY_RUN") != "true":
            raise UsageError("dry-runs: each run needs its launch environment with DRY_RUN=true")
        os.environ.clear()
        os.environ.update({str(k): str(v) for k, v in env.items()})
        try:
            login(recipe_dir)
        except LlmbError as exc:
            print(f"{PROG}: {front.one_line(str(exc))}", file=sys.stderr)
            failed += 1
        finally:
            os.environ.clear()
            os.environ.update(saved)
        sys.stdout.flush()
    return min(failed, 100)


class _Parser(front.ArgParser):
    """argparse, whose errors are one `llmb:` line (a UsageError: exit 2) instead of usage plus
    error."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"train: {message}; usage: train --manifest PATH [--print-config]")


def train(argv: list[str]) -> int:
    front.default_signals()  # in the job: SIGTERM is Slurm's, its default action as before
    parser = _Parser(prog="train", add_help=True)
    parser.add_argument("--manifest", required=True, type=Path)
    parser.add_argument("--print-config", action="store_true",
                        help="print the NeMo recipe as nemo-run YAML, train nothing")
    args = parser.parse_args(argv)
    from llmb import manifest as run_manifest

    try:
        manifest = run_manifest.read(args.manifest)
    except run_manifest.ManifestError as err:
        raise BadRequest(str(err)) from None
    options = manifest.get("options")
    smoke_test = isinstance(options, dict) and options.get("smoke_test") is True
    if manifest.get("framework", "nemo") != "nemo" and not smoke_test:
        raise BadRequest(f"manifest {args.manifest} is a {manifest.get('framework')} run: its "
                         "own scripts train it; train --manifest runs its SMOKE_TEST workload "
                         "only")
    if smoke_test and args.print_config:
        raise BadRequest(f"manifest {args.manifest} is a SMOKE_TEST run: it trains a tiny PyTorch "
                      "model, no NeMo recipe; --print-config needs a benchmark manifest")
    if smoke_test:
        from llmb.container import smoke

        code = int(smoke.run(manifest))
        # The task ends here, everything written: leave without the interpreter's teardown of
        # torch and gloo (about 0.6 s of CPU per task; a smoke job runs 16 on a test machine's
        # 2 cores).
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    from llmb.container import train as nemo_train

    if args.print_config:
        return int(nemo_train.print_config(manifest))
    return int(nemo_train.run(manifest))
