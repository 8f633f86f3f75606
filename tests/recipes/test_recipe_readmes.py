"""The recipe READMEs' generated tables: matrix, expected performance and fidelity.

Each README holds three generated blocks between `<!-- llmb:<name> -->` and `<!-- llmb:end -->`:
`matrix` and `performance` from metadata.yaml, `fidelity` from tests/helpers/upstream_jobs.py (the
table the fidelity tests compare every configured recipe with) and metadata.yaml's `sources`. The
test fails when a README drifts from them; UPDATE_GOLDEN=1 rewrites the blocks.
"""

from __future__ import annotations

import os
import re
from typing import Any

import pytest
import upstream_jobs
from llmb.recipes import catalog, perf


def gbs_text(entry: dict) -> str:
    if "gbs" in entry:
        return str(entry["gbs"])
    per_gpu = entry["gbs_per_gpu"]
    return f"GPUs / {round(1 / per_gpu)}" if per_gpu < 1 else f"{per_gpu:g} x GPUs"


def matrix(recipe: catalog.Recipe) -> str:
    lines = ["| Size | GPU | Dtypes | Scaling | GPUs | Layers | TP | PP | CP | VP | MBS | GBS "
             "| Seed |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for e in recipe.data["configs"]:
        layers = e.get("num_layers", recipe.size(e["size"])["model"]["num_layers"])
        lines.append(
            f"| {e['size']} | {', '.join(e['gpu_types'])} | {', '.join(e['dtypes'])} "
            f"| {e['scaling']} | {', '.join(map(str, e['scales']))} | {layers} | {e['tp']} "
            f"| {e['pp']} | {e['cp']} | {e['vp'] or '-'} | {e['mbs']} | {gbs_text(e)} "
            f"| {e['source']} |")
    return "\n".join(lines)


def performance(recipe: catalog.Recipe) -> str:
    lines = ["| Size | Dtype | GPU | Scaling | GPUs | GBS | Step time (s) | Tokens/s | MFU "
             "| Seed |", "|---|---|---|---|---|---|---|---|---|---|"]
    for cfg in recipe.rows():
        ref = recipe.reference(cfg.model_size, cfg.dtype, cfg.gpu_type, cfg.num_gpus,
                               cfg.scaling)
        if ref is None:
            continue
        flops = recipe.model_flops(cfg.model_size, cfg.num_layers)
        peak = catalog.get_gpu_type(cfg.gpu_type).peak_tflops[cfg.dtype]
        tokens = perf.tokens_per_second(cfg.seq_length, cfg.gbs, ref.step_time)
        mfu = perf.mfu(cfg.gbs, flops, ref.step_time, cfg.num_gpus, peak)
        lines.append(
            f"| {cfg.model_size} | {cfg.dtype} | {cfg.gpu_type} | {cfg.scaling} "
            f"| {cfg.num_gpus} | {cfg.gbs} | {ref.step_time:g} | {tokens:,.0f} "
            f"| {mfu * 100:.1f}% | {ref.source} |")
    return "\n".join(lines)


# --- fidelity: the upstream jobs' settings per row group, their sources, llmb's deviations ---

def _shown(value: Any) -> str:
    if value is None:
        return "not set"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple):
        return ", ".join(_shown(v).removesuffix("Callback") for v in value if v is not None)
    return str(value)


def _cell(fact_value: Any, row: upstream_jobs.Row) -> str:
    if isinstance(fact_value, upstream_jobs.Rule):
        return fact_value.text
    return _shown(fact_value(row) if callable(fact_value) else fact_value)


def _display(row: upstream_jobs.Row, notes: dict[str, int],
             deviations: dict[int, tuple[upstream_jobs.Deviation, str]]) -> dict[str, str]:
    """Field -> the README's cell for one row: upstream value [source], or upstream -> llmb."""
    out = {}
    facts = {}
    for fact in upstream_jobs.FACTS:
        if fact.applies(row):
            facts[fact.field] = fact
    for name, fact in facts.items():
        ref = notes.setdefault(fact.cite, len(notes) + 1)
        text = f"{_cell(fact.value, row)} [{ref}]"
        dev = upstream_jobs.deviations(row).get(name)
        if dev is not None:
            number = next((n for n, (d, _) in deviations.items() if d is dev), None)
            if number is None:
                number = len(deviations) + 1
                deviations[number] = (dev, _cell(dev.llmb, row))
            text += f" → **{_cell(dev.llmb, row)}** (D{number})"
        out[name] = text
    return out


