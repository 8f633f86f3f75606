"""`llmb-run archive` packs an install's results for sharing; `verify-archive` checks one.

An archive (`.tar.gz`, everything under `llmb-archive/`) holds:
    runs/<workload>/experiments/<exp>/<run>/   each run's llmb_manifest.json, its sbatch script
                                              and the .out files of its job dir (training log,
                                              batch output): an allow-list, nothing else
    analysis.json                             the analyzer's JSON over runs/
    report/                                   the analyzer's HTML report (when it can write one)
    history.jsonl, preflight.json             llmb-run's history; the newest preflight report
    system.json                               sinfo/scontrol facts, GPU and driver facts where
                                              visible, versions of llmb, nemo-run, the image
    ARCHIVE.json                              the index: every file with its size and sha256,
                                              the runs, what was left out and why
Never in it: images, checkpoints, nsys reports, nemo-run's own state files (they can hold a
serialized executor with its secrets), links, tokens. Every file is redacted: known secret
values (the HF token, secret-named variables of the environment and of cluster_config.yaml),
anything shaped like a Hugging Face token, and the value of every secret-named assignment
(`HF_TOKEN=...`, `"password": "..."`).

verify-archive opens the archive without trusting it (no links, no absolute or `..` paths),
checks every listed file against its size and hash, reports files nobody listed, checks that
each run's manifest has its log, analyzes the archived logs again and compares with
analysis.json, and looks for secret-named values left in clear. Exit 0 when complete and
consistent; 1 with one line per problem otherwise.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from llmb import analysis, catalog, files, redact, slurm, values
from llmb.runconfig import PROG, ClusterConfig, RunError

FORMAT = 1
ROOT = "llmb-archive"
INDEX = "ARCHIVE.json"
MANIFEST = "llmb_manifest.json"
MAX_UNPACKED = 200 * 10**9  # bytes: refuse archives that claim to unpack to more
# Lower-case keys that hold secrets in JSON/YAML text (upper-case names go by redact's rules).
SECRET_KEYS = {"password", "passwd", "secret", "token", "api_key", "apikey", "access_key",
               "access_token", "auth_token", "client_secret", "app_secret", "hf_token",
               "secret_key", "private_key"}
_ASSIGNMENT = re.compile(
    r"""(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?P<sep>"?\s*[=:]\s*)"""
    r"""(?P<value>"[^"\n]*"|'[^'\n]*'|[^\s"',;|]+)""")
_HF_TOKEN = re.compile(r"\bhf_[A-Za-z0-9]{20,}\b")
LEFT_OUT = {
    "nsys_reports": "nsys profiles (large, and not needed to check the numbers)",
    "checkpoints": "model checkpoints (large)",
    "nemo_run_state": "nemo-run's own state (it can hold a serialized executor with secrets)",
    "links": "symbolic links (they could point anywhere)",
    "other": "files outside the allow-list",
}


# --- redaction --------------------------------------------------------------------------------

def _secret_name(name: str) -> bool:
    return redact.is_secret_name(name) and (name.isupper() or name.lower() in SECRET_KEYS)


def redact_text(text: str, secrets: Iterable[str]) -> str:
    """Known secret values, HF-token-shaped words and secret-named assignments masked."""
    text = redact.redact(text, secrets)
    text = _HF_TOKEN.sub(redact.MASK, text)

    def mask(m: re.Match[str]) -> str:
        if not _secret_name(m.group("name")) or redact.MASK in m.group("value"):
            return m.group(0)
        quote = m.group("value")[0] if m.group("value")[0] in "\"'" else ""
        return f"{m.group('name')}{m.group('sep')}{quote}{redact.MASK}{quote}"

    return _ASSIGNMENT.sub(mask, text)


def clear_secrets(text: str) -> list[str]:
    """Secret-named assignments whose value is not masked (for verify-archive)."""
    found = []
    for m in _ASSIGNMENT.finditer(text):
        value = m.group("value").strip("\"'")
        if _secret_name(m.group("name")) and value and redact.MASK not in value:
            found.append(m.group("name"))
    if _HF_TOKEN.search(text):
        found.append("a Hugging Face token")
    return found


def known_secrets(cfg: ClusterConfig) -> set[str]:
    extra: list[str | None] = []
    token_file = cfg.launcher.get("hf_token_file")
    if token_file:
        with contextlib.suppress(OSError, UnicodeDecodeError):
            extra.append(Path(token_file).read_text().strip())
    return redact.secret_values({**cfg.env, **os.environ}, extra)


