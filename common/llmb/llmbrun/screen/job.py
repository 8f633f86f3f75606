"""`llmb-run screen`: find the slow GPU, node or link with one short job, before a benchmark does.

    llmb-run screen (--nodes N | --nodelist NODES) [--rounds R] [--smoke] [--format=table|json]
                    [--timeout S] [--baseline PATH] [--save-baseline] [PLACEMENT]

One job on the install's account and partition, in the benchmark's container image, through
the benchmark's srun path (`--mpi=pmix`, pyxis) and environment (llmb.launch.jobenv's base and
GPU variables), one task per GPU: llmb.container.screenrun measures every GPU, every node's
all-reduce, the nodes in pairs over a fixed number of rounds (every node meets a new partner
each round) and one all-reduce over all nodes. Then, in the same job, the confirm pass
(llmb.llmbrun.screen.confirm): one task judges that first pass and, where it names a slow
GPU, node, node network or link, those are measured again beside a few healthy peers, and
only what is slow again is named (what the second pass cleared is said: "seen once, cleared
by the confirm pass"); where the first pass names nothing, the job ends there.
llmb.llmbrun.screen.results puts the results together and llmb.llmbrun.screen.judge judges
them; they are kept, with the job's script, plan and output, in $LLMB_INSTALL/screens/<UTC
YYYYmmdd-HHMMSS>/ (the confirm pass's under confirm/; screen.json is written last: a screen
without it never counts for --exclude-suspect). `--smoke` runs the same job on the CPU (gloo,
small sizes), as a node without CUDA does. Every screen is also held to the cluster's
baseline (llmb.llmbrun.screen.baseline: the install's, or --baseline PATH) where there is one;
--save-baseline keeps this screen as the install's baseline when it names nothing once the
confirm pass has judged: a screen whose first-pass names were all cleared by the confirm pass
is kept; one that names anything after it is refused.

Exit status: 0 nothing named; 3 a GPU, node or link named (as the analyzer's --check); 1 the
screen could not run (refused by sbatch, or ended before any task reported); 2 a bad option.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import time
from pathlib import Path
from typing import TypedDict

from llmb import layout
from llmb.container import screenrun
from llmb.launch import jobenv, placement, slurmtopology
from llmb.launch.placement import Placement
from llmb.llmbrun import slurmjob
from llmb.llmbrun.clusterconfig import ClusterConfig
from llmb.llmbrun.errors import PROG, RunError
from llmb.llmbrun.screen import baseline, confirm, render, results, transport
from llmb.llmbrun.screen.document import Params
from llmb.recipes import catalog
from llmb.shared import clock, files, records, shellsafe, values
from llmb.shared.errors import LlmbError, UsageError

EXIT_NAMED = 3
JOB_TIME = "00:30:00"
DEFAULT_TIMEOUT_S = 1800
MAX_ROUNDS = 64
JOB_NAME = "llmb-screen"
SCRIPT = "screen.sbatch"
# What a task measures. GPU: nccl-tests' usual sweep up to 1 GiB, a GEMM large enough to keep
# a GPU's tensor cores busy, a 1 GiB copy; every figure in repeats (llmb.llmbrun.screen.
# precision: the noise they show sets the floor), each all-reduce repeat timed over at least
# `allreduce_window_s`. CPU (--smoke, or no CUDA): small, quick sizes, and one task or one
# group measuring at a time (`serial`): the processes of a CPU screen share cores, and
# figures measured side by side would measure the sharing.
GPU_PARAMS: Params = {
    "sizes": [1 << p for p in range(20, 31)], "iters": 20, "warmup": 5, "window_s": 1.0,
    "matmul_n": 8192, "memory_bytes": 1 << 30, "dtypes": ["bf16", "fp8"], "repeats": 7,
    "allreduce_repeats": 10, "allreduce_window_s": 0.5, "serial": False}
CPU_PARAMS: Params = {
    "sizes": [1 << 18, 1 << 20], "iters": 10, "warmup": 2, "window_s": 0.2,
    "matmul_n": 128, "memory_bytes": 8 << 20, "dtypes": ["fp32"], "repeats": 5,
    "allreduce_repeats": 7, "allreduce_window_s": 0.4, "serial": True}
COLLECTIVE_TIMEOUT_S = 300
# a GPU screen's pair rounds: four partners per node (three for an odd count), what the fit
# of each node's network and each link needs (llmb.llmbrun.screen.network); fewer nodes,
# as many as there are
FIT_ROUNDS = 4


def node_count(nodes: int | None, place: Placement, rounds: int | None) -> int:
    """The job's node count from --nodes or --nodelist; UsageError for a combination that
    cannot be run (before anything is written or submitted)."""
    listed = placement.expand_hostlist("--nodelist", place.nodelist) if place.nodelist else []
    count = nodes if nodes is not None else len(listed)
    if not count:
        raise UsageError("screen needs --nodes N or --nodelist NODES (the nodes to screen)")
    if count > results.MAX_NODES:
        raise UsageError(f"--nodelist names {count} nodes; a screen takes at most "
                         f"{results.MAX_NODES}: screen the cluster in parts")
    slurmjob.check_placement(place, count)
    most = screenrun.max_rounds(count)
    if rounds is not None and rounds > most:
        raise UsageError(f"--rounds {rounds}: {count} node(s) give at most {most} round(s) of "
                         "pairs with a new partner each" + ("" if most else
                                                            "; pairs need 2 nodes or more"))
    return count


def image_of(cfg: ClusterConfig) -> str | None:
    """The benchmark's image (the first configured): an existing file, or a reference."""
    image = next(iter(cfg.images()), None)
    if image is not None and shellsafe.looks_like_file(image) and not Path(image).is_file():
        raise RunError(f"the benchmark image {values.shown(image)} does not exist; import it "
                       "(rerun the installer, or <recipe>/setup.sh) or run llmb-run preflight")
    return image


