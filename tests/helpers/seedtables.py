"""Read the markdown tables of the seed READMEs (tests/fixtures/seeds/*.md) for the tests.

The seeds are verbatim copies of the published documents, so their tables come in every
dialect markdown allows: with or without leading and trailing pipes (001 has neither leading
pipe nor `|---|` borders; 003's rows drop the trailing pipe and use tabs), two tables with no
blank line between them (001), tables split by a line of spaces (004). A table is a header line
with a `|` followed by a separator line (`---|---`); it runs until a line without a `|`.

The tests read the seeds' numbers from here, never from a copy typed into the test.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

SEEDS_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "seeds"
SEED_IDS = ("000", "001", "002", "003", "004")

_SEPARATOR = re.compile(r"^\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$")
_GPUS_HEADING = re.compile(r"(\d+)x\s+(H100|B200|GB200)\s+GPUs", re.IGNORECASE)
_GBS_HEADING = re.compile(r"\(GBS=(\d+)\)")


@dataclass(frozen=True)
class Table:
    """One markdown table of one seed.

    `heading` is the nearest markdown heading above it (004: "H100", "GB200", "B200"), `preface`
    the prose between that heading (or the previous table) and this table (004's strong-scaling
    tables say "Strong Scaling" there). `line` is the 1-based line of the header.
    """

    seed: str
    index: int
    line: int
    heading: str
    preface: str
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]

    @property
    def name(self) -> str:
        """A short label for test ids: seed and table index, e.g. 004#3."""
        return f"{self.seed}#{self.index}"

    def records(self) -> Iterator[dict[str, str]]:
        """Each row as {column heading: cell}."""
        for row in self.rows:
            yield dict(zip(self.header, row, strict=True))

    def row(self, label: str) -> tuple[str, ...] | None:
        """The row whose first cell starts with `label` (performance tables), else None."""
        for row in self.rows:
            if row and row[0].lower().startswith(label.lower()):
                return row
        return None


def split_row(line: str) -> tuple[str, ...]:
    """Cells of one table line, with or without outer pipes, tabs and spaces stripped."""
    text = line.strip()
    if text.startswith("|"):
        text = text[1:]
    if text.endswith("|"):
        text = text[:-1]
    return tuple(cell.strip() for cell in text.split("|"))


def parse_tables(seed: str, text: str) -> list[Table]:
    """Every table of one document, in order."""
    lines = text.splitlines()
    tables: list[Table] = []
    heading, preface = "", []
    in_fence = False
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.lstrip().startswith("```"):
            in_fence = not in_fence
        is_table = (
            not in_fence and "|" in line and i + 1 < len(lines) and _SEPARATOR.match(lines[i + 1])
        )
        if not is_table:
            if not in_fence and line.startswith("#"):
                heading, preface = line.lstrip("#").strip(), []
            elif line.strip():
                preface.append(line.strip())
            i += 1
            continue
        header = split_row(line)
        rows = []
        i += 2
        while i < len(lines) and "|" in lines[i]:
            if i + 1 < len(lines) and _SEPARATOR.match(lines[i + 1]):
                break  # the next table starts right away (001)
            cells = split_row(lines[i])
            rows.append(cells + ("",) * (len(header) - len(cells)))
            i += 1
        tables.append(Table(seed, len(tables), i - len(rows) - 1, heading, " ".join(preface),
                            header, tuple(rows)))
        preface = []
    return tables


def seed_path(seed: str) -> Path:
    (path,) = SEEDS_DIR.glob(f"{seed}_*.md")
    return path


@cache
def seed_text(seed: str) -> str:
    return seed_path(seed).read_text(encoding="utf-8")


@cache
def tables(seed: str) -> tuple[Table, ...]:
    return tuple(parse_tables(seed, seed_text(seed)))


def all_tables() -> list[Table]:
    return [t for seed in SEED_IDS for t in tables(seed)]


# --- cell values ------------------------------------------------------------------------------

def number(cell: str) -> float | None:
    """A numeric cell: '62.47%' -> 62.47, '1,360,683' -> 1360683.0; 'n/a', 'NA' -> None."""
    text = cell.strip().rstrip("%").replace(",", "").strip()
    if text.lower() in ("", "na", "n/a"):
        return None
    return float(text)


def decimals(cell: str) -> int:
    """How many decimal places a numeric cell is printed with ('62.47%' -> 2, '407' -> 0)."""
    text = cell.strip().rstrip("%").strip()
    return len(text.split(".", 1)[1]) if "." in text else 0


def gpus_heading(cell: str) -> tuple[int, str, int | None]:
    """'Throughput on 128x H100 GPUs (GBS=32)' -> (128, 'h100', 32); GBS is None if absent."""
    match = _GPUS_HEADING.search(cell)
    if not match:
        raise ValueError(f"not a GPUs column heading: {cell!r}")
    gbs = _GBS_HEADING.search(cell)
    return int(match.group(1)), match.group(2).lower(), int(gbs.group(1)) if gbs else None


def title_params(cell: str) -> dict[str, int]:
    """002's '(TP=8, PP=8, MBS=1, GA=16, VP=12)' -> {'tp': 8, 'pp': 8, ...}."""
    return {k.lower(): int(v) for k, v in re.findall(r"\b([A-Z]{2,3})=(\d+)", cell)}


def size_and_dtype(title: str) -> tuple[str, str]:
    """'Llama 3.1 8b BF16' -> ('8b', 'bf16'); 'Nemotron4 340b 24.11 FP8' -> ('340b', 'fp8')."""
    size = re.search(r"\b(\d+b)\b", title, re.IGNORECASE)
    dtype = re.search(r"\b(BF16|FP8)\b", title, re.IGNORECASE)
    if not size or not dtype:
        raise ValueError(f"no model size and dtype in table title {title!r}")
    return size.group(1).lower(), dtype.group(1).lower()


