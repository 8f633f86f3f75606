"""llmb-run: one command per benchmark run, sweeps, and what became of them.

    llmb-run list
    llmb-run single -w pretrain_<recipe> -s <size> --dtype <dtype> --scale <N> [-p]
                    [--exclude-suspect] [PLACEMENT]
    llmb-run bulk <file.yaml> [--exclude-suspect] [PLACEMENT]
    llmb-run status [--all] [--wait] [--format=table|json] [JOB...]
    llmb-run rerun [--failed] [--exclude-suspect] [PLACEMENT] [JOB...]
    llmb-run jobs log JOB [--follow] [--batch]
    llmb-run preflight [--nodes N] [--format=table|json] [PLACEMENT]
    llmb-run screen (--nodes N | --nodelist NODES) [--rounds R] [--smoke] [--format=table|json]
                    [--timeout S] [--baseline PATH] [--save-baseline] [PLACEMENT]
    llmb-run report [--output DIR]
    llmb-run archive [--output FILE] [--suite ID]
    llmb-run verify-archive FILE
    llmb-run suite submit [--max-scale N] [--min-scale N] [-w W ...] [--dtype D ...]
        [--repeats R] [--set NAME [--scale N]] [--max-jobs K] [--smoke] [--dry-run] [--yes]
        [PLACEMENT] [--exclude-suspect]
    llmb-run suite status [ID] [--wait [--timeout S]] [--format=table|json]
    llmb-run suite report [ID] [--check] [--format=table|json] [--output DIR]
        [--baseline FILE]
    llmb-run suite baseline [ID] --save FILE
    llmb-run suite resume [ID] [--exclude-suspect] [--dry-run]

PLACEMENT: --nodelist, --exclude, --reservation, --qos, --segment, --slurm-arg=--KEY=VALUE.
This module is the command line only; each command lives in the core module or the feature
folder named for it (the module map: docs/architecture.md).

Exit status: 0 success; 1 a refused request (validation against the recipe metadata or the
install), a failed submission, a failed preflight check, a screen that could not run or an
incomplete archive; 2 a command line that cannot be used (an unknown option, a flag's value);
3 a screen that named a GPU, node or link, or `suite report --check`: a configuration is below
its reference or lacks its successful runs (with --baseline: a workload of the set is not
above 95% of its baseline, or has no run or no baseline); 130 interrupted; 141 the reader of
the output went away (a broken pipe).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

from llmb import layout
from llmb.launch import hostlist, placement
from llmb.launch.placement import Placement, PlacementError
from llmb.llmbrun import preflight, screen, status
from llmb.llmbrun.clusterconfig import ClusterConfig, find_config
from llmb.llmbrun.errors import PROG, RunError
from llmb.llmbrun.tasks import (
    BULK_SHAPE,
    MAX_SCALE,
    Task,
    bulk_shape_problem,
    parse_env_overrides,
    tasks_from_bulk,
    validate_all,
)
from llmb.recipes import catalog
from llmb.shared import front, redact, startvars, values, yamlfile
from llmb.shared.errors import UsageError

MAX_NODES = 100_000
MAX_TIMEOUT_S = 7 * 24 * 3600


class Parser(front.ArgParser):
    """argparse with one-line errors: a UsageError (exit 2), `llmb-run: <what is wrong>; see
    llmb-run ... --help`."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message}; see {self.prog} --help")


def whole_number(what: str, limit: int) -> Callable[[str], int]:
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
    g = p.add_argument_group("node placement (Slurm; see docs/llmb-run.md)")
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
    add_submit_parsers(sub)
    add_status_parsers(sub)
    add_check_parsers(sub)
    rp = sub.add_parser("report", help="the analyzer's report for the whole install",
                        allow_abbrev=False)
    rp.add_argument("--output", metavar="DIR", help="default: $LLMB_INSTALL/report")
    a = sub.add_parser("archive", help="pack runs, analysis and system facts for sharing",
                       allow_abbrev=False)
    a.add_argument("--output", metavar="FILE",
                   help="default: $LLMB_INSTALL/llmb-archive-<time>.tar.gz")
    a.add_argument("--suite", metavar="ID", help="only the runs of this suite")
    add_suite_parser(sub)
    v = sub.add_parser("verify-archive", help="check an archive is complete and consistent",
                       allow_abbrev=False)
    v.add_argument("file", metavar="FILE")
    return p


