"""`llmb-run verify-archive FILE`: is an archive of llmb.llmbrun.archive complete and consistent?

The archive is not trusted. Before anything is written, every member is checked: only regular
files and directories under `llmb-archive/`, no absolute or `..` paths, no links or devices,
no name twice, a plausible total size. An archive that fails any of these is refused whole;
nothing of it is extracted. The rest is unpacked by this module itself (never tarfile's
extractall), file by file, under a fresh private directory.

Then, on the unpacked tree: every file listed in ARCHIVE.json is present with its size and
sha256, and no file is there that the index does not list; each run's manifest is JSON and has
its training log (and a Slurm run its job script); system.json and, where the index says they
were made, analysis.json and report/index.html are present; the analyzer, run again over the
archived logs, gives what analysis.json says; and no file copied from the install holds a
secret in clear (llmb.shared.redact.clear_secrets; the analyzer's outputs are made from those).
Exit 0 when all holds; 1 with one line per problem otherwise.

What this proves: the archive is whole and was not changed after it was made, unless someone
rewrote the logs, the analysis and the index together (the index is not signed).
"""

from __future__ import annotations

import json
import shutil
import sys
import tarfile
import tempfile
import zlib
from pathlib import Path, PurePosixPath
from typing import Any, TextIO

from llmb import manifest
from llmb.llmbrun import report
from llmb.llmbrun.archive import INDEX, ROOT, pieces, sha256
from llmb.llmbrun.clusterconfig import PROG, RunError
from llmb.shared import files, redact, values
from llmb.shared.errors import LlmbError

MAX_UNPACKED = 200 * 10**9  # bytes: refuse archives that claim to unpack to more
MAX_MEMBERS = 1_000_000
COMPARED = ("status", "max_iteration", "time_mean", "time_std_dev", "tflops_per_gpu_mean",
            "reason", "suspect_nodes", "pct_of_reference")
# Made by the analyzer from the redacted runs, never redacted themselves (a "config_key" is
# no secret): not scanned for secrets in clear.
ANALYZER_OUTPUT = ("analysis.json", "report/")


class Refused(LlmbError):
    """The archive cannot be opened safely; str() is one line."""


def unsafe(member: tarfile.TarInfo) -> str | None:
    """Why this member must not be extracted, or None."""
    name = member.name
    path = PurePosixPath(name)
    if name.startswith("/") or "\\" in name or ".." in path.parts:
        return "an absolute path or a path with '..'"
    if not path.parts or path.parts[0] != ROOT:
        return f"a path outside {ROOT}/"
    if values.control_characters(name):
        return "a name with control characters"
    if member.issym() or member.islnk():
        return f"a link (to {values.shown(member.linkname)}); an archive holds no links"
    if not (member.isfile() or member.isdir()):
        return "not a regular file or directory (a device or a fifo)"
    return None


def safe_members(tar: tarfile.TarFile) -> list[tarfile.TarInfo]:
    """Every member, once each, checked; Refused naming the first few that are not safe."""
    members: list[tarfile.TarInfo] = []
    seen: set[str] = set()
    problems: list[str] = []
    total = 0
    for member in tar:
        name = member.name.rstrip("/")
        why = unsafe(member)
        if why is None and name in seen:
            why = "it is in the archive twice (the second copy would replace the first)"
        if why:
            problems.append(f"{values.shown(member.name)}: {why}")
        seen.add(name)
        total += max(0, member.size)
        members.append(member)
        if len(members) > MAX_MEMBERS or total > MAX_UNPACKED:
            raise Refused(f"it claims more than {MAX_MEMBERS} members or "
                          f"{MAX_UNPACKED / 1e9:.0f} GB; not an llmb archive")
    if problems:
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        raise Refused("unsafe member(s), nothing was extracted: " + "; ".join(problems[:3])
                      + more)
    return members