class Plan(TypedDict):
    """What the job's tasks are told (llmb.container.screenrun reads it)."""

    schema: int
    force_cpu: bool
    rounds: int | None
    gpus_per_node: int
    gpu_type: str  # what the confirm pass's judge holds the first pass to
    timeout_s: int
    gpu: Params
    cpu: Params
    leaves: dict[str, str] | None  # each node's leaf switch: the pairs under one leaf first


def plan(smoke: bool, rounds: int | None, gpus_per_node: int, gpu_type: str,
         leaves: dict[str, str] | None = None) -> Plan:
    """The job's plan; a GPU screen's rounds FIT_ROUNDS unless --rounds says (the smoke
    screen keeps the schedule's default: its test cluster's nodes share two cores)."""
    chosen = rounds if rounds is not None or smoke else FIT_ROUNDS
    return {"schema": 1, "force_cpu": smoke, "rounds": chosen, "gpus_per_node": gpus_per_node,
            "gpu_type": gpu_type, "timeout_s": COLLECTIVE_TIMEOUT_S, "gpu": GPU_PARAMS,
            "cpu": CPU_PARAMS, "leaves": leaves}


def topology(place: Placement) -> slurmtopology.Topology:
    """Each node's leaf switch, asked of Slurm once, before the job (its tasks pair by it):
    the nodes of --nodelist, or every node Slurm's topology names, at most results.MAX_NODES
    (what a plan carries)."""
    found = slurmtopology.resolve()
    if found.leaves is not None and place.nodelist:
        return slurmtopology.of_nodes(
            found.leaves, placement.expand_hostlist("--nodelist", place.nodelist))
    if found.leaves is not None and len(found.leaves) > results.MAX_NODES:
        return slurmtopology.Topology(None, f"one tier: Slurm's topology names "
                                      f"{len(found.leaves)} nodes, more than a screen's plan "
                                      f"carries ({results.MAX_NODES}); give --nodelist")
    return found


def job_spec(cfg: ClusterConfig, nodes: int, folder: Path) -> slurmjob.JobSpec:
    """One task per GPU on exclusive nodes (slurmjob adds the account, partition, GPU request
    and placement)."""
    return slurmjob.JobSpec(JOB_NAME, nodes, cfg.gpus_per_node, JOB_TIME,
                            folder / "screen-%j.out", exclusive=True)


def sbatch_options(cfg: ClusterConfig, nodes: int, place: Placement, folder: Path) -> list[str]:
    """The job's options, as a benchmark's (GB200's default segment included)."""
    return slurmjob.sbatch_options(cfg, job_spec(cfg, nodes, folder), place)


def job_env(gpu: catalog.GpuType) -> dict[str, str]:
    """The variables every benchmark job of this GPU type gets (llmb.launch.jobenv), and
    NCCL's INFO lines of INIT and NET, which say what network it used between the nodes
    (llmb.llmbrun.screen.transport; each task writes them to a file of its own)."""
    return {**jobenv.BASE_ENV, **{str(k): str(v) for k, v in gpu.env.items()},
            **transport.ENV}