def add_submit_parsers(sub: argparse._SubParsersAction[Parser]) -> None:
    """`llmb-run single | bulk | rerun`: what submits runs."""
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
        q.add_argument("--exclude-suspect", action="store_true",
                       help="add the nodes the newest screen named (llmb-run screen) to "
                       "--exclude")


def add_status_parsers(sub: argparse._SubParsersAction[Parser]) -> None:
    """`llmb-run status | jobs log`: what became of the submitted jobs."""
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


def add_check_parsers(sub: argparse._SubParsersAction[Parser]) -> None:
    """`llmb-run preflight | screen`: the short jobs that check the cluster."""
    pf = sub.add_parser("preflight", help="check the cluster with one short job",
                        allow_abbrev=False)
    pf.add_argument("--nodes", type=whole_number("a node count", MAX_NODES), default=1)
    pf.add_argument("--format", choices=("table", "json"), default="table")
    pf.add_argument("--timeout", type=whole_number("seconds", MAX_TIMEOUT_S),
                    default=preflight.DEFAULT_TIMEOUT_S, help="give up on the job after this "
                    f"many seconds ({preflight.DEFAULT_TIMEOUT_S})")
    add_placement(pf)
    sc = sub.add_parser("screen", help="find the slow GPU, node or link with one short job",
                        allow_abbrev=False)
    sc.add_argument("--nodes", type=whole_number("a node count", screen.MAX_NODES),
                    help="screen this many nodes (or name them with --nodelist)")
    sc.add_argument("--rounds", type=whole_number("a number of rounds", screen.MAX_ROUNDS),
                    help="rounds of node pairs (default: 2, 3 for an odd node count)")
    sc.add_argument("--smoke", action="store_true",
                    help="the same job on the CPU (gloo, small sizes): no GPU needed")
    sc.add_argument("--format", choices=("table", "json"), default="table")
    sc.add_argument("--timeout", type=whole_number("seconds", MAX_TIMEOUT_S),
                    default=screen.DEFAULT_TIMEOUT_S,
                    help="give up on the job after this many seconds "
                    f"({screen.DEFAULT_TIMEOUT_S})")
    sc.add_argument("--baseline", metavar="PATH",
                    help="compare with this baseline (a file --save-baseline wrote, or a "
                    "screen.json; default: the install's, where one was saved)")
    sc.add_argument("--save-baseline", action="store_true",
                    help="keep this screen as the install's baseline if it names nothing")
    add_placement(sc)