def _label(rows: list[upstream_jobs.Row]) -> str:
    def joined(values):
        return "/".join(dict.fromkeys(values))
    scalings = joined(r.scaling for r in rows)
    return (f"{joined(r.size for r in rows)} {joined(r.gpu_type for r in rows)}"
            + (f" {scalings}" if scalings != "weak" else ""))


def fidelity(recipe: catalog.Recipe) -> str:
    notes: dict[str, int] = {}
    deviations: dict[int, tuple[upstream_jobs.Deviation, str]] = {}
    # Published rows (plain runs), grouped by size / GPU / scaling; dtypes side by side.
    groups: dict[tuple, dict[str, dict[str, str]]] = {}
    members: dict[tuple, list[upstream_jobs.Row]] = {}
    for cfg in recipe.rows():
        row = upstream_jobs.row_of(cfg)
        key = (row.size, row.gpu_type, row.scaling)
        shown = _display(row, notes, deviations)
        previous = groups.setdefault(key, {}).setdefault(row.dtype, shown)
        assert previous == shown, f"{key} {row.dtype}: rows of one group differ"
        members.setdefault(key, []).append(row)
    merged: list[tuple[list[tuple], dict[str, dict[str, str]]]] = []
    for key, per_dtype in groups.items():
        same = next((m for m in merged if m[1] == per_dtype), None)
        if same:
            same[0].append(key)
        else:
            merged.append(([key], per_dtype))
    labels = [_label([r for k in keys for r in members[k]]) for keys, _ in merged]
    lines = ["| Setting | " + " | ".join(labels) + " |", "|---" * (len(labels) + 1) + "|"]
    for name in upstream_jobs.FIELDS:
        cells = []
        for _, per_dtype in merged:
            values = {d: shown[name] for d, shown in per_dtype.items() if name in shown}
            if not values:
                cells.append("")
            elif len(set(values.values())) == 1:
                cells.append(next(iter(values.values())))
            else:
                cells.append("; ".join(f"{d}: {v}" for d, v in values.items()))
        if any(cells):
            label = f"`{name[4:]}`" if name.startswith("env.") else name
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
    variants = _variant_lines(recipe, notes)
    out = [_job_lines(recipe), "", *lines, ""]
    if variants:
        out += ["Run variants:", *variants, ""]
    if deviations:
        out += ["Deliberate deviations (the tests check llmb's value):"]
        out += [f"- D{n} `{d.field}`: {d.reason}" for n, (d, _) in deviations.items()]
        out.append("")
    out += ["Sources:"] + [f"{n}. {cite}" for cite, n in notes.items()]
    return "\n".join(out)


def _job_lines(recipe: catalog.Recipe) -> str:
    seed = upstream_jobs.JOB_SEED[recipe.name]
    stack = recipe.source(seed)
    lines = [f"The job llmb runs is seed {seed}'s: {upstream_jobs.DGXC} {stack['upstream']}, "
             f"its recipe built with NeMo {stack['nemo']} on the login node and run in "
             f"`{stack['image']}`. llmb builds and runs it in `{recipe.image}` (NeMo 2.3.1). "
             "Its files:"]
    lines += [f"- {f}" for f in upstream_jobs.JOB_FILES[recipe.name]]
    lines += ["", "Where each published step time was measured:", "",
              "| Seed | Upstream release | Container | NeMo | References |",
              "|---|---|---|---|---|"]
    for source, stack in recipe.data["sources"].items():
        refs = list(dict.fromkeys(f"{r['size']} {r['dtype']} {r['gpu_type']}"
                                  for r in recipe.data["references"] if r["source"] == source))
        lines.append(f"| {source} | {upstream_jobs.DGXC} {stack['upstream']} | "
                     f"`{stack['image']}` | {stack['nemo']} | "
                     f"{', '.join(refs) or 'none (configurations only)'} |")
    return "\n".join(lines)