def job_script(cfg: ClusterConfig, folder: Path, image: str | None, args: list[str]) -> str:
    """The batch script: the first pass on every GPU (where it found nccl-tests'
    all_reduce_perf in the image, one all_reduce_perf step per group, a phase at a time);
    then one task that judges it and writes the confirm plan where it names something; then
    the confirm pass on the nodes that plan names (llmb.llmbrun.screen.confirm)."""
    q = shlex.quote
    repo = cfg.repo
    env = job_env(cfg.gpu)
    mounts = f"{repo}:{repo},{folder}:{folder}"
    container = (f"--container-image={q(image)} --container-mounts={q(mounts)} "
                 f"--container-name={JOB_NAME} "
                 f"--container-env={','.join(sorted(env))} " if image else "")
    per_node = cfg.gpus_per_node
    step = f"srun --mpi=pmix --ntasks-per-node={per_node} {container}"
    path = f"export PYTHONPATH={q(str(repo / 'common'))}${{PYTHONPATH:+:$PYTHONPATH}}; "
    second = folder / confirm.DIR
    first_pass, confirm_pass = (f"{path}exec python -m llmb.container.screenrun --plan "
                                f"{q(str(where / screenrun.PLAN_FILE))}"
                                for where in (folder, second))
    judge_step = f"{path}exec python -c {q(CONFIRM_STEP)} {q(str(folder))}"
    p = GPU_PARAMS
    perf = (f"{screenrun.NCCL_TESTS_BINARY} -b {p['sizes'][0]} -e {p['sizes'][-1]} -f 2 -g 1 "
            f"-n {p['iters']} -w {p['warmup']}")
    return "\n".join([
        "#!/bin/bash",
        "# llmb screen job, written by llmb-run screen. Submitted as:",
        f"# sbatch {shlex.join(args)} <this file>",
        "set -u",
        "export PYTHONUNBUFFERED=1",
        *(f"export {k}={q(v)}" for k, v in sorted(env.items())),
        *allreduces_function(step, per_node, perf),
        "# the first pass: one task per GPU; $PYTHONPATH is the container's, expanded by the",
        "# task's shell",
        "# shellcheck disable=SC2016",
        f"{step}bash -c {q(first_pass)}",
        'echo "LLMB_SCREEN probe exit $?"',
        f"allreduces {q(str(folder))}",
        "# the confirm pass: one task judges the first pass and, where it names something,",
        f"# writes {confirm.DIR}/plan.json and the nodes to measure again with their peers",
        "# shellcheck disable=SC2016",
        "srun --mpi=pmix --nodes=1 --ntasks=1 ${SLURMD_NODENAME:+--nodelist=\"$SLURMD_NODENAME\"}"
        f" {container}bash -c {q(judge_step)}",
        'echo "LLMB_SCREEN confirm plan exit $?"',
        f"second={q(str(second))}",
        f'if [ -s "$second/{screenrun.PLAN_FILE}" ] && read -r count nodes '
        f'<"$second/{confirm.NODES_FILE}"; then',
        "    # shellcheck disable=SC2016",
        f'    {step}--nodes="$count" --ntasks="$((count * {per_node}))" --nodelist="$nodes" '
        f"bash -c {q(confirm_pass)}",
        '    echo "LLMB_SCREEN confirm exit $?"',
        '    allreduces "$second"',
        "fi",
        "",
    ])


# the job's step between the passes (llmb.llmbrun.screen.confirm.main), run as python -c: the
# module is imported once (python -m would import it twice: as __main__, and by the package)
CONFIRM_STEP = ("import sys; from llmb.llmbrun.screen import confirm; "
                "sys.exit(confirm.main(sys.argv[1:]))")


def allreduces_function(step: str, per_node: int, perf: str) -> list[str]:
    """The script's function that runs all_reduce_perf over the groups a pass's tasks wrote
    ($1: the pass's folder), where they found it in the image: a step per group, the
    groups of a phase at once, a phase at a time."""
    return [
        "allreduces() {",
        f'    local nccl="$1/{screenrun.NCCL_TESTS_DIR}" logs="$1/{screenrun.NCCL_LOGS_DIR}"',
        '    local phase="" start="" cycles="" name index count nodes',
        f'    [ -s "$nccl/{screenrun.GROUPS_FILE}" ] || return 0',
        f'    cycles="$(cat "$nccl/{screenrun.CYCLES_FILE}" 2>/dev/null)"',
        "    # the repeats: -N (nccl-tests' cycles) where the probe found the option;",
        "    # bash passes the words after a redirection as arguments too",
        "    while read -r name index count nodes; do",
        '        if [ "$name" != "$phase" ]; then',
        "            wait",
        '            [ -z "$phase" ] || echo "$phase $start $(date +%s.%N)" >>"$nccl/walls.txt"',
        '            phase="$name" start="$(date +%s.%N)"',
        "        fi",
        f'        NCCL_DEBUG_FILE="$logs/$name.$index.%h.%p.log" '
        f'{step}--nodes="$count" --ntasks="$((count * {per_node}))" '
        f'--nodelist="$nodes" {perf} </dev/null ${{cycles:+-N "$cycles"}} '
        '>"$nccl/$name.$index.out" 2>&1 &',
        f'    done <"$nccl/{screenrun.GROUPS_FILE}"',
        "    wait",
        '    [ -z "$phase" ] || echo "$phase $start $(date +%s.%N)" >>"$nccl/walls.txt"',
        "}",
    ]