def add_suite_parser(sub: argparse._SubParsersAction[Parser]) -> None:
    """`llmb-run suite submit | status | report | resume` (llmb.llmbrun.suite.commands)."""
    from llmb.llmbrun.suite import DEFAULT_REPEATS, SET_NAMES

    su = sub.add_parser("suite", help="the published configurations in one pass: submit, "
                        "status, report, resume", allow_abbrev=False)
    ssub = su.add_subparsers(dest="suite_command", required=True,
                             metavar="submit|status|report|resume|baseline")
    sb = ssub.add_parser("submit", help="every published configuration up to the cluster's "
                         "size, each --repeats times", allow_abbrev=False)
    sb.add_argument("--max-scale", type=whole_number("a GPU count", MAX_SCALE), metavar="N",
                    help="largest scale in GPUs (default: what the partition offers)")
    sb.add_argument("--min-scale", type=whole_number("a GPU count", MAX_SCALE), default=1,
                    metavar="N", help="smallest scale in GPUs")
    sb.add_argument("-w", "--workload", action="append", default=[], metavar="W",
                    help="only this workload (repeatable; default: every installed one)")
    sb.add_argument("--dtype", action="append", default=[], metavar="D",
                    help="only this dtype (repeatable)")
    sb.add_argument("--repeats", type=whole_number("a number of repeats", 1000),
                    help=f"runs per configuration ({DEFAULT_REPEATS}; a set's own)")
    sb.add_argument("--set", metavar="NAME", help="an acceptance set's workloads and dtypes "
                    f"for this GPU type, at its scale ({', '.join(SET_NAMES)})")
    sb.add_argument("--scale", type=whole_number("a GPU count", MAX_SCALE), metavar="N",
                    help="with --set: rehearse at N GPUs (at most the set's scale)")
    sb.add_argument("--max-jobs", type=whole_number("a number of jobs", MAX_NODES),
                    metavar="K", help="at most K of the suite's jobs in the queue at once")
    sb.add_argument("--smoke", action="store_true",
                    help="SMOKE_TEST=true: a tiny real torch job instead of NeMo")
    sb.add_argument("--dry-run", action="store_true", help="print the plan, submit nothing")
    sb.add_argument("--yes", action="store_true", help="do not ask before submitting")
    sb.add_argument("--exclude-suspect", action="store_true",
                    help="leave out the nodes the newest llmb-run screen named")
    add_placement(sb)
    for name, what in (("status", "runs done, running, pending, held and failed per "
                        "configuration"), ("report", "the analyzer's verdicts over the "
                        "suite's runs"), ("resume", "submit again what the suite is missing"),
                       ("baseline", "a set suite's own step times as a baseline file")):
        q = ssub.add_parser(name, help=what, allow_abbrev=False)
        q.add_argument("suite_id", nargs="?", metavar="ID", help="default: the newest suite")
        if name == "status":
            q.add_argument("--wait", action="store_true", help="until no run is queued or "
                           "held, releasing held runs")
            q.add_argument("--timeout", type=whole_number("seconds", MAX_TIMEOUT_S),
                           help="with --wait: give up after this many seconds")
        if name in ("status", "report"):
            q.add_argument("--format", choices=("table", "json"), default="table")
        if name == "report":
            q.add_argument("--check", action="store_true", help="exit 3 while a "
                           "configuration is below its reference, has no successful run or "
                           "lacks repeats")
            q.add_argument("--output", metavar="DIR",
                           help="the HTML report (default: $LLMB_INSTALL/suites/ID/report)")
            q.add_argument("--baseline", metavar="FILE", help="a set suite: each workload "
                           "above 95%% of this file's")
        if name == "baseline":
            q.add_argument("--save", metavar="FILE", required=True, help="the new file (YAML)")
        if name == "resume":
            q.add_argument("--exclude-suspect", action="store_true",
                           help="leave out the nodes the newest llmb-run screen named")
            q.add_argument("--dry-run", action="store_true", help="say what, submit nothing")


def cmd_suite(cfg: ClusterConfig, args: argparse.Namespace) -> int:
    from llmb.llmbrun import suite

    command = args.suite_command
    suite_id = suite.check_id(args.suite_id) if getattr(args, "suite_id", None) else None
    if command == "status":
        if args.timeout is not None and not args.wait:
            raise UsageError("suite status --timeout applies with --wait only; add --wait or "
                             "drop --timeout")
        return suite.cmd_status(cfg, suite_id, args.wait, args.timeout, args.format)
    if command == "report":
        return suite.cmd_report(cfg, suite_id, args.check, args.format, args.output,
                                args.baseline)
    if command == "baseline":
        return suite.cmd_baseline(cfg, suite_id, args.save)
    check_environment(dict(os.environ))
    if command == "resume":
        return suite.cmd_resume(cfg, suite_id, args.exclude_suspect, args.dry_run)
    sel = suite.Selection(tuple(dict.fromkeys(args.workload)),
                    tuple(dict.fromkeys(d.lower() for d in args.dtype)), args.min_scale,
                    args.max_scale)
    return suite.cmd_submit(cfg, sel, args.repeats, args.max_jobs, args.smoke,
                               args.dry_run, args.yes, placement_of(args),
                               args.exclude_suspect, set_name=suite.check_name(args.set)
                               if args.set is not None else None, scale=args.scale)


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


