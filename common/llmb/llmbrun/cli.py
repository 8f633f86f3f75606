"""llmb-run: one command per benchmark run, sweeps, and what became of them.

    llmb-run list
    llmb-run single -w pretrain_<recipe> -s <size> --dtype <dtype> --scale <N> [-p] [PLACEMENT]
    llmb-run bulk <file.yaml> [PLACEMENT]
    llmb-run status [--all] [--wait] [--format=table|json] [JOB...]
    llmb-run rerun [--failed] [--exclude-suspect] [PLACEMENT] [JOB...]
    llmb-run jobs log JOB [--follow] [--batch]
    llmb-run preflight [--nodes N] [--format=table|json] [PLACEMENT]
    llmb-run report [--output DIR]
    llmb-run archive [--output FILE]
    llmb-run verify-archive FILE

PLACEMENT: --nodelist, --exclude, --reservation, --qos, --segment, --slurm-arg=--KEY=VALUE.
This module is the command line only; each command lives in a module of its own: tasks
(task building, bulk files), submit (launch.sh), jobs (status, logs), rerun, preflight,
archive, analysis (the analyzer's CLI), placement, runconfig (cluster_config.yaml).

Exit status: 0 success; 1 a refused request (validation against the recipe metadata or the
install), a failed submission, a failed preflight check or an incomplete archive; 2 a command
line that cannot be used (an unknown option, a flag's value); 130 interrupted.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path
from typing import Any, NoReturn

from llmb import layout
from llmb.launch import placement
from llmb.launch.placement import Placement, PlacementError
from llmb.llmbrun import status
from llmb.llmbrun.clusterconfig import (
    PROG,
    RunError,
    find_config,
)
from llmb.llmbrun.tasks import MAX_SCALE, Task, parse_env_overrides, tasks_from_bulk, validate_all
from llmb.recipes import catalog
from llmb.shared import files, startvars, values
from llmb.shared.errors import LlmbError, UsageError

MAX_NODES = 100_000
MAX_TIMEOUT_S = 7 * 24 * 3600


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors: `llmb-run: <what is wrong>; see llmb-run ... --help`."""

    def error(self, message: str) -> NoReturn:
        print(f"{PROG}: {values.shown(message)}; see {self.prog} --help", file=sys.stderr)
        raise SystemExit(2)


def whole_number(what: str, limit: int) -> Any:
    def parse(text: str) -> int:
        plain = text.strip()
        if re.fullmatch(r"0+[1-9][0-9]*", plain) and int(plain) <= limit:
            raise argparse.ArgumentTypeError(
                f"{values.shown(text)} is not {what}; write it as {int(plain)}")
        if not re.fullmatch(r"[0-9]{1,9}", plain) or not 1 <= int(plain) <= limit:
            raise argparse.ArgumentTypeError(
                f"{values.shown(text)} is not {what}: a whole number from 1 to {limit}")
        return int(plain)
    return parse