def new_folder(cfg: ClusterConfig) -> tuple[str, Path]:
    """screens/<UTC stamp>/, made here (a second screen in the same second waits for the
    next one: stamps order the screens)."""
    for _ in range(5):
        stamp = clock.stamp()
        folder = cfg.tree.screens / stamp
        try:
            folder.mkdir(parents=True)
            return stamp, folder
        except FileExistsError:
            time.sleep(1)
        except OSError as exc:
            raise RunError(f"cannot create {folder}: {exc.strerror}") from None
    raise RunError(f"cannot create a new folder under {cfg.tree.screens}: every stamp is taken")


def check_paths(cfg: ClusterConfig) -> None:
    """The repository and the screens folder are mounted into the container."""
    try:
        shellsafe.mount_path("the llmb repository", str(cfg.repo), label=True)
        shellsafe.mount_path("LLMB_INSTALL", str(cfg.install))
    except values.BadValue as exc:
        raise RunError(str(exc)) from None


def submit(cfg: ClusterConfig, nodes: int, place: Placement, smoke: bool, rounds: int | None,
           leaves: dict[str, str] | None = None) -> tuple[str, Path, str, str | None]:
    """Write the plan and the script, submit: (stamp, folder, job id, image)."""
    image = image_of(cfg)
    check_paths(cfg)
    stamp, folder = new_folder(cfg)
    options = sbatch_options(cfg, nodes, place, folder)
    files.atomic_write(folder / screenrun.PLAN_FILE,
                       json.dumps(plan(smoke, rounds, cfg.gpus_per_node, cfg.gpu.name, leaves),
                                  indent=1))
    files.atomic_write(folder / SCRIPT, job_script(cfg, folder, image, options),
                       files.EXECUTABLE)
    try:
        job = slurmjob.submit(folder / SCRIPT, options)
    except slurmjob.SubmitRefused as exc:
        raise RunError(f"sbatch refused the screen job: {exc}") from None
    return stamp, folder, job, image


def chosen_baseline(cfg: ClusterConfig, path: str | None
                    ) -> tuple[Path, baseline.Baseline] | None:
    """--baseline PATH, else the install's own baseline where one was saved (None: neither;
    a link to nothing is said, never taken as no baseline). Read before anything is
    submitted: a bad one is a bad option."""
    where = Path(path) if path is not None else baseline.default_path(cfg.tree)
    if path is None and not os.path.lexists(where):
        return None
    return where, baseline.load(where, own=path is None)


def kept_results(folder: Path, why: str) -> RunError:
    """A failure after the job, in one line: what went wrong, and where the job's raw results
    (the tasks' files, its output) are kept."""
    return RunError(f"{why}; the job's raw results are kept in {values.shown(folder)} "
                    f"({screenrun.RANKS_DIR}/, the job's output)")


def results_of(folder: Path, gpu: catalog.GpuType, allocated: list[str], per_node: int,
               leaves: dict[str, str] | None = None) -> results.ScreenDocument | None:
    """The screen's document from the job's files (results.document), the confirm pass
    merged into it (confirm.apply); a task's file it cannot make sense of is a RunError that
    keeps the files, never a traceback."""
    try:
        doc = results.document(folder, gpu, allocated, per_node, leaves)
        if doc is not None:
            confirm.apply(doc, folder, gpu, per_node, leaves)
        return doc
    except (LlmbError, OSError) as exc:
        raise kept_results(folder, f"cannot put the screen's results together: {exc}"
                           ) from None


def written(folder: Path, doc: results.ScreenDocument) -> str:
    """screen.json, held to its type as its readers hold it, then written (private); its
    text. What does not pass is refused in one line that keeps the job's files."""
    try:
        text = json.dumps(doc, indent=1, allow_nan=False) + "\n"
        results.checked(json.loads(text))
    except ValueError as exc:  # a non-finite number
        raise kept_results(folder, f"the screen's results hold {exc}") from None
    except records.BadRecord as exc:
        raise kept_results(folder, f"the screen's results are not what screen.json may "
                           f"hold: {exc.problem}") from None
    try:
        files.write_private(folder / layout.SCREEN_FILE, text)
    except OSError as exc:
        raise kept_results(folder, f"cannot write {values.shown(folder / layout.SCREEN_FILE)}"
                           f": {exc.strerror or exc}") from None
    return text