def cmd_list(cfg: ClusterConfig) -> int:
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


def exclude_suspects(cfg: ClusterConfig, place: Placement) -> Placement:
    """--exclude-suspect: the placement with the newest screen's suspects added to --exclude
    (recorded, as any --exclude, in the job script, the manifest and the history)."""
    newest = screen.newest_screen(cfg.tree)
    nodes = screen.for_exclude(cfg.tree)
    where = newest.path if newest is not None else cfg.tree.screens
    try:
        widened, new = place.with_excluded(nodes)
    except PlacementError as exc:
        raise RunError(str(exc)) from None
    if not nodes:
        print(f"{PROG}: --exclude-suspect: the newest screen ({where}) names no suspect",
              file=sys.stderr)
    else:
        already = [n for n in nodes if n not in new]
        said = f"leaving out {hostlist.compressed(nodes)} (named by {where})" + (
            f"; {hostlist.compressed(already)} already excluded" if already else "")
        print(f"{PROG}: --exclude-suspect: {redact.for_people(said)}", file=sys.stderr)
    return widened


def cmd_bulk(cfg: ClusterConfig, file: str, place: Placement, dry_run: bool, smoke: bool
             ) -> int:
    from llmb.llmbrun.submit import report_errors, run_tasks

    path = Path(file)
    data = yamlfile.read_yaml(path, f"bulk file {values.shown(path)}", RunError)
    if (problem := bulk_shape_problem(data)) is not None:
        raw = path.read_bytes()
        lines = raw.count(b"\n") + (not raw.endswith(b"\n") and bool(raw))
        raise RunError(f"bulk file {values.shown(path)} ({len(raw)} bytes, {lines} line(s)) "
                       f"is {problem}; a bulk file is {BULK_SHAPE}; its lines "
                       "are not shown: is it the file you meant?")
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
        from llmb.llmbrun import archive

        return archive.cmd_verify(Path(args.file))
    cfg = find_config(args.config, os.environ)
    if command == "list":
        return cmd_list(cfg)
    if command == "status":
        return status.cmd_status(cfg, args.all, args.format, args.wait, args.jobs, args.timeout)
    if command == "jobs":
        return status.cmd_log(cfg, args.job, args.follow, args.batch)
    if command == "archive":
        from llmb.llmbrun import archive, suite

        return archive.cmd_archive(cfg, args.output,
                                   suite.check_id(args.suite) if args.suite else None)
    if command == "suite":
        return cmd_suite(cfg, args)
    if command == "report":
        from llmb.llmbrun import report
        return report.cmd_report(cfg, args.output, (screen.report_section,))
    place = placement_of(args)
    check_environment(dict(os.environ))
    if command == "preflight":
        return preflight.cmd_preflight(cfg, args.nodes, args.format, place, args.timeout)
    if command == "screen":
        return screen.cmd_screen(cfg, args.nodes, place, args.smoke, args.rounds, args.format,
                                 args.timeout, args.baseline, args.save_baseline)
    if command == "rerun":
        from llmb.llmbrun import rerun

        return rerun.cmd_rerun(cfg, args.jobs, args.failed, args.exclude_suspect, place,
                               args.dry_run)
    if args.exclude_suspect:
        place = exclude_suspects(cfg, place)
    if command == "bulk":
        return cmd_bulk(cfg, args.file, place, args.dry_run, args.smoke)
    from llmb.llmbrun.submit import run_tasks

    env = parse_env_overrides(args.env)
    tasks = [Task(args.workload, args.size.lower(), args.dtype.lower(), args.scale,
                  args.profile, rep, env, place, given=(args.size, args.dtype))
             for rep in range(1, args.repeats + 1)]
    return run_tasks(cfg, tasks, args.dry_run, args.smoke)


def main(argv: list[str] | None = None) -> int:
    # errors (a bad flag too), Ctrl-C, `llmb-run list | head`: each as every front ends
    return front.run(PROG, lambda: dispatch(build_parser().parse_args(argv)))


if __name__ == "__main__":
    front.leave(main())
