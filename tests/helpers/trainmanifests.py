"""Run manifests for every published row, as the launcher writes them: the input of the
container's train plan, shared by the default tier (tests/container/test_train.py) and the NeMo
tier (tests/nemo)."""

from __future__ import annotations

import copy
from typing import Any

from llmb.recipes import catalog

# Option variants every row is planned with (launch.sh's: profile, GPU metrics, NCCL trace,
# checkpoint save, checkpoint load); the launcher already turns them into effective max_steps.
OPTION_VARIANTS: dict[str, dict[str, Any]] = {
    "plain": {},
    "profile": {"profile": True},
    "profile_gpu_metrics": {"profile": True, "gpu_metrics": True},
    "nccl_trace": {"nccl_trace": True, "max_steps": 5},
    "checkpoint_save": {"checkpoint_save": True},
    "checkpoint_load": {"checkpoint_load_path": "/ckpt/default--None=0.0000-epoch=0-"
                                                "consumed_samples=12800.0", "max_steps": 1},
}
RUN_DIR = "/lustre/llmb/workloads/w/experiments/EXP/EXP_1744407000"
SEQ_LENGTH = {"llama": 8192, "nemotron4": 4096, "nemotronh": 8192}


def make_manifest(recipe: catalog.Recipe, cfg: catalog.Config, cluster_type: str = "slurm",
                  **options: Any) -> dict[str, Any]:
    """A schema-1 run manifest for one catalog Config, as the launcher writes it."""
    opts = {"max_steps": 50, "smoke_test": False, "profile": False, "profile_start_step": 45,
            "profile_stop_step": 50, "gpu_metrics": False, "nccl_trace": False,
            "checkpoint_save": False, "checkpoint_load_path": None, "time_limit": "00:30:00",
            "dry_run": False}
    opts.update(options)
    size = recipe.size(cfg.model_size)
    exp = cfg.experiment_name
    return {
        "schema": 1, "recipe": recipe.name, "workload": recipe.workload, "experiment": exp,
        "model_size": cfg.model_size, "dtype": cfg.dtype, "gpu_type": cfg.gpu_type,
        "num_gpus": cfg.num_gpus, "gpus_per_node": cfg.gpus_per_node, "nodes": cfg.nodes,
        "scaling": cfg.scaling, "published": cfg.published, "source": cfg.source,
        "seq_length": cfg.seq_length, "family": recipe.family,
        "nemo_recipe": size["nemo_recipe"], "nemo": recipe.nemo_settings(cfg),
        "model": dict(size["model"]),
        "parallelism": {k: getattr(cfg, k) for k in
                        ("tp", "pp", "cp", "vp", "ep", "mbs", "gbs", "dp", "ga", "num_layers")},
        "cluster_type": cluster_type, "options": opts, "image": "/images/nvidia+nemo+25.04.01.sqsh",
        "job_dir": f"{RUN_DIR.replace('EXP', exp)}/{exp}",
        "versions": {"llmb": "0.1.0", "framework": "25.04.01", "nemo_run": "0.11.1",
                     "python": "3.11.7"},
        "git_commit": None, "created": "2026-11-21T00:00:00Z",
    }


def all_cases() -> list[tuple[str, catalog.Recipe, catalog.Config]]:
    return [(f"{r.name}-{c.model_size}-{c.dtype}-{c.gpu_type}-{c.scaling}-{c.num_gpus}", r, c)
            for r in catalog.all_recipes() if not r.is_bridge for c in r.rows()]


CASES = all_cases()


def find(recipe: str, size: str, dtype: str, gpu: str, gpus: int, scaling: str = "weak"
         ) -> tuple[catalog.Recipe, catalog.Config]:
    r = catalog.find_recipe(recipe)
    return r, r.resolve(size, dtype, gpu, gpus, scaling)


def name_of(cfg: Any) -> str:
    """The function or class a NeMo (fiddle) config builds."""
    return cfg.__fn_or_cls__.__name__


def with_field(data: dict[str, Any], path: str, value: object) -> dict[str, Any]:
    """A deep copy of `data` with the field at the dotted `path` set to `value`, or removed
    where `value` is KeyError."""
    out = copy.deepcopy(data)
    *parents, leaf = path.split(".")
    target = out
    for key in parents:
        target = target[key]
    if value is KeyError:
        del target[leaf]
    else:
        target[leaf] = value
    return out