def cmd_screen(cfg: ClusterConfig, nodes: int | None, place: Placement, smoke: bool,
               rounds: int | None, fmt: str, timeout_s: float = DEFAULT_TIMEOUT_S,
               baseline_path: str | None = None, save_baseline: bool = False) -> int:
    cfg.require_slurm("screen")
    count = node_count(nodes, place, rounds)
    base = chosen_baseline(cfg, baseline_path)
    topo = topology(place)
    stamp, folder, job, image = submit(cfg, count, place, smoke, rounds, topo.leaves)
    info = slurmjob.wait(job, timeout_s, "screen job", announce=(
        f"{PROG}: screen job {job}: {count} node(s), {cfg.gpus_per_node} task(s) each"
        f"{' on the CPU (--smoke)' if smoke else ''}; results in {folder}")).info
    output = job_spec(cfg, count, folder).output_of(job)
    allocated = placement.expand_hostlist("nodes", info.nodes) if info.nodes else []
    if topo.leaves is not None and allocated:  # the allocated nodes' (the plan's map, restricted)
        topo = slurmtopology.of_nodes(topo.leaves, allocated)
    doc = results_of(folder, cfg.gpu, allocated, cfg.gpus_per_node, topo.leaves)
    if doc is None:
        raise RunError(f"the screen job {job} ended {info.state} before any task reported "
                       f"(see {output}): {last_error(output)}")
    doc.update({"stamp": stamp, "created": clock.iso(), "job_id": job,
                "job_state": info.state, "smoke": smoke, "image": image, "output": str(output),
                "topology": topo.said})
    if base is not None:
        baseline.apply(doc, base[1], str(base[0]))
    text = written(folder, doc)  # the screen's own result first, whatever --save-baseline finds
    unsaved = None
    if save_baseline:
        try:
            if keep(cfg, doc, folder):
                text = written(folder, doc)  # with where it was kept
        except RunError as exc:
            unsaved = exc
    print(text.rstrip("\n") if fmt == "json" else render.table(doc))
    if unsaved is not None:
        raise unsaved
    if doc["named"] or doc["suspects"]:
        print(f"{PROG}: screen: named {len(doc['named'])} figure(s) below their floor; "
              f"suspects: {','.join(doc['suspects']) or 'none'}", file=sys.stderr)
        return EXIT_NAMED
    return 0


def keep(cfg: ClusterConfig, doc: results.ScreenDocument, folder: Path) -> bool:
    """--save-baseline: this screen becomes the install's baseline, if it names nothing
    once the confirm pass has judged (what the first pass named and the confirm pass
    cleared does not count: it was slow once, not again); whether it was kept (a baseline
    that cannot be written is one line that says where the screen and the job's files
    are)."""
    where = baseline.default_path(cfg.tree)
    if doc["named"] or doc["suspects"]:
        print(f"{PROG}: screen: not saved as the baseline: it named "
              f"{len(doc['named'])} figure(s) after the confirm pass; a baseline must be a "
              "healthy screen", file=sys.stderr)
        return False
    try:
        baseline.save(where, doc)
    except (OSError, ValueError, records.BadRecord) as exc:  # ValueError: not finite
        why = exc.problem if isinstance(exc, records.BadRecord) else \
            (exc.strerror if isinstance(exc, OSError) and exc.strerror else exc)
        raise kept_results(folder, f"--save-baseline: cannot write {values.shown(where)}: "
                           f"{why}; this screen is in {values.shown(folder / 'screen.json')}"
                           ) from None
    doc["saved_baseline"] = str(where)
    cleared = len(doc["confirm"]["cleared"]) if "confirm" in doc else 0
    print(f"{PROG}: screen: saved as the cluster's baseline: {where}" + (
        f" ({cleared} figure(s) named by the first pass were cleared by the confirm pass)"
        if cleared else ""), file=sys.stderr)
    return True


def last_error(output: Path) -> str:
    """The last line of the job's output that says something went wrong, else its last line."""
    try:
        lines = [ln.strip() for ln in files.read_bounded(output, 64 << 20).decode(
            "utf-8", "replace").splitlines() if ln.strip()]
    except files.FileRefused as exc:
        return f"no output ({exc.reason})"
    bad = [ln for ln in lines if "error" in ln.lower() or "llmb screen:" in ln]
    return values.shown((bad or lines or ["(empty)"])[-1])[:300]
