"""NVIDIA's published Megatron-Bridge pre-training numbers (common/references/megatron-bridge.yaml),
read as rows, and the rule that matches a run to one.

`load()` reads the file once and checks every row (a frozen `Row`); a bad value is one line
naming the file, the row and the field. `match(run)` gives the published row a run reproduces,
or says there is none and names the nearest one and the fields that differ. `step_time(row)` is
the step time a row implies.

The data file is generated from Megatron-Bridge's docs/performance-summary*.md by
tests/tools/bridge_references.py; its header says how to refresh it.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path

from llmb.shared.errors import LlmbError
from llmb.shared.values import ascii_digits
from llmb.shared.yamlfile import read_yaml

REFERENCES_FILE = Path(__file__).resolve().parents[2] / "references" / "megatron-bridge.yaml"

GPU_TYPES = ("gb300", "gb200", "b300", "b200", "h100")
TASKS = ("pretrain", "sft", "lora")
# Megatron-Bridge's own names (scripts/performance --compute_dtype): bf16, FP8 with current
# (per-tensor) scaling, FP8 with MX block scaling (MXFP8), FP8 with sub-channel (blockwise)
# scaling, NVFP4.
PRECISIONS = ("bf16", "fp8_cs", "fp8_mx", "fp8_sc", "nvfp4")
# Every spelling the summary prints, and the usual spellings of a run, lower-cased. The summary's
# plain "FP8" is current scaling: its 25.11 section prints the same recipes as FP8-CS, and it
# lists MXFP8 apart.
PRECISION_ALIASES = {
    "bf16": "bf16", "fp8": "fp8_cs", "fp8_cs": "fp8_cs", "fp8-cs": "fp8_cs",
    "fp8_mx": "fp8_mx", "fp8-mx": "fp8_mx", "mxfp8": "fp8_mx",
    "fp8_sc": "fp8_sc", "fp8-sc": "fp8_sc", "nvfp4": "nvfp4",
}


class PublishedError(LlmbError):
    """A bad published-references file, or a run that cannot be compared with it."""


def normalize_precision(text: str) -> str:
    """The precision key (one of PRECISIONS) of a published or a run's spelling: 'FP8-CS',
    'MXFP8', 'fp8_mx', 'NVFP4', ... ; PublishedError for any other."""
    key = PRECISION_ALIASES.get(text.strip().lower())
    if key is None:
        raise PublishedError(f"precision {text!r} is not one llmb knows; use one of "
                             f"{', '.join(PRECISIONS)} (or {', '.join(sorted(PRECISION_ALIASES))})")
    return key


@dataclass(frozen=True)
class Row:
    """One published row. `precision_published` is the text the summary prints, None where its
    section has no precision column (25.09: the precision is the one its note implies).
    `parenthesized` marks a row made of a cell's values in parentheses (the summary's second
    configuration in one table line). `vp`, `ep` None: printed n/a; `fsdp`, `ga` None: no such
    column in that section."""

    repository: str
    ref: str
    commit: str
    file: str
    line: int
    container: str
    task: str
    model: str
    model_published: str
    system: str
    gpu_type: str
    gpus: int
    precision: str
    precision_published: str | None
    parenthesized: bool
    gbs: int
    mbs: int
    seq_len: int
    fsdp: int | None
    tp: int
    pp: int
    cp: int
    vp: int | None
    ep: int | None
    ga: int | None
    tokens_per_sec_per_gpu: float
    model_tflops_per_gpu: float
    footnote: str | None

    def where(self) -> str:
        """Where the row is published, for a person: file:line (container, task, what)."""
        shown = self.precision_published or self.precision
        return (f"{self.file}:{self.line} ({self.container} {self.task}: {self.model_published} "
                f"on {self.gpus}x {self.system}, {shown})")


def step_time(row: Row) -> float:
    """The step time, in seconds, a row implies: GBS x sequence length / (tokens/s/GPU x GPUs)."""
    return row.gbs * row.seq_len / (row.tokens_per_sec_per_gpu * row.gpus)


# What each field of a row in the file must be: a kind (_check) and, for "choice", the choices.
_SOURCE_FIELDS = ("repository", "ref", "commit")
_KINDS: dict[str, str] = {
    "file": "text", "line": "count", "container": "container", "task": "choice",
    "model": "key", "model_published": "text", "system": "text", "gpu_type": "choice",
    "gpus": "count", "precision": "choice", "precision_published": "text?",
    "parenthesized": "bool", "gbs": "count", "mbs": "count", "seq_len": "count",
    "fsdp": "zero?", "tp": "count", "pp": "count", "cp": "count", "vp": "count?",
    "ep": "count?", "ga": "count?", "tokens_per_sec_per_gpu": "rate",
    "model_tflops_per_gpu": "rate", "footnote": "text?",
}
_CHOICES = {"task": TASKS, "gpu_type": GPU_TYPES, "precision": PRECISIONS}


def _problem(field: str, value: object) -> str | None:
    """What is wrong with one field's value (what would work), or None."""
    kind = _KINDS[field]
    if value is None and kind.endswith("?"):
        return None
    kind = kind.rstrip("?")
    if kind == "choice":
        ok = isinstance(value, str) and value in _CHOICES[field]
        return None if ok else f"use one of {', '.join(_CHOICES[field])}"
    if kind == "bool":
        return None if isinstance(value, bool) else "use true or false"
    if kind in ("count", "zero"):
        least = 0 if kind == "zero" else 1
        ok = isinstance(value, int) and not isinstance(value, bool) and value >= least
        return None if ok else f"use a whole number of at least {least}"
    if kind == "rate":
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0
        return None if ok else "use a number above 0"
    if kind == "container" and not (isinstance(value, str)
                                    and all(ascii_digits(p) for p in value.split("."))):
        return "use a NeMo container release such as '26.04.01' (quoted)"
    if not isinstance(value, str) or not value.strip():
        return "use a non-empty text"
    if kind == "key" and not all(c.islower() or ascii_digits(c) or c in "._" for c in value):
        return "use lower-case letters, digits, '.' and '_' (e.g. llama3.1_405b)"
    return None


