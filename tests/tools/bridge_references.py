"""Write common/references/megatron-bridge.yaml from Megatron-Bridge's performance summary.

Megatron-Bridge (github.com/NVIDIA-NeMo/Megatron-Bridge) publishes its pre-training numbers as
markdown tables in docs/performance-summary.md (the newest NeMo container) and
docs/performance-summary-archive.md (the earlier ones, back to 25.09). This script reads both
files at one git ref of a Megatron-Bridge clone and prints every table row as one YAML row,
with the file and line it came from, so the data file is reproducible:

  git clone https://github.com/NVIDIA-NeMo/Megatron-Bridge /tmp/mbridge
  PYTHONPATH=common python3 tests/tools/bridge_references.py \\
      --git-dir /tmp/mbridge/.git --ref v0.6.0 > common/references/megatron-bridge.yaml

How a table line becomes rows:
- `## <release> NeMo Container` gives the container; `### Pre-Training|SFT|LoRA Performance`
  the task; `#### Model: X` or `#### System: X` whichever of model and system the table's
  columns lack.
- A cell `A (B)` holds two configurations: the line gives a row of the values outside the
  parentheses and a row (parenthesized: true) of those inside, a cell without parentheses
  holding for both.
- `n/a` is null. A footnote mark `[^label]` is dropped from the number and kept as footnote.
- Precision: normalized by llmb.recipes.published.PRECISION_ALIASES, the published text kept.
  The 25.09 section has no precision column; its note says the parenthesized numbers use finer
  quantization granularities (32x32 MX blocks on GB200 and B200, 128x128 / 1x128 blocks on
  H100), and 25.11 prints the same configurations as FP8-CS (FP8-MX): so its rows are fp8_cs,
  parenthesized fp8_mx (fp8_sc on H100), with precision_published null.
- The model's key comes from MODEL_KEYS (a name not there stops the script: add it); the
  printed name, with a variant such as "(w/o MTP)", is kept as model_published.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from collections.abc import Iterator

from llmb.recipes.published import normalize_precision

FILES = ("docs/performance-summary.md", "docs/performance-summary-archive.md")
REPOSITORY = "NVIDIA-NeMo/Megatron-Bridge"

MODEL_KEYS = {
    "DeepSeekV3": "deepseek_v3", "DeepSeekV4 Flash": "deepseek_v4_flash",
    "GPT OSS 120B": "gpt_oss_120b", "Kimi_K2": "kimi_k2",
    "LLAMA3_8B": "llama3_8b", "LLAMA3_70B": "llama3_70b", "LLAMA3.1_405B": "llama3.1_405b",
    "Nemotron_3_Nano": "nemotron_3_nano", "Nemotron_3_Super": "nemotron_3_super",
    "Nemotron_3_Ultra": "nemotron_3_ultra", "Nemotron_3_5_Lightning": "nemotron_3_5_lightning",
    "Qwen3_30B_a3B": "qwen3_30b_a3b", "Qwen3_235B_a22B": "qwen3_235b_a22b",
}
TASKS = {"Pre-Training": "pretrain", "SFT": "sft", "LoRA": "lora"}
COLUMNS = {
    "System": "system", "Model": "model_published", "#-GPUs": "gpus", "Precision": "precision",
    "GBS": "gbs", "MBS": "mbs", "Sequence Length": "seq_len", "FSDP": "fsdp", "TP": "tp",
    "PP": "pp", "CP": "cp", "VP": "vp", "EP": "ep", "GA": "ga",
    "Tokens / sec / GPU": "tokens_per_sec_per_gpu",
    "Model TFLOP / sec / GPU": "model_tflops_per_gpu",
}
# The order of a row's fields in the file (llmb.recipes.published checks exactly these).
ORDER = ("file", "line", "container", "task", "model", "model_published", "system", "gpu_type",
         "gpus", "precision", "precision_published", "parenthesized", "gbs", "mbs", "seq_len",
         "fsdp", "tp", "pp", "cp", "vp", "ep", "ga", "tokens_per_sec_per_gpu",
         "model_tflops_per_gpu", "footnote")
TEXT = ("system", "model_published", "precision")
# The 25.09 section's parenthesized FP8 (see the module docstring), by GPU type.
FINER_FP8 = {"gb200": "fp8_mx", "b200": "fp8_mx", "h100": "fp8_sc"}

CELL = re.compile(r"^(?P<main>[^()\[]*?)\s*(?:\((?P<alt>[^()]*)\))?\s*(?:\[\^(?P<note>[^\]]+)\])?$")


class Unreadable(Exception):
    """A table the script does not understand: it says where."""


def git_show(git_dir: str, ref: str, path: str) -> str:
    return subprocess.run(["git", f"--git-dir={git_dir}", "show", f"{ref}:{path}"],
                          check=True, capture_output=True, text=True).stdout


def cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def split_cell(text: str, where: str) -> tuple[str, str | None, str | None]:
    """A cell's value, its parenthesized alternative and its footnote label."""
    found = CELL.match(text)
    if not found or not found["main"]:
        raise Unreadable(f"{where}: cannot read the cell {text!r}")
    return found["main"], found["alt"], found["note"]


def value(column: str, text: str, where: str) -> object:
    if column in TEXT:
        return text
    if text == "n/a":
        return None
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            raise Unreadable(f"{where}: {column} {text!r} is not a number") from None