def extract(tar: tarfile.TarFile, members: list[tarfile.TarInfo], dest: Path) -> None:
    """Write the checked members under dest (0700 directories, 0600 files)."""
    need = sum(m.size for m in members if m.isfile())
    free = shutil.disk_usage(dest).free
    if need > free:
        raise Refused(f"it unpacks to {need / 1e9:.1f} GB but {dest.parent} has "
                      f"{free / 1e9:.1f} GB free; set TMPDIR to a larger filesystem")
    base = dest.resolve()
    for m in members:
        target = (base / m.name).resolve()
        if base not in target.parents:  # unsafe() already refused this; never write outside
            raise Refused(f"{values.shown(m.name)}: a path outside the archive")
        if m.isdir():
            target.mkdir(mode=0o700, parents=True, exist_ok=True)
            continue
        target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        source = tar.extractfile(m)
        if source is None:
            raise Refused(f"{values.shown(m.name)}: cannot be read")
        with source, open(target, "xb") as out:
            target.chmod(0o600)
            shutil.copyfileobj(source, out, 1 << 20)


def compare_analysis(stored: dict[str, Any], fresh: dict[str, Any]) -> list[str]:
    """Differences between the archived analysis and one computed from the archived logs."""
    problems = []
    old = {r.get("filename"): r for r in stored.get("results") or [] if isinstance(r, dict)}
    new = {r.get("filename"): r for r in fresh.get("results") or [] if isinstance(r, dict)}
    for name in sorted(set(old) | set(new), key=str):
        if name not in new:
            problems.append(f"analysis.json has a result for {name}, but there is no such log")
        elif name not in old:
            problems.append(f"{name} is not in analysis.json")
        else:
            for key in COMPARED:
                a, b = old[name].get(key), new[name].get(key)
                if isinstance(a, float) and isinstance(b, float) and \
                        abs(a - b) <= 1e-9 * max(1.0, abs(a)):
                    continue
                if a != b:
                    problems.append(f"{name}: analysis.json says {key}={a}, its log gives {b}")
                    break
    verdicts = {c.get("config_key"): c.get("verdict") for c in stored.get("configurations") or []
                if isinstance(c, dict)}
    for c in fresh.get("configurations") or []:
        if verdicts.get(c.get("config_key")) != c.get("verdict"):
            problems.append(f"configuration {c.get('config_key')}: analysis.json says verdict="
                            f"{verdicts.get(c.get('config_key'))}, the logs give "
                            f"{c.get('verdict')}")
    return problems


def check_files(root: Path, listed: dict[str, Any]) -> tuple[list[str], set[str]]:
    problems = []
    present = {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}
    present.discard(INDEX)
    for name in sorted(listed):
        info = listed[name] if isinstance(listed[name], dict) else {}
        path = root / name
        if name not in present:
            problems.append(f"{name} is listed in {INDEX} but missing")
        elif path.stat().st_size != info.get("bytes") or sha256(path) != info.get("sha256"):
            problems.append(f"{name} was changed after the archive was made (its size or "
                            f"sha256 differs from {INDEX})")
    problems += [f"{name} is in the archive but not in {INDEX}"
                 for name in sorted(present - set(listed))]
    return problems, present


def check_runs(root: Path, index: dict[str, Any]) -> list[str]:
    problems = []
    for run in index.get("runs") or []:
        name = str(run.get("run", "")) if isinstance(run, dict) else ""
        run_dir = root / name
        if not name.startswith("runs/") or not run_dir.is_dir():
            problems.append(f"run {values.shown(name)} of {INDEX} is missing")
            continue
        if not run.get("manifest"):
            continue  # a run made without llmb's launch: nothing to check it against
        try:
            recorded = manifest.read(manifest.path_in(run_dir))
        except manifest.ManifestError as exc:
            problems.append(f"{name}: no {manifest.NAME}" if exc.missing
                            else f"{name}: {manifest.NAME} {exc.reason}")
            continue
        if not list(run_dir.glob("*/log-*.out")):
            problems.append(f"{name}: its manifest has no training log (log-*.out): the job "
                            "never wrote one, or the log was left out")
        if recorded.get("cluster_type") == "slurm" and not list(run_dir.glob("*_sbatch.sh")):
            problems.append(f"{name}: no job script (*_sbatch.sh)")
    return problems