def _row(raw: object, source: Mapping[str, str], at: str) -> Row:
    """One row of the file, checked: PublishedError naming `at` (file and row) and the field."""
    if not isinstance(raw, dict):
        raise PublishedError(f"{at} is {type(raw).__name__}; each row is a mapping of "
                             f"{', '.join(_KINDS)}")
    unknown = sorted(str(k) for k in raw if k not in _KINDS)
    missing = [k for k in _KINDS if k not in raw]
    if unknown or missing:
        what = (f"has unknown field {unknown[0]!r}" if unknown else f"lacks field {missing[0]!r}")
        raise PublishedError(f"{at} {what}; a row has exactly {', '.join(_KINDS)}")
    for field in _KINDS:
        problem = _problem(field, raw[field])
        if problem:
            raise PublishedError(f"{at}: {field} is {raw[field]!r}; {problem}")
    system_gpu = raw["system"].lower().removeprefix("dgx-")
    if system_gpu != raw["gpu_type"]:
        raise PublishedError(f"{at}: gpu_type is {raw['gpu_type']!r} but system "
                             f"{raw['system']!r} is {system_gpu!r}; make them agree")
    published = raw["precision_published"]
    if published is not None and PRECISION_ALIASES.get(published.lower()) != raw["precision"]:
        raise PublishedError(f"{at}: precision is {raw['precision']!r} but precision_published "
                             f"{published!r} means {PRECISION_ALIASES.get(published.lower())!r};"
                             " make them agree")
    return Row(repository=source["repository"], ref=source["ref"], commit=source["commit"],
               **raw)


def _source(raw: object, label: str) -> dict[str, str]:
    """The file's `source` mapping (repository, ref, commit), checked."""
    if not isinstance(raw, dict) or sorted(raw) != sorted(_SOURCE_FIELDS):
        raise PublishedError(f"{label}: source is {raw!r}; give exactly "
                             f"{', '.join(_SOURCE_FIELDS)}")
    for key in _SOURCE_FIELDS:
        if not isinstance(raw[key], str) or not raw[key]:
            raise PublishedError(f"{label}: source.{key} is {raw[key]!r}; use a non-empty text")
    return {key: raw[key] for key in _SOURCE_FIELDS}


