"""The layout a Megatron-Bridge run states in its log: parallelism, batch sizes, sequence length.

Megatron-Bridge (the commit NVIDIA/exemplar-performance v26.08.00 pins) prints from rank 0, as
training is set up, a configuration summary (training/config.py, log_non_default_values):

    ======================================================================
    Configuration Summary (Non-Default Values vs Megatron Core)
    ======================================================================

    [model] Non-default values (vs Mcore TransformerConfig):
      pipeline_model_parallel_size: 8  (Mcore default: 1)
      ...
    ----------------------------------------------------------------------
    Other Configuration Values:
    ----------------------------------------------------------------------

    [train]:
      global_batch_size: 8192
      micro_batch_size: 1
      train_iters: 50
    [dataset]:
      sequence_length: 4096

The model section lists only what differs from Megatron Core's defaults, so a parallelism it
leaves out is the default: TP, PP, CP and EP 1, no virtual pipeline. Older Megatron-Bridge printed
the whole configuration as YAML (`model:` / `train:` sections, the same field names); both are
read. Only the head of a log is read (HEAD_BYTES): the summary comes before the first step.
Standard library only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

HEAD_BYTES = 8 << 20
SUMMARY = "Configuration Summary (Non-Default Values vs Megatron Core)"
# a section header: `[model] Non-default values ...`, `[train]:` or YAML's `train:`
_SECTION = re.compile(r"\[?([a-z_]{1,32})\]?(?: Non-default values.*|:)\s*", re.A)
# a field of a section, indented: `  tensor_model_parallel_size: 2  (Mcore default: 1)`
_FIELD = re.compile(r"[ ]{2}([a-z_]{1,64}): ([0-9]{1,9}|None)(?:\s.*)?", re.A)
# where each figure is read: (section, field) pairs, the first found wins
WHERE: dict[str, tuple[tuple[str, str], ...]] = {
    "tp": (("model", "tensor_model_parallel_size"),),
    "pp": (("model", "pipeline_model_parallel_size"),),
    "cp": (("model", "context_parallel_size"),),
    "vp": (("model", "virtual_pipeline_model_parallel_size"),),
    "ep": (("model", "expert_model_parallel_size"),),
    "gbs": (("train", "global_batch_size"),),
    "mbs": (("train", "micro_batch_size"),),
    "seq_len": (("dataset", "sequence_length"), ("dataset", "seq_length"),
                ("model", "seq_length")),
}
DEFAULTS = {"tp": 1, "pp": 1, "cp": 1, "vp": None, "ep": 1}


@dataclass(frozen=True)
class Layout:
    """What the log states; None where it does not say (gbs, mbs, seq_len) or says None (vp)."""

    tp: int
    pp: int
    cp: int
    vp: int | None
    ep: int
    gbs: int | None
    mbs: int | None
    seq_len: int | None


def fields_of(lines: list[str]) -> dict[tuple[str, str], int | None]:
    """Every (section, field) with a whole-number or None value, the first of each kept."""
    found: dict[tuple[str, str], int | None] = {}
    section = ""
    for line in lines:
        if len(line) > 300:
            continue
        if (head := _SECTION.fullmatch(line.rstrip())) and not line.startswith(" "):
            section = head.group(1)
        elif (fld := _FIELD.fullmatch(line.rstrip())) and section:
            value = fld.group(2)
            found.setdefault((section, fld.group(1)), None if value == "None" else int(value))
    return found


def parse(lines: list[str]) -> Layout | None:
    """The layout of a log's head, or None where it has no configuration summary or YAML."""
    found = fields_of(lines)
    if not found:
        return None

    def value(name: str) -> int | None:
        present = [found[p] for p in WHERE[name] if p in found]
        return present[0] if present else DEFAULTS.get(name)

    tp, pp, cp, ep = value("tp"), value("pp"), value("cp"), value("ep")
    if tp is None or pp is None or cp is None or ep is None:
        return None  # a parallelism printed as None: not a layout this reads
    return Layout(tp, pp, cp, value("vp"), ep, value("gbs"), value("mbs"), value("seq_len"))


def read(path: Path) -> Layout | None:
    """The layout the log at `path` states in its first HEAD_BYTES, or None."""
    try:
        with path.open("rb") as handle:
            head = handle.read(HEAD_BYTES)
    except OSError:
        return None
    text = head.decode("utf-8", errors="replace")
    start = text.find(SUMMARY)
    return parse(text[start if start >= 0 else 0:].splitlines())
