"""The recipe READMEs' matrix and expected-performance tables are generated from metadata.yaml.

Each README holds two generated blocks between `<!-- llmb:matrix -->` / `<!-- llmb:end -->` and
`<!-- llmb:performance -->` / `<!-- llmb:end -->`. The test fails when a README drifts from
its metadata; UPDATE_GOLDEN=1 rewrites the blocks.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from llmb import catalog, perf

REPO = Path(__file__).resolve().parents[1]


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


BLOCK = re.compile(r"(<!-- llmb:(matrix|performance) -->\n)(.*?)(<!-- llmb:end -->)", re.S)


def regenerate(text: str, recipe: catalog.Recipe) -> str:
    tables = {"matrix": matrix(recipe), "performance": performance(recipe)}
    return BLOCK.sub(lambda m: m.group(1) + tables[m.group(2)] + "\n" + m.group(4), text)


@pytest.mark.parametrize("recipe", catalog.all_recipes(), ids=lambda r: r.name)
def test_readme_tables_match_metadata(recipe: catalog.Recipe) -> None:
    path = recipe.directory / "README.md"
    text = path.read_text()
    assert sorted(m.group(2) for m in BLOCK.finditer(text)) == ["matrix", "performance"]
    expected = regenerate(text, recipe)
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.write_text(expected)
    assert text == expected, f"{path} tables drifted from metadata: UPDATE_GOLDEN=1 pytest"


@pytest.mark.parametrize("recipe", catalog.all_recipes(), ids=lambda r: r.name)
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