@functools.lru_cache(maxsize=4)
def load(path: Path = REFERENCES_FILE) -> tuple[Row, ...]:
    """Every row of a published-references file, in file order, checked once; PublishedError
    with one line naming the file, the row (1-based) and the field on a bad value."""
    label = str(path)
    doc = read_yaml(path, label, PublishedError)
    if not isinstance(doc, dict) or sorted(doc) != ["rows", "source"]:
        raise PublishedError(f"{label} holds {type(doc).__name__}; it is a mapping of "
                             "source (repository, ref, commit) and rows")
    source = _source(doc["source"], label)
    if not isinstance(doc["rows"], list) or not doc["rows"]:
        raise PublishedError(f"{label}: rows is {type(doc['rows']).__name__}; give a list of rows")
    return tuple(_row(raw, source, f"{label} row {i}")
                 for i, raw in enumerate(doc["rows"], start=1))


@dataclass(frozen=True)
class Run:
    """What a run is, to compare with the published rows. precision: any spelling
    normalize_precision takes. vp, ep None: not used (the same as 1). fsdp: as the summary prints
    it (0: DDP; above 0: FSDP, the sharding group size), None: not compared."""

    model: str
    gpu_type: str
    gpus: int
    precision: str
    gbs: int
    mbs: int
    seq_len: int
    tp: int
    pp: int
    cp: int = 1
    vp: int | None = None
    ep: int | None = None
    fsdp: int | None = None
    task: str = "pretrain"


# The fields a run must share with a row to be its reference, in the order a person reads them.
MATCHED = tuple(f.name for f in fields(Run))


@dataclass(frozen=True)
class Match:
    """A run against the published rows. `reference`: the row it reproduces (newest container
    first), `others`: older containers that publish the same configuration. Without one,
    `nearest` is the nearest row and `differing` the fields it differs in."""

    run: Run
    reference: Row | None
    others: tuple[Row, ...] = ()
    nearest: Row | None = None
    differing: tuple[str, ...] = ()

    @property
    def no_reference(self) -> bool:
        return self.reference is None

    def describe(self) -> str:
        """One line for a person."""
        if self.reference is not None:
            return f"published reference: {self.reference.where()}"
        if self.nearest is None:
            return "no published reference, and no published rows to compare with"
        diffs = ", ".join(f"{f} {getattr(self.run, f)!r} (published "
                          f"{getattr(self.nearest, f)!r})" for f in self.differing)
        return f"no published reference; nearest is {self.nearest.where()}, differing in {diffs}"


def _same(field: str, mine: object, published: object) -> bool:
    if field == "model":  # the summary's llama3.1_405b is Megatron-Bridge's llama31_405b
        return str(mine).replace(".", "") == str(published).replace(".", "")
    if field in ("vp", "ep"):
        return (mine or 1) == (published or 1)
    if field == "fsdp":
        return mine is None or published is None or mine == published
    return mine == published


def differing(run: Run, row: Row) -> tuple[str, ...]:
    """The fields of MATCHED in which a row differs from a run (whose precision is normalized)."""
    return tuple(f for f in MATCHED if not _same(f, getattr(run, f), getattr(row, f)))


def _newest_first(row: Row) -> tuple[int, ...]:
    """A sort key that puts a newer container first ('26.04.01' before '26.04')."""
    parts = [int(part) for part in row.container.split(".")]
    return tuple(-part for part in parts + [0] * (3 - len(parts)))


def match(run: Run, rows: Iterable[Row] | None = None) -> Match:
    """The published row a run reproduces: one that agrees with it in every field of MATCHED
    (vp and ep None count as 1; fsdp is compared only where both give it), the newest container
    first. Without one, `no_reference` with the nearest row: the rows of the same model and GPU
    type if there are any, else those of the same model, else those of the same GPU type, else
    all; among them the one with the fewest differing fields; a tie goes to the newer
    container, then to the earlier row of the file."""
    run = Run(**{**{f: getattr(run, f) for f in MATCHED},
                 "precision": normalize_precision(run.precision),
                 "model": run.model.strip().lower(), "gpu_type": run.gpu_type.strip().lower()})
    table = list(load() if rows is None else rows)
    exact = sorted((r for r in table if not differing(run, r)), key=_newest_first)
    if exact:
        return Match(run, exact[0], tuple(exact[1:]))
    if not table:
        return Match(run, None)

    def rank(indexed: tuple[int, Row]) -> tuple[object, ...]:
        i, row = indexed
        return (row.model != run.model, row.gpu_type != run.gpu_type,
                len(differing(run, row)), _newest_first(row), i)

    nearest = min(enumerate(table), key=rank)[1]
    return Match(run, None, nearest=nearest, differing=differing(run, nearest))
