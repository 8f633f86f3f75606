"""The README of every Megatron-Bridge recipe (bridge/*/README.md): its matrix table is
generated from metadata.yaml (UPDATE_GOLDEN=1 rewrites it), it names every variable launch.sh
reads, and its Fidelity section names every field of the job."""

from __future__ import annotations

import os
import re

import pytest
from llmb.recipes import catalog

BRIDGE = [r for r in catalog.all_recipes() if r.is_bridge]
BLOCK = re.compile(r"(<!-- llmb:bridge-matrix -->\n)(.*?)(<!-- llmb:end -->)", re.S)
VARIABLES = ["JOB_TOTAL_GPUS", "DTYPE", "FP8_RECIPE", "MODEL_SIZE", "GPU_TYPE", "MAX_STEPS",
             "TIME_LIMIT", "RUN_CONF_IMAGE", "SBATCH_ACCOUNT", "SBATCH_PARTITION",
             "SBATCH_GPUS_PER_NODE", "LLMB_INSTALL", "LLMB_WORKLOAD", "DRY_RUN",
             "ENABLE_PROFILE", "ENABLE_CHECKPOINT", "SMOKE_TEST", "ENABLE_NCCLTRACE",
             "LOAD_CHECKPOINT_PATH", "PROFILE_START_STEP", "PROFILE_STOP_STEP",
             "ENABLE_GPU_METRICS"]
JOB_FIELDS = ["image", "mounts", "environment", "command", "arguments", "--compute_dtype",
              "--gpus_per_node", "--time_limit", "--max_steps", "segment", "directives",
              "PerfEnvPlugin environment", "PerfEnvPlugin arguments", "vboost, GPU clock lock",
              "ENABLE_PROFILE (NsysPlugin)"]
PLUGINS = "NVIDIA-NeMo/Megatron-Bridge b50da4c7, scripts/performance/perf_plugins.py"


def matrix(recipe: catalog.Recipe) -> str:
    """One line per size x GPU type: its dtypes and scales."""
    lines = ["| Size | GPU type | DTYPE | Scales (GPUs) |", "|---|---|---|---|"]
    for entry in recipe.data["configs"]:
        for gpu in entry["gpu_types"]:
            lines.append(f"| {entry['size']} | {gpu} | {', '.join(entry['dtypes'])} | "
                         f"{', '.join(map(str, entry['scales']))} |")
    return "\n".join(lines)


@pytest.mark.parametrize("recipe", BRIDGE, ids=lambda r: r.name)
def test_matrix_matches_metadata(recipe: catalog.Recipe) -> None:
    path = recipe.directory / "README.md"
    text = path.read_text()
    assert BLOCK.search(text), f"{path} has no <!-- llmb:bridge-matrix --> block"
    expected = BLOCK.sub(lambda m: m.group(1) + matrix(recipe) + "\n" + m.group(3), text)
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.write_text(expected)
    assert text == expected, f"{path} matrix drifted from metadata: UPDATE_GOLDEN=1 pytest"


@pytest.mark.parametrize("recipe", BRIDGE, ids=lambda r: r.name)
def test_names_every_variable_and_job_field(recipe: catalog.Recipe) -> None:
    text = (recipe.directory / "README.md").read_text()
    overrides = list(recipe.data["bridge"]["overrides"])
    missing = [n for n in VARIABLES + overrides if f"`{n}`" not in text]
    assert not missing, missing
    fidelity = text[text.index("## Fidelity"):]
    assert [f for f in JOB_FIELDS if f not in fidelity] == []
    assert PLUGINS in fidelity
    for arg in recipe.data["bridge"]["profile_args"]:  # the nsys flags launch.sh passes
        assert f" {arg}" in fidelity, arg
    upstream = recipe.data["upstream"]
    assert f"NVIDIA/exemplar-performance {upstream['release']}, {upstream['path']}" in text