def expand(header: list[str], line: str, where: str) -> Iterator[dict[str, object]]:
    """The one or two configurations of a table line, as field -> value (no context yet)."""
    parts = cells(line)
    if len(parts) != len(header):
        raise Unreadable(f"{where}: {len(parts)} cells under {len(header)} columns")
    split = {COLUMNS[h]: split_cell(p, where) for h, p in zip(header, parts, strict=True)}
    if "model_published" in split:  # a model's variant in parentheses is part of its name
        split["model_published"] = (" ".join(parts[header.index("Model")].split()), None, None)
    notes = [note for _, _, note in split.values() if note]
    twice = any(alt is not None for _, alt, _ in split.values())
    for parenthesized in (False, True) if twice else (False,):
        row: dict[str, object] = {"parenthesized": parenthesized,
                                  "footnote": ",".join(notes) or None}
        for column, (main, alt, _) in split.items():
            chosen = alt if parenthesized and alt is not None else main
            row[column] = value(column, chosen, where)
        yield row


def finish(row: dict[str, object], context: dict[str, object]) -> dict[str, object]:
    """A row with its context, model key, GPU type and normalized precision."""
    row = {**context, **row}
    published = str(row["model_published"])
    base = re.sub(r"\s*\(.*\)\s*$", "", published)
    if base not in MODEL_KEYS:
        raise Unreadable(f"{row['file']}:{row['line']}: model {base!r} is not in MODEL_KEYS")
    row["model"] = MODEL_KEYS[base]
    row["gpu_type"] = str(row["system"]).lower().removeprefix("dgx-")
    if "precision" in row:
        row["precision_published"] = row["precision"]
        row["precision"] = normalize_precision(str(row["precision"]))
    else:
        row["precision_published"] = None
        row["precision"] = FINER_FP8[str(row["gpu_type"])] if row["parenthesized"] else "fp8_cs"
    for optional in ("fsdp", "ga", "footnote"):
        row.setdefault(optional, None)
    return {key: row[key] for key in ORDER}


def rows(path: str, text: str) -> Iterator[dict[str, object]]:
    """Every row of one summary file, in order."""
    context: dict[str, object] = {"file": path}
    header: list[str] | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        where = f"{path}:{number}"
        if heading := re.match(r"^(#+)\s+(.*?)\s*$", line):
            level, title = len(heading[1]), heading[2]
            header = None
            if level == 2:
                release = re.match(r"^([\d.]+) NeMo Container$", title)
                context = {"file": path, "container": release[1] if release else None}
            elif level == 3 and (task := re.match(r"^(.*) Performance$", title)):
                context["task"] = TASKS.get(task[1], task[1])
            elif level == 4 and (named := re.match(r"^(Model|System): (.*)$", title)):
                context[COLUMNS[named[1]]] = named[2]
        elif line.startswith("|") and header is None:
            header = cells(line)
            unknown = [h for h in header if h not in COLUMNS]
            if unknown:
                raise Unreadable(f"{where}: unknown column {unknown[0]!r}; add it to COLUMNS")
        elif line.startswith("|") and header and not re.match(r"^\|[\s|:-]+$", line):
            if not context.get("container") or "task" not in context:
                raise Unreadable(f"{where}: a table row outside a container's task section")
            for row in expand(header, line, where):
                yield finish(row, {**context, "line": number})
        elif not line.startswith("|"):
            header = None


def render(row: dict[str, object]) -> str:
    """One row as a YAML flow mapping on one line (JSON's scalars are YAML's)."""
    return "  - {" + ", ".join(f"{k}: {json.dumps(v)}" for k, v in row.items()) + "}"


HEADER = """\
# NVIDIA's published Megatron-Bridge performance numbers, one row per published configuration.
# Source: github.com/{repository} at {ref} (commit {commit}),
# the files {files}.
# Generated by tests/tools/bridge_references.py (its docstring says how a table line becomes
# rows); do not edit by hand. To refresh, clone Megatron-Bridge and run from llmb's root:
#   PYTHONPATH=common python3 tests/tools/bridge_references.py --git-dir <clone>/.git \\
#       --ref <tag> > common/references/megatron-bridge.yaml
# Read and checked by llmb.recipes.published. Rows per file:
# {counts}.
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--git-dir", required=True, help="a Megatron-Bridge clone's git directory")
    parser.add_argument("--ref", required=True, help="the tag or commit to read (e.g. v0.6.0)")
    args = parser.parse_args(argv)
    commit = subprocess.run(["git", f"--git-dir={args.git_dir}", "rev-parse",
                             f"{args.ref}^{{commit}}"],
                            check=True, capture_output=True, text=True).stdout.strip()
    try:
        found = {path: list(rows(path, git_show(args.git_dir, commit, path))) for path in FILES}
    except Unreadable as exc:
        print(f"bridge_references: {exc}", file=sys.stderr)
        return 1
    counts = ", ".join(f"{path} {len(found[path])}" for path in FILES)
    print(HEADER.format(repository=REPOSITORY, files=" and ".join(FILES), ref=args.ref,
                        commit=commit, counts=counts), end="")
    source = {"repository": REPOSITORY, "ref": args.ref, "commit": commit}
    print("source: {" + ", ".join(f"{k}: {json.dumps(v)}" for k, v in source.items()) + "}")
    print("rows:")
    for path in FILES:
        for row in found[path]:
            print(render(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