def is_parallelism_table(table: Table) -> bool:
    return {"Size", "GPUs", "TP", "PP", "GBS"} <= set(table.header)


def is_performance_table(table: Table) -> bool:
    return table.row("Training step time") is not None


# --- the seeds' published rows, read as the catalog keys them ---------------------------------

@dataclass(frozen=True)
class ParallelismRow:
    """One published configuration row. None where the seed does not state the value.

    gpu_type comes from 004's section headings (H100/GB200/B200), scaling from 004's "Strong
    Scaling" line above a table; every other seed is H100, weak scaling. 002 has no parallelism
    table: its rows come from its performance tables' headings (GPUs, GBS) and titles (TP, PP,
    MBS, GA, VP).
    """

    seed: str
    table: str
    line: int
    size: str
    proxy: bool
    dtypes: tuple[str, ...]
    gpu_type: str
    scaling: str
    gpus: int
    seq_length: int | None
    layers: int | None
    tp: int
    pp: int
    cp: int | None
    vp: int | None
    ep: int | None
    mbs: int
    gbs: int
    dp: int | None
    ga: int | None

    @property
    def id(self) -> str:
        size = f"{self.size}-proxy" if self.proxy else self.size
        return (f"{self.table}:{size}-{'+'.join(self.dtypes)}-{self.gpu_type}-{self.gpus}"
                f"-{self.scaling}")


def _int(cell: str) -> int | None:
    value = number(cell)
    return None if value is None else int(value)


def _table_gpu_type(table: Table) -> str:
    return table.heading.lower() if table.heading.lower() in ("h100", "b200", "gb200") else "h100"


def parallelism_rows(seed: str) -> list[ParallelismRow]:
    out = []
    for table in tables(seed):
        if is_parallelism_table(table):
            scaling = "strong" if "strong scaling" in table.preface.lower() else "weak"
            for n, rec in enumerate(table.records()):
                size = rec["Size"].lower()
                out.append(ParallelismRow(
                    seed=seed, table=f"{table.name}({table.heading or 'top'})",
                    line=table.line + 2 + n, size=size.removesuffix("-proxy"),
                    proxy=size.endswith("-proxy"),
                    dtypes=tuple(d.lower() for d in rec["Precision"].split("/")),
                    gpu_type=_table_gpu_type(table), scaling=scaling, gpus=int(rec["GPUs"]),
                    seq_length=int(rec["SeqLen"]), layers=_int(rec["Layers"]),
                    tp=int(rec["TP"]), pp=int(rec["PP"]),
                    cp=_int(rec["CP"]), vp=_int(rec["VP"]), ep=_int(rec.get("EP", "NA")),
                    mbs=int(rec["MBS"]), gbs=int(rec["GBS"]), dp=_int(rec["DP"]),
                    ga=_int(rec["GA"])))
        elif is_performance_table(table) and "GBS=" in table.header[1]:
            size, dtype = size_and_dtype(table.header[0])
            params = title_params(table.header[0])
            for heading in table.header[1:]:
                gpus, gpu_type, gbs = gpus_heading(heading)
                out.append(ParallelismRow(
                    seed=seed, table=f"{table.name}(headings)", line=table.line, size=size,
                    proxy=False, dtypes=(dtype,), gpu_type=gpu_type, scaling="weak", gpus=gpus,
                    seq_length=None, layers=None, tp=params["tp"], pp=params["pp"], cp=None,
                    vp=params["vp"], ep=None, mbs=params["mbs"], gbs=int(gbs or 0), dp=None,
                    ga=params["ga"]))
    return out


def all_parallelism_rows() -> list[ParallelismRow]:
    return [row for seed in SEED_IDS for row in parallelism_rows(seed)]


PERF_ROWS = {
    "step_time": "Training step time",
    "tokens_per_s": "Throughput in tokens per second",
    "mfu": "Model flops utilization",
    "days": "Time to train 1T tokens in days",
}


@dataclass(frozen=True)
class PerfCell:
    """One cell of an "Expected Performance" table: `quantity` is a PERF_ROWS key."""

    seed: str
    table: str
    line: int
    size: str
    dtype: str
    gpu_type: str
    gpus: int
    quantity: str
    text: str

    @property
    def value(self) -> float | None:
        return number(self.text)

    @property
    def key(self) -> tuple[str, str, str, str, int]:
        """(seed, size, dtype, gpu_type, gpus): the column this cell sits in."""
        return self.seed, self.size, self.dtype, self.gpu_type, self.gpus

    @property
    def id(self) -> str:
        return f"{self.table}:{self.size}-{self.dtype}-{self.gpus}-{self.quantity}"


def performance_cells(seed: str) -> list[PerfCell]:
    out = []
    for table in tables(seed):
        if not is_performance_table(table):
            continue
        size, dtype = size_and_dtype(table.header[0])
        for quantity, label in PERF_ROWS.items():
            row = table.row(label)
            if row is None:
                raise ValueError(f"seed {seed} table {table.name} has no {label!r} row")
            for heading, text in zip(table.header[1:], row[1:], strict=True):
                gpus, gpu_type, _ = gpus_heading(heading)
                out.append(PerfCell(seed, f"{table.name}({table.header[0]})", table.line, size,
                                    dtype, gpu_type, gpus, quantity, text))
    return out


def all_performance_cells() -> list[PerfCell]:
    return [cell for seed in SEED_IDS for cell in performance_cells(seed)]