def check_analysis(root: Path, index: dict[str, Any]) -> list[str]:
    if index.get("analysis_error") is not None:
        return []  # the archive says why there is none
    try:
        stored = json.loads((root / "analysis.json").read_text())
    except (OSError, ValueError):
        return ["analysis.json is missing or not JSON"]
    try:
        fresh = report.analyze_json("runs", cwd=root)
    except report.AnalyzerError as exc:
        return [f"the archived logs cannot be analyzed: {exc}"]
    return compare_analysis(stored, fresh)


def check_secrets(root: Path, names: set[str]) -> list[str]:
    problems = []
    for name in sorted(names):
        if name.startswith(ANALYZER_OUTPUT):
            continue
        with (root / name).open("rb") as fh:
            for number, raw in enumerate(pieces(fh), 1):
                found = redact.clear_secrets(raw.decode("utf-8", "replace"))
                if found:
                    problems.append(f"{name} line {number}: {found[0]} in clear")
                    break
    return problems


def verify_tree(root: Path) -> tuple[list[str], dict[str, Any]]:
    """Problems of an unpacked archive (root = .../llmb-archive), and its index."""
    try:
        index = json.loads((root / INDEX).read_text())
        if not isinstance(index, dict) or not isinstance(index.get("files"), dict):
            raise ValueError
    except (OSError, ValueError):
        return [f"no readable {INDEX}: not an llmb archive, or its index was removed"], {}
    problems, present = check_files(root, index["files"])
    if "system.json" not in present:
        problems.append("system.json (the system description) is missing")
    problems += check_runs(root, index)
    problems += check_analysis(root, index)
    if (index.get("report") or {}).get("status") == "written" and \
            not (root / "report" / "index.html").is_file():
        problems.append("report/index.html is missing")
    problems += check_secrets(root, present)
    return problems, index


def cmd_verify(path: Path, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    shown = values.shown(path)
    problem = files.path_problem(path, "file")  # never raises (a name too long, a loop)
    if problem == "does not exist":
        problem = "no such file"
    elif problem is None and not path.is_file():
        problem = "is not a file"  # a device or a fifo
    if problem:
        raise RunError(f"verify-archive {shown}: {problem}")
    try:
        with tarfile.open(path, "r:*") as tar, \
                tempfile.TemporaryDirectory(prefix="llmb-verify-") as tmp:
            extract(tar, safe_members(tar), Path(tmp))
            problems, index = verify_tree(Path(tmp) / ROOT)
    except Refused as exc:
        raise RunError(f"verify-archive {shown}: refused: {exc}") from None
    except (OSError, tarfile.TarError, EOFError, zlib.error) as exc:
        raise RunError(f"verify-archive {shown}: not a readable archive (damaged or "
                       f"truncated): {values.shown(getattr(exc, 'strerror', None) or exc)}"
                       ) from None
    if problems:
        print(f"{PROG}: verify-archive: {shown}: {len(problems)} problem(s):", file=out)
        for p in problems:
            print(f"  {values.shown(p)}", file=out)
        return 1
    runs = index.get("runs") or []
    note = ""
    if (index.get("report") or {}).get("status") != "written":
        note += f"; no HTML report ({(index.get('report') or {}).get('detail')})"
    if index.get("analysis_error"):
        note += f"; no analysis ({index['analysis_error']})"
    foreign = sum(1 for r in runs if isinstance(r, dict) and not r.get("manifest"))
    if foreign:
        note += f"; {foreign} run(s) without a manifest"
    checked = "" if index.get("analysis_error") else ", analysis matches the logs"
    print(f"{shown}: complete and consistent: {len(runs)} run(s), "
          f"{len(index.get('files') or {})} file(s){checked}{note}", file=out)
    return 0