def add_placement(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("node placement (Slurm; see installer/README.md)")
    g.add_argument("--nodelist", metavar="NODES", help="run on these nodes (node[01-04],n7)")
    g.add_argument("--exclude", metavar="NODES", help="never on these nodes")
    g.add_argument("--reservation", metavar="NAME")
    g.add_argument("--qos", metavar="NAME")
    g.add_argument("--segment", metavar="N", help="Slurm segment size in nodes (24.05+)")
    g.add_argument("--slurm-arg", action="append", default=[], metavar="--KEY=VALUE",
                   dest="slurm_arg", help="an extra sbatch option (repeatable), e.g. "
                   "--slurm-arg=--constraint=h100")


def placement_of(args: argparse.Namespace) -> Placement:
    try:
        return placement.build(nodelist=args.nodelist, exclude=args.exclude,
                               reservation=args.reservation, qos=args.qos,
                               segment=args.segment, slurm_args=args.slurm_arg)
    except PlacementError as exc:
        raise UsageError(str(exc)) from None


def build_parser() -> Parser:
    p = Parser(prog=PROG, description="Run llmb benchmarks on this install.",
               allow_abbrev=False)
    p.add_argument("--config", help="path of cluster_config.yaml (default: ./ then "
                   "$LLMB_INSTALL)")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sub.add_parser("list", help="workloads, sizes, dtypes and published scales",
                   allow_abbrev=False)
    s = sub.add_parser("single", help="submit one run", allow_abbrev=False)
    s.add_argument("-w", "--workload", required=True)
    s.add_argument("-s", "--size", required=True)
    s.add_argument("--dtype", required=True)
    s.add_argument("--scale", type=whole_number("a GPU count", MAX_SCALE), required=True,
                   help="total GPUs")
    s.add_argument("-p", "--profile", action="store_true", help="nsys profile (ENABLE_PROFILE)")
    s.add_argument("--repeats", type=whole_number("a number of repeats", 1000), default=1)
    s.add_argument("--env", action="append", default=[], metavar="NAME=VALUE")
    b = sub.add_parser("bulk", help="submit the sweep in a YAML file", allow_abbrev=False)
    b.add_argument("file")
    r = sub.add_parser("rerun", help="submit recorded runs again", allow_abbrev=False)
    r.add_argument("jobs", nargs="*", metavar="JOB")
    r.add_argument("--failed", action="store_true", help="the failed runs not rerun yet")
    r.add_argument("--exclude-suspect", action="store_true",
                   help="exclude the nodes the analyzer names for the failed run")
    for q in (s, b, r):
        q.add_argument("--dry-run", action="store_true", help="DRY_RUN=true: submit nothing")
        add_placement(q)
    for q in (s, b):
        q.add_argument("--smoke", action="store_true",
                       help="SMOKE_TEST=true: a tiny real torch job instead of NeMo")
    st = sub.add_parser("status", help="state and result of the submitted jobs",
                        allow_abbrev=False)
    st.add_argument("jobs", nargs="*", metavar="JOB")
    st.add_argument("--all", action="store_true", help="every recorded job, not the last 20")
    st.add_argument("--wait", action="store_true", help="wait until the jobs have ended")
    st.add_argument("--timeout", type=whole_number("seconds", MAX_TIMEOUT_S),
                    help="with --wait: give up after this many seconds")
    st.add_argument("--format", choices=("table", "json"), default="table")
    j = sub.add_parser("jobs", help="a job's log", allow_abbrev=False)
    jsub = j.add_subparsers(dest="jobs_command", required=True, metavar="log")
    jl = jsub.add_parser("log", help="print a job's training log", allow_abbrev=False)
    jl.add_argument("job", metavar="JOB")
    jl.add_argument("--follow", "-f", action="store_true", help="until the job has ended")
    jl.add_argument("--batch", action="store_true", help="the batch script's output instead")
    pf = sub.add_parser("preflight", help="check the cluster with one short job",
                        allow_abbrev=False)
    pf.add_argument("--nodes", type=whole_number("a node count", MAX_NODES), default=1)
    pf.add_argument("--format", choices=("table", "json"), default="table")
    pf.add_argument("--timeout", type=whole_number("seconds", MAX_TIMEOUT_S),
                    default=900, help="give up on the job after this many seconds (900)")
    add_placement(pf)
    rp = sub.add_parser("report", help="the analyzer's report for the whole install",
                        allow_abbrev=False)
    rp.add_argument("--output", metavar="DIR", help="default: $LLMB_INSTALL/report")
    a = sub.add_parser("archive", help="pack runs, analysis and system facts for sharing",
                       allow_abbrev=False)
    a.add_argument("--output", metavar="FILE",
                   help="default: $LLMB_INSTALL/llmb-archive-<time>.tar.gz")
    v = sub.add_parser("verify-archive", help="check an archive is complete and consistent",
                       allow_abbrev=False)
    v.add_argument("file", metavar="FILE")
    return p


def check_environment(environ: dict[str, str]) -> None:
    """Settings llmb-run takes from flags or cluster_config.yaml must not ride in the
    environment, where they would apply without being recorded."""
    for var, (flag, _) in placement.ENV_VARS.items():
        if (environ.get(var) or "").strip():
            raise RunError(f"{var}={values.shown(environ[var])} is set in the environment; "
                           f"llmb-run takes placement from its flags so that the history "
                           f"records it: unset it and use {flag}")
    problem = placement.sbatch_environment_problem(environ)
    if problem:
        raise RunError(problem)
    if (stage_path := layout.stage_path_problem(environ)) is not None:
        raise RunError(stage_path)
    if (inherited := startvars.inherited_refusal(environ)) is not None:
        raise RunError(inherited)  # launch.sh would refuse it too, after a Python start


def cmd_list(cfg: Any) -> int:
    gpu = cfg.gpu_type
    print(f"GPU type: {gpu} (from {cfg.path})")
    for recipe in catalog.all_recipes():
        mark = "installed" if recipe.workload in cfg.workloads else "not installed"
        print(f"\n{recipe.workload} ({mark})")
        for size in recipe.sizes:
            for dtype in recipe.dtypes:
                scales = recipe.scales(size, dtype, gpu)
                if scales:
                    print(f"  -s {size:<5} --dtype {dtype:<4} --scale "
                          f"{', '.join(map(str, scales))}")
        if not any(recipe.rows(gpu_type=gpu)):
            print(f"  (nothing published for {gpu})")
    return 0


def cmd_bulk(cfg: Any, file: str, place: Placement, dry_run: bool, smoke: bool) -> int:
    from llmb.llmbrun.submit import report_errors, run_tasks

    path = Path(file)
    data = files.read_yaml(path, f"bulk file {values.shown(path)}", RunError)
    tasks, errors = tasks_from_bulk(data, values.shown(path), place)
    if errors:
        more, _, _ = validate_all(cfg, tasks)
        report_errors(errors + more)
        return 1
    return run_tasks(cfg, tasks, dry_run, smoke)


def dispatch(args: argparse.Namespace) -> int:
    command = args.command
    if command == "status" and args.timeout is not None and not args.wait:
        raise UsageError("status --timeout applies with --wait only; add --wait or drop "
                         "--timeout")
    if command == "rerun" and not args.jobs and not args.failed:
        raise UsageError("rerun needs JOB ids or --failed (every failed run not rerun yet)")
    if command == "verify-archive":  # needs no install: archives travel
        from llmb.llmbrun import verify_archive

        return verify_archive.cmd_verify(Path(args.file))
    cfg = find_config(args.config, os.environ)
    if command == "list":
        return cmd_list(cfg)
    if command == "status":
        return status.cmd_status(cfg, args.all, args.format, args.wait, args.jobs, args.timeout)
    if command == "jobs":
        return status.cmd_log(cfg, args.job, args.follow, args.batch)
    if command == "archive":
        from llmb.llmbrun import archive

        return archive.cmd_archive(cfg, args.output)
    if command == "report":
        from llmb.llmbrun import report

        return report.cmd_report(cfg, args.output)
    place = placement_of(args)
    check_environment(dict(os.environ))
    if command == "preflight":
        from llmb.llmbrun import preflight

        return preflight.cmd_preflight(cfg, args.nodes, args.format, place, args.timeout)
    if command == "rerun":
        from llmb.llmbrun import rerun

        return rerun.cmd_rerun(cfg, args.jobs, args.failed, args.exclude_suspect, place,
                               args.dry_run)
    if command == "bulk":
        return cmd_bulk(cfg, args.file, place, args.dry_run, args.smoke)
    from llmb.llmbrun.submit import run_tasks

    env = parse_env_overrides(args.env)
    tasks = [Task(args.workload, args.size.lower(), args.dtype.lower(), args.scale,
                  args.profile, rep, env, place) for rep in range(1, args.repeats + 1)]
    return run_tasks(cfg, tasks, args.dry_run, args.smoke)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return dispatch(args)
    except LlmbError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return exc.status
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `llmb-run list | head`
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