def _variant_lines(recipe: catalog.Recipe, notes: dict[str, int]) -> list[str]:
    """Settings that change in a run variant, once per (variant, setting, value)."""
    found: dict[tuple[str, str, str], list[upstream_jobs.Row]] = {}
    for cfg in recipe.rows():
        plain = upstream_jobs.expected(upstream_jobs.row_of(cfg))
        for variant in upstream_jobs.variants(recipe.name, cfg.model_size)[1:]:
            row = upstream_jobs.row_of(cfg, variant)
            for name, (value, cite) in upstream_jobs.expected(row).items():
                if plain.get(name, (None,))[0] != value and not _is_rule(name, row):
                    ref = notes.setdefault(cite, len(notes) + 1)
                    key = (variant, name, f"{_shown(value)} [{ref}]")
                    found.setdefault(key, []).append(row)
    words = {"checkpoint_save": "saving a checkpoint", "checkpoint_load": "loading a checkpoint",
             "runai": "on Run:ai"}
    return [f"- {words[v]} ({_label(rows)} {'/'.join(dict.fromkeys(r.dtype for r in rows))}): "
            f"{name} {text}" for (v, name, text), rows in found.items()]


def _is_rule(name: str, row: upstream_jobs.Row) -> bool:
    facts = [f for f in upstream_jobs.FACTS if f.applies(row) and f.field == name]
    return bool(facts) and isinstance(facts[-1].value, upstream_jobs.Rule)


# The NeMo recipes (tests/recipes/test_bridge_readmes.py checks the Megatron-Bridge ones).
NEMO_RECIPES = [r for r in catalog.all_recipes() if not r.is_bridge]
BLOCK = re.compile(r"(<!-- llmb:(matrix|performance|fidelity) -->\n)(.*?)(<!-- llmb:end -->)",
                   re.S)


def regenerate(text: str, recipe: catalog.Recipe) -> str:
    tables = {"matrix": matrix(recipe), "performance": performance(recipe),
              "fidelity": fidelity(recipe)}
    return BLOCK.sub(lambda m: m.group(1) + tables[m.group(2)] + "\n" + m.group(4), text)


@pytest.mark.parametrize("recipe", NEMO_RECIPES, ids=lambda r: r.name)
def test_readme_tables_match_metadata(recipe: catalog.Recipe) -> None:
    path = recipe.directory / "README.md"
    text = path.read_text()
    assert sorted(m.group(2) for m in BLOCK.finditer(text)) == ["fidelity", "matrix",
                                                                  "performance"]
    expected = regenerate(text, recipe)
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.write_text(expected)
    assert text == expected, f"{path} tables drifted from metadata: UPDATE_GOLDEN=1 pytest"


@pytest.mark.parametrize("recipe", NEMO_RECIPES, ids=lambda r: r.name)
def test_readme_names_every_variable(recipe: catalog.Recipe) -> None:
    text = (recipe.directory / "README.md").read_text()
    names = ["JOB_TOTAL_GPUS", "DTYPE", "MODEL_SIZE", "GPU_TYPE", "GPUS_PER_NODE",
             "CLUSTER_TYPE", "ENABLE_PROFILE", "PROFILE_START_STEP", "PROFILE_STOP_STEP",
             "ENABLE_GPU_METRICS", "ENABLE_NCCLTRACE", "ENABLE_CHECKPOINT",
             "LOAD_CHECKPOINT_PATH", "MAX_STEPS", "TIME_LIMIT", "RUN_CONF_IMAGE",
             "SBATCH_ACCOUNT", "SBATCH_PARTITION", "SBATCH_GPUS_PER_NODE", "LLMB_INSTALL",
             "LLMB_WORKLOAD", "STAGE_PATH", "DRY_RUN", "SMOKE_TEST"]
    if "strong" in {c["scaling"] for c in recipe.data["configs"]}:
        names.append("STRONG_SCALING")
    if recipe.data["requires_hf_token"]:
        names.append("HF_TOKEN")
    if "runai" in recipe.data["cluster_types"]:
        names += ["CUSTOM_MOUNT", "BASE_URL", "APP_ID", "APP_SECRET", "PROJECT_NAME", "PVC_DIR"]
    missing = [n for n in names if f"`{n}`" not in text]
    assert not missing, missing


@pytest.mark.parametrize("recipe", NEMO_RECIPES, ids=lambda r: r.name)
def test_readme_shows_how_to_print_the_config_and_every_deviation(recipe: catalog.Recipe) -> None:
    text = (recipe.directory / "README.md").read_text()
    fidelity_section = text[text.index("## Fidelity"):]
    entry = str(recipe.data["entrypoint"])
    assert f'python "$PWD/{entry}" train --manifest "$PWD/manifest.json" --print-config' in (
        fidelity_section)
    for dev in upstream_jobs.DEVIATIONS:
        if dev.recipe == recipe.name:
            assert dev.reason in fidelity_section, dev.field