def copy_redacted(src: Path, dst: Path, secrets: set[str]) -> None:
    """Copy line by line (logs can be gigabytes), masking secrets; bytes that are not UTF-8
    pass through unchanged."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    with src.open("rb") as fin, dst.open("wb") as fout:
        for raw in fin:
            line = raw.decode("utf-8", "surrogateescape")
            fout.write(redact_text(line, secrets).encode("utf-8", "surrogateescape"))


# --- what goes in -----------------------------------------------------------------------------

def find_runs(workloads: Path) -> list[Path]:
    """Run directories (those holding a run manifest) of every workload."""
    return sorted(p.parent for p in workloads.glob(f"*/experiments/*/*/{MANIFEST}")
                  if p.is_file() and not p.is_symlink())


def classify(run_dir: Path, path: Path) -> str | None:
    """None for a file that goes in, else the LEFT_OUT category it falls under."""
    rel = path.relative_to(run_dir)
    parts = rel.parts
    if path.is_symlink():
        return "links"
    if "nsys_profile" in parts or path.suffix in (".nsys-rep", ".qdrep", ".sqlite", ".qdstrm"):
        return "nsys_reports"
    if "code" in parts or "checkpoints" in parts or path.suffix == ".distcp":
        return "checkpoints"
    if len(parts) == 1 and (rel.name == MANIFEST or rel.name.endswith("_sbatch.sh")):
        return None
    if len(parts) == 2 and rel.suffix == ".out":
        return None
    if "nemo_run" in parts or rel.name.startswith("_") or len(parts) == 1:
        return "nemo_run_state"
    return "other"


def system_facts(cfg: ClusterConfig) -> dict[str, Any]:
    from llmb import launch  # version helpers; nemo-run is not imported by them

    facts: dict[str, Any] = {
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "hostname": platform.node(), "platform": platform.platform(),
        "python": platform.python_version(),
        "llmb": {"version": launch.llmb_version(), "git_commit": launch.git_commit()},
        "gpu_type": cfg.gpu_type, "cluster_type": cfg.cluster_type,
        "slurm": {"account": cfg.slurm.get("account"), "partition": cfg.slurm.get("partition"),
                  "gres": cfg.slurm.get("gres")} if cfg.slurm else None,
        "workloads": {}, "cluster": {}, "gpus_on_this_node": None,
    }
    for name, w in cfg.workloads.items():
        entry: dict[str, Any] = {"venv_kind": w.get("venv_kind")}
        python = Path(str(w["venv"])) / "bin" / "python"
        entry["nemo_run"] = _output([str(python), "-c", "import importlib.metadata as m; "
                                     "print(m.version('nemo_run'))"])
        with contextlib.suppress(catalog.CatalogError):
            entry["image_reference"] = catalog.find_recipe(name).image
        if w.get("image"):
            image = Path(str(w["image"]))
            entry["image_file"] = image.name
            with contextlib.suppress(OSError):
                st = image.stat()
                entry["image_bytes"] = st.st_size
                entry["image_mtime"] = time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                     time.gmtime(st.st_mtime))
        facts["workloads"][name] = entry
    if cfg.cluster_type == "slurm":
        c = facts["cluster"]
        c["version"] = _output(["sinfo", "--version"])
        c["partitions"] = _output(["sinfo", "-h", "-o", "%P|%a|%l|%D|%G|%f|%N"], lines=True)
        c["nodes"] = [dict(re.findall(r"\b(NodeName|CPUTot|RealMemory|Gres|State|Arch|OS|"
                                      r"AvailableFeatures|Partitions)=(\S+)", line))
                      for line in _output(["scontrol", "show", "nodes", "-o"], lines=True)
                      or []]
        config = _output(["scontrol", "show", "config"], lines=True) or []
        keep = ("ClusterName", "SLURM_VERSION", "SelectType", "SelectTypeParameters",
                "MpiDefault", "GresTypes", "ProctrackType", "TaskPlugin", "TopologyPlugin",
                "AccountingStorageType", "MinJobAge", "PrologFlags", "SwitchType")
        c["config"] = {k.strip(): v.strip() for k, _, v in
                       (ln.partition("=") for ln in config) if k.strip() in keep}
    facts["gpus_on_this_node"] = _output(["nvidia-smi", "--query-gpu=name,driver_version,"
                                          "memory.total", "--format=csv,noheader"], lines=True)
    return facts


def _output(argv: list[str], lines: bool = False) -> Any:
    if shutil.which(argv[0]) is None and not Path(argv[0]).is_file():
        return None
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, errors="replace",
                              timeout=slurm.TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    if proc.returncode != 0:
        return None
    text = proc.stdout.strip()
    return [ln for ln in text.splitlines() if ln.strip()] if lines else text


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def stage(cfg: ClusterConfig, root: Path) -> dict[str, Any]:
    """Lay the archive out under root; return the index (without its file list)."""
    secrets = known_secrets(cfg)
    workloads = cfg.workloads_dir
    runs_out: list[dict[str, Any]] = []
    left: dict[str, dict[str, int]] = {k: {"files": 0, "bytes": 0} for k in LEFT_OUT}
    for run_dir in find_runs(workloads) if workloads.is_dir() else []:
        rel = run_dir.relative_to(workloads)
        entry: dict[str, Any] = {"run": f"runs/{rel.as_posix()}", "logs": [], "files": []}
        for path in sorted(p for p in run_dir.rglob("*") if p.is_file() or p.is_symlink()):
            kind = classify(run_dir, path)
            if kind is not None:
                left[kind]["files"] += 1
                with contextlib.suppress(OSError):
                    left[kind]["bytes"] += path.lstat().st_size
                continue
            target = root / "runs" / rel / path.relative_to(run_dir)
            copy_redacted(path, target, secrets)
            name = target.relative_to(root).as_posix()
            entry["files"].append(name)
            if path.name.startswith("log-") and path.suffix == ".out":
                entry["logs"].append(name)
        runs_out.append(entry)
    (root / "runs").mkdir(parents=True, exist_ok=True)
    if cfg.history.path.is_file():
        copy_redacted(cfg.history.path, root / "history.jsonl", secrets)
    from llmb import preflight

    latest = preflight.latest(cfg)
    if latest is not None:
        files.atomic_write(root / "preflight.json",
                           redact_text(json.dumps(latest, indent=2) + "\n", secrets))
    files.atomic_write(root / "system.json",
                       redact_text(json.dumps(system_facts(cfg), indent=2) + "\n", secrets))
    data = analysis.run(["--format=json", str(root / "runs")])
    try:
        json.loads(data.stdout)
        files.atomic_write(root / "analysis.json", data.stdout)
        analysis_note = None
    except json.JSONDecodeError:
        analysis_note = analysis.last_line(data.stderr) or f"exit {data.returncode}"
    report = root / "report"
    proc = analysis.run([f"--report={report}", "--format=json", str(root / "runs")])
    if (report / "index.html").is_file():
        report_state = {"status": "written", "detail": None}
    else:
        shutil.rmtree(report, ignore_errors=True)
        report_state = {"status": "unavailable",
                        "detail": analysis.last_line(proc.stderr) or f"exit {proc.returncode}"}
    return {"format": FORMAT, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "install": str(cfg.install), "runs": runs_out, "analysis_error": analysis_note,
            "report": report_state,
            "left_out": {k: {**v, "why": LEFT_OUT[k]} for k, v in left.items() if v["files"]}}


def cmd_archive(cfg: ClusterConfig, output: str | None) -> int:
    out = Path(output) if output else cfg.install / \
        f"llmb-archive-{time.strftime('%Y%m%d-%H%M%S')}.tar.gz"
    if not out.parent.is_dir():
        raise RunError(f"--output {values.shown(out)}: {out.parent} is not a directory")
    with tempfile.TemporaryDirectory(prefix="llmb-archive-") as tmp:
        root = Path(tmp) / ROOT
        root.mkdir()
        index = stage(cfg, root)
        listed = sorted(p for p in root.rglob("*") if p.is_file())
        index["files"] = {p.relative_to(root).as_posix(): {"bytes": p.stat().st_size,
                                                           "sha256": sha256(p)}
                          for p in listed}
        (root / INDEX).write_text(json.dumps(index, indent=2) + "\n")
        partial = out.with_name(f".{out.name}.partial.{os.getpid()}")
        try:
            with tarfile.open(partial, "w:gz") as tar:
                tar.add(root, arcname=ROOT, filter=_normalized)
            os.replace(partial, out)
        finally:
            with contextlib.suppress(OSError):
                partial.unlink()
    runs = len(index["runs"])
    logs = sum(len(r["logs"]) for r in index["runs"])
    print(f"archive: {out} ({runs} run(s), {logs} log(s), {len(index['files'])} file(s))")
    for kind, info in index["left_out"].items():
        print(f"  left out: {info['files']} file(s), {info['bytes'] / 1e6:.1f} MB of "
              f"{LEFT_OUT[kind]}")
    if index["report"]["status"] != "written":
        print(f"  no HTML report: {index['report']['detail']}")
    return 0


def _normalized(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mode = 0o755 if info.isdir() else 0o644
    return info


# --- verify -----------------------------------------------------------------------------------

def safe_members(tar: tarfile.TarFile) -> tuple[list[tarfile.TarInfo], list[str]]:
    members, problems = [], []
    total = 0
    for m in tar.getmembers():
        name = m.name
        parts = Path(name).parts
        if name.startswith("/") or ".." in parts or not parts or parts[0] != ROOT:
            problems.append(f"{values.shown(name)}: a path outside {ROOT}/")
        elif not (m.isfile() or m.isdir()):
            problems.append(f"{values.shown(name)}: not a regular file (links and devices "
                            "are never part of an archive)")
        else:
            total += m.size
            members.append(m)
    if total > MAX_UNPACKED:
        problems.append(f"the archive claims {total / 1e9:.0f} GB of content; refused")
        members = []
    return members, problems


def compare_analysis(stored: dict[str, Any], fresh: dict[str, Any]) -> list[str]:
    """Differences between the archived analysis and one computed from the archived logs."""
    problems = []
    keys = ("status", "max_iteration", "time_mean", "time_std_dev", "reason", "suspect_nodes")
    old = {r.get("filename"): r for r in stored.get("results") or [] if isinstance(r, dict)}
    new = {r.get("filename"): r for r in fresh.get("results") or [] if isinstance(r, dict)}
    for name in sorted(set(old) | set(new), key=str):
        if name not in new:
            problems.append(f"analysis.json has a result for {name}, but there is no such log")
        elif name not in old:
            problems.append(f"{name} is not in analysis.json")
        else:
            for key in keys:
                a, b = old[name].get(key), new[name].get(key)
                if isinstance(a, float) and isinstance(b, float) and \
                        abs(a - b) <= 1e-9 * max(1.0, abs(a)):
                    continue
                if a != b:
                    problems.append(f"{name}: analysis.json says {key}={a}, its log gives {b}")
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
    problems = []
    listed: dict[str, Any] = index["files"]
    present = {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}
    present.discard(INDEX)
    for name in sorted(listed):
        info = listed[name] if isinstance(listed[name], dict) else {}
        path = root / name
        if name not in present:
            problems.append(f"{name} is listed in {INDEX} but missing")
        elif path.stat().st_size != info.get("bytes") or sha256(path) != info.get("sha256"):
            problems.append(f"{name} was changed after the archive was made (size or sha256 "
                            "differs from the index)")
    problems += [f"{name} is in the archive but not in {INDEX}"
                 for name in sorted(present - set(listed))]
    for run in index.get("runs") or []:
        run_dir = root / str(run.get("run", ""))
        manifest = run_dir / MANIFEST
        if not manifest.is_file():
            problems.append(f"{run.get('run')}: no {MANIFEST}")
            continue
        try:
            data = json.loads(manifest.read_text())
        except ValueError:
            problems.append(f"{run.get('run')}: {MANIFEST} is not JSON")
            continue
        logs = list(run_dir.glob("*/log-*.out"))
        if not logs:
            problems.append(f"{run.get('run')}: the manifest has no training log (log-*.out)")
        if data.get("cluster_type") == "slurm" and not list(run_dir.glob("*_sbatch.sh")):
            problems.append(f"{run.get('run')}: no sbatch script")
    if index.get("analysis_error") is None:
        try:
            stored = json.loads((root / "analysis.json").read_text())
            fresh = analysis.analyze_json(root / "runs")
            problems += compare_analysis(stored, fresh)
        except (OSError, ValueError):
            problems.append("analysis.json is missing or not JSON")
        except analysis.AnalyzerError as exc:
            problems.append(f"the archived logs cannot be analyzed: {exc}")
    if (index.get("report") or {}).get("status") == "written" and \
            not (root / "report" / "index.html").is_file():
        problems.append("report/index.html is missing")
    for name in sorted(present):
        path = root / name
        with path.open("rb") as fh:
            for number, raw in enumerate(fh, 1):
                found = clear_secrets(raw.decode("utf-8", "replace"))
                if found:
                    problems.append(f"{name} line {number}: {found[0]} in clear")
                    break
    return problems, index


def cmd_verify(path: Path, out=None) -> int:
    out = out or sys.stdout
    try:
        tar = tarfile.open(path, "r:*")  # noqa: SIM115 (closed by the with below)
    except (OSError, tarfile.TarError) as exc:
        raise RunError(f"{values.shown(path)} cannot be opened as an archive: "
                       f"{getattr(exc, 'strerror', None) or exc}") from None
    with tar, tempfile.TemporaryDirectory(prefix="llmb-verify-") as tmp:
        members, problems = safe_members(tar)
        try:
            tar.extractall(tmp, members=members, filter="data")
        except (OSError, tarfile.TarError, EOFError, zlib.error) as exc:
            raise RunError(f"{values.shown(path)} is damaged: {exc}") from None
        found, index = verify_tree(Path(tmp) / ROOT)
        problems += found
    runs = len(index.get("runs") or [])
    if problems:
        print(f"{PROG}: verify-archive: {values.shown(path)}: {len(problems)} problem(s):",
              file=out)
        for p in problems:
            print(f"  {values.shown(p)}", file=out)
        return 1
    note = ""
    if (index.get("report") or {}).get("status") != "written":
        note = f"; no HTML report ({(index.get('report') or {}).get('detail')})"
    print(f"{values.shown(path)}: complete and consistent: {runs} run(s), "
          f"{len(index.get('files') or {})} file(s), analysis matches the logs{note}", file=out)
    return 0
