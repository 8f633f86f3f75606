"""llmb.container.train without NeMo: the run manifest -> override plan mapping, for every published
row.

`make test-nemo` (tests/nemo) applies the same plans to NeMo 2.3.1's real recipes; here the
plan is checked as plain data so it runs in the default suite in a fraction of a second.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import stacks
import upstream_jobs
from llmb import manifest
from llmb.container import train
from llmb.launch import jobenv
from llmb.manifest import ManifestError
from llmb.recipes import catalog
from trainmanifests import (
    CASES,
    OPTION_VARIANTS,
    RUN_DIR,
    SEQ_LENGTH,
    find,
    make_manifest,
    with_field,
)


@pytest.mark.parametrize("variant", sorted(OPTION_VARIANTS))
def test_every_published_row_plans_with_its_own_layout(variant: str) -> None:
    assert len(CASES) > 50
    for _, recipe, cfg in CASES:
        p = train.plan(make_manifest(recipe, cfg, **OPTION_VARIANTS[variant]))
        s = p["strategy"]
        where = cfg.experiment_name
        assert (s["tensor_model_parallel_size"], s["pipeline_model_parallel_size"],
                s["context_parallel_size"]) == (cfg.tp, cfg.pp, cfg.cp), where
        assert s["virtual_pipeline_model_parallel_size"] == cfg.vp, where
        assert s["sequence_parallel"] is (cfg.tp > 1), where
        assert s["pipeline_dtype"] == ("bfloat16" if cfg.pp > 1 else None), where
        assert p["data"]["micro_batch_size"] == cfg.mbs
        assert p["data"]["global_batch_size"] == cfg.gbs
        assert p["data"]["seq_length"] == p["model"]["seq_length"] == SEQ_LENGTH[recipe.family]
        assert p["model"]["num_layers"] == cfg.num_layers
        assert p["trainer"]["num_nodes"] == cfg.nodes
        assert p["trainer"]["devices"] == cfg.gpus_per_node
        assert p["recipe_args"] == {"performance_mode": recipe.name != "nemotronh",
                                    "num_nodes": cfg.nodes,
                                    "num_gpus_per_node": cfg.gpus_per_node}
        steps = OPTION_VARIANTS[variant].get("max_steps", 50)
        assert p["trainer"]["max_steps"] == steps
        assert p["trainer"]["val_check_interval"] == steps
        assert p["data"]["num_train_samples"] == steps * cfg.gbs
        assert p["trainer"]["limit_val_batches"] == 0
        assert p["trainer"]["num_sanity_val_steps"] == 0
        assert p["trainer"]["log_every_n_steps"] == 1
        if p["comm_overlap"] is not None:
            assert p["comm_overlap"]["tp_comm_overlap"] is (cfg.tp > 1)
        assert p["resume"]["resume_if_exists"] is False
        json.dumps(p)  # plain data only


def test_the_plan_is_plain_json_that_round_trips() -> None:
    _, recipe, cfg = CASES[0]
    p = train.plan(make_manifest(recipe, cfg, profile=True))
    assert json.loads(json.dumps(p)) == p


@pytest.mark.parametrize(("recipe", "size", "gpus", "layers"), [
    ("llama3.1", "405b", 32, 8), ("llama3.1", "405b", 64, 30), ("llama3.1", "405b", 128, 62),
    ("llama3.1", "405b", 512, 126), ("llama3.1", "70b", 64, 80), ("nemotronh", "56b", 32, 118),
])
def test_num_layers_follow_the_proxy_depth(recipe: str, size: str, gpus: int,
                                           layers: int) -> None:
    dtype = "fp8"
    r, cfg = find(recipe, size, dtype, "h100", gpus)
    assert train.plan(make_manifest(r, cfg))["model"]["num_layers"] == layers


def test_fp8_is_bf16_with_fp8_delayed_scaling_without_fp32_grad_reduce() -> None:
    for _, recipe, cfg in CASES:
        p = train.plan(make_manifest(recipe, cfg))
        prec = p["precision"]
        assert prec["grad_reduce_in_fp32"] is False
        assert p["ddp"]["grad_reduce_in_fp32"] is False
        if cfg.dtype == "fp8":
            assert prec["plugin"] == "bf16_with_fp8_mixed"
            assert (prec["fp8"], prec["fp8_recipe"]) == ("hybrid", "delayed")
            assert (prec["fp8_amax_history_len"], prec["fp8_amax_compute_algo"]) == (1024, "max")
        else:
            assert prec == {"plugin": "bf16_mixed", "grad_reduce_in_fp32": False}


@pytest.mark.parametrize(("recipe", "size", "dtype", "gpu", "gpus", "scaling", "expected"), [
    ("llama3.1", "8b", "fp8", "h100", 8, "weak", None),  # TP 1: no TP overlap at all
    ("llama3.1", "70b", "fp8", "h100", 64, "weak",
     "userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192"),
    # CP 2 with the CP-less layout, as upstream's 70b bf16 benchmark does
    ("llama3.1", "70b", "bf16", "h100", 64, "weak",
     "userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192"),
    ("llama3.1", "405b", "bf16", "h100", 512, "weak",
     "userbuffers_bf16_h100_h16384_tp8_cp2_mbs1_seqlen8192"),
    ("llama3.1", "405b", "fp8", "h100", 32, "weak",
     "userbuffers_fp8_h100_h16384_tp8_cp2_mbs1_seqlen8192"),
    ("nemotron", "15b", "fp8", "h100", 16, "weak", None),  # TE's default layout on H100
    ("nemotron", "340b", "fp8", "h100", 128, "weak", None),
    ("nemotron", "340b", "fp8", "b200", 128, "weak",
     "userbuffers_fp8_b200_h18432_tp8_mbs1_seqlen4096"),
    ("nemotron", "340b", "bf16", "gb200", 512, "strong",
     "userbuffers_bf16_b200_h18432_tp8_mbs1_seqlen4096"),
])
def test_tp_overlap_userbuffers(recipe: str, size: str, dtype: str, gpu: str, gpus: int,
                                scaling: str, expected: str | None) -> None:
    r, cfg = find(recipe, size, dtype, gpu, gpus, scaling)
    comm = train.plan(make_manifest(r, cfg))["comm_overlap"]
    assert comm["tp_comm_overlap_cfg"] == expected
    assert comm["tp_comm_overlap"] is (cfg.tp > 1)


def test_every_userbuffer_layout_is_tuned_for_its_rows_shape() -> None:
    """A layout is tuned for one hidden size, TP (and CP) size, GPU architecture and dtype; its
    name says which. metadata.yaml must give every row the layout of its own shape."""
    arch = {"h100": "h100", "b200": "b200", "gb200": "b200"}  # GB200 uses the B200 layouts
    seen = 0
    for _, recipe, cfg in CASES:
        name = train.plan(make_manifest(recipe, cfg))["comm_overlap"]
        name = name and name["tp_comm_overlap_cfg"]
        if name is None:
            continue
        seen += 1
        hidden = recipe.size(cfg.model_size)["model"]["hidden_size"]
        assert f"_{arch[cfg.gpu_type]}_h{hidden}_tp{cfg.tp}_" in name, (cfg, name)
        assert name.startswith("userbuffers_bf16_") or name.startswith(f"userbuffers_{cfg.dtype}_")
    assert seen > 20


def test_nemotronh_runs_without_performance_mode_or_comm_overlap() -> None:
    """Seed 000 measured NeMo's recipe without performance mode: no garbage-collection or
    communication-overlap callback, so no TP overlap and NeMo's own DDP settings."""
    r, cfg = find("nemotronh", "56b", "fp8", "h100", 64)
    p = train.plan(make_manifest(r, cfg))
    assert p["recipe_args"]["performance_mode"] is False
    assert p["comm_overlap"] is None and p["gc"] is None
    assert p["callbacks"] == ["TimingCallback"]
    assert p["data"]["tokenizer"] == {"library": "null", "model_name": "NullTokenizer",
                                      "vocab_size": 131072}


def test_cuda_graphs_on_blackwell_340b_only() -> None:
    for _, recipe, cfg in CASES:
        p = train.plan(make_manifest(recipe, cfg))
        on = recipe.name == "nemotron" and cfg.gpu_type in ("b200", "gb200")
        assert p["model"]["enable_cuda_graph"] is on, cfg
        assert p["strategy"]["use_te_rng_tracker"] is on, cfg


def test_runai_bootstraps_userbuffers_over_nccl_and_a_load_drops_the_precision_aware_optimizer(
) -> None:
    r, cfg = find("nemotron", "15b", "bf16", "h100", 16)
    assert train.plan(make_manifest(r, cfg))["optim"]["use_precision_aware_optimizer"] is True
    assert "tp_comm_bootstrap_backend" not in train.plan(make_manifest(r, cfg))["comm_overlap"]
    runai = train.plan(make_manifest(r, cfg, cluster_type="runai"))
    assert runai["comm_overlap"]["tp_comm_bootstrap_backend"] == "nccl"
    load = train.plan(make_manifest(r, cfg, checkpoint_load_path="/c", max_steps=1))
    assert load["optim"]["use_precision_aware_optimizer"] is False


def test_param_gather_overlaps_the_optimizer_only_with_dp_pp_vp_and_no_checkpoint() -> None:
    r, cfg = find("llama3.1", "70b", "fp8", "h100", 128)  # DP 4, PP 8, VP 5
    assert cfg.dp > 1
    key = "overlap_param_gather_with_optimizer_step"
    assert train.plan(make_manifest(r, cfg))["comm_overlap"][key] is True
    assert train.plan(make_manifest(r, cfg, checkpoint_save=True))["comm_overlap"][key] is False
    assert train.plan(make_manifest(
        r, cfg, checkpoint_load_path="/c", max_steps=1))["comm_overlap"][key] is False
    r, cfg = find("llama3.1", "405b", "fp8", "h100", 32)  # PP 1
    assert train.plan(make_manifest(r, cfg))["comm_overlap"][key] is False
    r, cfg = find("nemotron", "340b", "fp8", "h100", 128)  # DP 2, PP 8, VP 12
    assert train.plan(make_manifest(r, cfg))["comm_overlap"][key] is True


def test_callbacks_per_family() -> None:
    base = ["TimingCallback", "GarbageCollectionCallback", "MegatronCommOverlapCallback"]
    for _, recipe, cfg in CASES:
        p = train.plan(make_manifest(recipe, cfg))
        if recipe.family == "nemotronh":
            # NeMo 2.3.1 has no Nemotron-H FLOPs formula (seed 000: its TFLOPS are invalid)
            # and seed 000's job has no performance mode
            assert p["callbacks"] == ["TimingCallback"] and p["flops_model_name"] is None
            assert p["gc"] is None
        else:
            assert p["callbacks"] == [*base, "FLOPsMeasurementCallback"]
            assert p["flops_model_name"] == {"llama": "llama3",
                                             "nemotron4": "nemotron"}[recipe.family]
            assert p["gc"] == {"gc_interval_train": 100, "gc_interval_val": 100}


def test_profile_adds_nsys_on_the_first_eight_ranks_for_its_steps() -> None:
    r, cfg = find("llama3.1", "8b", "fp8", "h100", 16)
    p = train.plan(make_manifest(r, cfg, profile=True, profile_start_step=20,
                                 profile_stop_step=25, max_steps=25))
    assert p["callbacks"][-1] == "NsysCallback"
    assert p["nsys"] == {"start_step": 20, "end_step": 25, "ranks": [0, 1, 2, 3, 4, 5, 6, 7],
                         "gen_shape": False, "gpu_metrics": False}
    p = train.plan(make_manifest(r, cfg, profile=True, gpu_metrics=True))
    assert p["nsys"]["gpu_metrics"] is True and p["nsys"]["start_step"] == 45
    assert train.plan(make_manifest(r, cfg))["nsys"] is None
    assert "NsysCallback" not in train.plan(make_manifest(r, cfg, nccl_trace=True))["callbacks"]


def test_checkpoint_save_goes_under_the_job_code_dir() -> None:
    r, cfg = find("llama3.1", "8b", "bf16", "h100", 16)
    m = make_manifest(r, cfg, checkpoint_save=True)
    p = train.plan(m)
    exp = cfg.experiment_name
    log_dir = f"{RUN_DIR.replace('EXP', exp)}/{exp}/code/nemo_experiments"
    assert p["log"]["log_dir"] == log_dir
    assert p["log"]["use_datetime_version"] is False and p["log"]["name"] == "default"
    assert p["checkpoint"] == {"save": True, "dir": f"{log_dir}/default/checkpoints",
                               "every_n_train_steps": 50, "save_top_k": 1, "load_path": None}
    assert p["trainer"]["enable_checkpointing"] is True
    m["job_dir"] = None
    assert train.plan(m)["log"]["log_dir"] is None and train.plan(m)["checkpoint"]["dir"] is None


def test_no_checkpoint_at_all_without_save() -> None:
    r, cfg = find("nemotronh", "56b", "fp8", "h100", 32)  # its recipe checkpoints by default
    p = train.plan(make_manifest(r, cfg))
    assert p["trainer"]["enable_checkpointing"] is False
    assert p["checkpoint"]["save"] is False and p["checkpoint"]["dir"] is None
    assert p["resume"]["restore"] is None


def test_checkpoint_load_restores_weights_and_optimizer_into_a_fresh_trainer() -> None:
    r, cfg = find("llama3.1", "8b", "fp8", "h100", 16)
    path = OPTION_VARIANTS["checkpoint_load"]["checkpoint_load_path"]
    p = train.plan(make_manifest(r, cfg, checkpoint_load_path=path, max_steps=1))
    assert p["resume"] == {"resume_if_exists": False, "restore": {
        "path": path, "load_model_state": True, "load_optim_state": True,
        "load_artifacts": False}}
    assert p["trainer"]["max_steps"] == 1
    assert p["checkpoint"]["load_path"] == path and p["checkpoint"]["save"] is False


def test_tokenizers_are_the_upstream_jobs() -> None:
    r, cfg = find("llama3.1", "405b", "fp8", "h100", 32)
    assert train.plan(make_manifest(r, cfg))["data"]["tokenizer"] == {
        "library": "huggingface", "model_name": "meta-llama/Llama-3.1-405B"}
    r, cfg = find("llama3.1", "8b", "fp8", "h100", 32)
    assert train.plan(make_manifest(r, cfg))["data"]["tokenizer"] == {
        "library": "huggingface", "model_name": "meta-llama/Meta-Llama-3-8B"}
    r, cfg = find("nemotron", "15b", "bf16", "h100", 16)
    assert train.plan(make_manifest(r, cfg))["data"]["tokenizer"]["vocab_size"] == 256000
    r, cfg = find("nemotronh", "56b", "fp8", "h100", 32)  # no Hugging Face from compute nodes
    assert train.plan(make_manifest(r, cfg))["data"]["tokenizer"]["library"] == "null"


# --- fidelity: what the plan decides equals the upstream jobs (tests/helpers/upstream_jobs.py) ---

def plan_view(recipe: catalog.Recipe, cfg: catalog.Config, p: dict[str, Any]) -> dict[str, Any]:
    """The fields of upstream_jobs.FIELDS that the plan alone decides (the NeMo tier compares
    the rest, on the recipe NeMo builds)."""
    comm = p["comm_overlap"]
    prec = p["precision"]
    tok = p["data"]["tokenizer"]
    view = {
        "nemo_recipe": p["nemo_recipe"],
        "performance_mode": p["recipe_args"]["performance_mode"],
        "callbacks": tuple(p["callbacks"]),
        "gc_interval": (p["gc"]["gc_interval_train"], p["gc"]["gc_interval_val"])
        if p["gc"] else None,
        "enable_cuda_graph": p["model"]["enable_cuda_graph"],
        "use_te_rng_tracker": p["strategy"]["use_te_rng_tracker"],
        "cross_entropy_fusion_impl": p["model"]["cross_entropy_fusion_impl"],
        "fp8": prec.get("fp8"),
        "grad_reduce_in_fp32": prec["grad_reduce_in_fp32"],
        "use_precision_aware_optimizer": p["optim"]["use_precision_aware_optimizer"],
        "tokenizer": (tok["library"], tok["model_name"], tok.get("vocab_size")),
    }
    if prec.get("fp8"):
        view |= {"fp8_recipe": prec["fp8_recipe"], "fp8_param_gather": prec["fp8_param_gather"],
                 "fp8_amax": (prec["fp8_amax_history_len"], prec["fp8_amax_compute_algo"])}
    if comm is None:
        view |= dict.fromkeys(("tp_comm_overlap", "tp_comm_overlap_cfg",
                               "overlap_param_gather_with_optimizer_step",
                               "tp_comm_bootstrap_backend"))
    else:
        # Keys the plan leaves out keep the NeMo recipe's value: compared by the NeMo tier.
        view |= {k: v for k, v in comm.items()}
        view.setdefault("tp_comm_bootstrap_backend", None)
    env = jobenv.job_env(recipe, cfg, workload="/w")
    view |= {f"env.{name}": env.get(name) for name in upstream_jobs.ENV}
    return view


def test_the_plan_matches_the_upstream_jobs() -> None:
    """Every published row, in every run variant upstream distinguishes: the fields the plan
    decides equal the upstream job's (tests/helpers/upstream_jobs.py), minus llmb's listed
    deviations."""
    compared, problems = 0, []
    for _, recipe, cfg in CASES:
        for variant in upstream_jobs.variants(recipe.name, cfg.model_size):
            options = dict(upstream_jobs.VARIANT_OPTIONS[variant])
            p = train.plan(make_manifest(recipe, cfg, **options))
            view = plan_view(recipe, cfg, p)
            row = upstream_jobs.row_of(cfg, variant)
            problems += [f"{cfg.experiment_name} {variant}: {m}"
                         for m in upstream_jobs.mismatches(row, view, set(view))]
            compared += 1
    assert not problems, "\n".join(problems[:40])
    assert compared > 300


def test_every_field_of_the_upstream_table_is_set_for_some_row() -> None:
    """A field no row's upstream job sets would be compared nowhere."""
    fields = {f for _, _, cfg in CASES for f in upstream_jobs.expected(upstream_jobs.row_of(cfg))}
    assert fields == set(upstream_jobs.FIELDS)


def test_the_fidelity_comparison_fails_on_a_wrong_value() -> None:
    """The comparison is able to fail: one wrong value, one deviation that is not one."""
    r, cfg = find("llama3.1", "70b", "fp8", "h100", 64)
    row = upstream_jobs.row_of(cfg)
    view = plan_view(r, cfg, train.plan(make_manifest(r, cfg)))
    assert upstream_jobs.mismatches(row, view, set(view)) == []
    wrong = {**view, "wgrad_deferral_limit": 50}  # what llama31_70b's performance mode sets
    assert upstream_jobs.mismatches(row, wrong, set(view)) == [
        "wgrad_deferral_limit is 50, expected 22 (NVIDIA/NeMo d2b21556 "
        "nemo/collections/llm/recipes/llama3_70b.py)"]
    undeviated = {**view, "callbacks": view["callbacks"][:3]}  # upstream's, not llmb's
    assert [m.split(" is ")[0] for m in upstream_jobs.mismatches(row, undeviated,
                                                                 set(view))] == ["callbacks"]


def test_profile_defaults_are_each_recipes() -> None:
    """Seed 003: Llama runs 25 steps and profiles 20-25; 004/000: 45-50. Variables override."""
    from llmb.launch import request

    for name, steps in (("llama3.1", (20, 25)), ("nemotron", (45, 50)),
                        ("nemotronh", (45, 50))):
        recipe = catalog.find_recipe(name)
        env = {"LLMB_INSTALL": "/tmp/llmb-x", "JOB_TOTAL_GPUS": str(recipe.rows()[0].num_gpus),
               "MODEL_SIZE": recipe.rows()[0].model_size, "DTYPE": recipe.rows()[0].dtype,
               "SBATCH_ACCOUNT": "a", "SBATCH_PARTITION": "p", "HF_TOKEN": "hf_xtest",
               "DRY_RUN": "true", "ENABLE_PROFILE": "true"}
        req = request.from_env(recipe, env)
        assert (req.profile_start_step, req.profile_stop_step) == steps
        assert req.max_steps == steps[1]
        req = request.from_env(recipe, {**env, "PROFILE_START_STEP": "5",
                                        "PROFILE_STOP_STEP": "9"})
        assert (req.profile_start_step, req.profile_stop_step, req.max_steps) == (5, 9, 9)


def _broken(path: str, value: Any) -> dict[str, Any]:
    r, cfg = find("llama3.1", "8b", "fp8", "h100", 8)
    return with_field(make_manifest(r, cfg), path, value)


@pytest.mark.parametrize(("path", "value", "message"), [
    ("schema", 2, "has schema=2, which is not supported; supported: 1"),
    ("dtype", "fp16", "manifest dtype='fp16' is not supported; allowed: bf16, fp8"),
    ("family", "gpt", "manifest family='gpt' is not supported"),
    ("parallelism", KeyError, "is not a schema-1 run manifest: it has no parallelism"),
    ("parallelism.tp", KeyError, "is not a schema-1 run manifest: parallelism has no tp"),
    ("parallelism.tp", 0, "manifest parallelism.tp=0 is not a positive integer"),
    ("parallelism.dp", 3, "TP x PP x CP x DP = 6 is not num_gpus=8"),
    ("parallelism.gbs", 130, "parallelism.gbs=130 is not divisible by MBS x DP = 4"),
    ("options.max_steps", True, "options.max_steps is true (true or false), not a whole "
                                "number"),
    ("options.max_steps", 0, "manifest options.max_steps=0 is not a positive integer"),
    ("parallelism.vp", 0, "manifest parallelism.vp=0 is not a positive integer"),
    ("options.profile", True, None),
    ("nemo", KeyError, "is not a schema-1 run manifest: it has no nemo"),
    ("nemo.tokenizer", KeyError, "manifest nemo: no level sets tokenizer"),
    ("nemo.cuda_graphs", "yes", "manifest nemo: cuda_graphs='yes' is not true or false"),
    ("nemo.comm_overlap", {"wgrad_deferral_limit": -1},
     "manifest nemo: comm_overlap.wgrad_deferral_limit=-1 is not an integer from 1 to 10000000"),
    ("nemo.tokenizer", {"library": "huggingface", "model_name": "$(reboot)"},
     "manifest nemo: tokenizer.model_name='$(reboot)' is not a tokenizer name"),
    ("nemo.comm_overlap", {"userbuffers": "__class__"},
     "manifest nemo: comm_overlap.userbuffers='__class__' is not a userbuffers_* layout name"),
])
def test_bad_manifests_fail_with_one_clear_line(path: str, value: Any,
                                                message: str | None) -> None:
    """A field of another type is refused as the manifest is read (llmb.manifest); a value
    the plan cannot use, by the plan."""
    m = _broken(path, value)
    if message is None:
        train.plan(manifest.check(m))
        return
    with pytest.raises(ManifestError) as err:
        train.plan(manifest.check(m))
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_profile_steps_must_be_ordered() -> None:
    r, cfg = find("llama3.1", "8b", "fp8", "h100", 8)
    with pytest.raises(ManifestError, match="profile_start_step=50 and profile_stop_step=45"):
        train.plan(make_manifest(r, cfg, profile=True, profile_start_step=50,
                                 profile_stop_step=45))


def test_run_reports_a_bad_manifest_without_importing_nemo(capsys) -> None:
    m = _broken("dtype", "fp16")
    before = set(sys.modules)
    assert train.run(m) == 2
    assert capsys.readouterr().err == ("llmb: manifest dtype='fp16' is not supported; "
                                       "allowed: bf16, fp8\n")
    assert not [name for name in set(sys.modules) - before if name.startswith(("nemo", "fiddle"))]


@pytest.mark.skipif(stacks.have_nemo(), reason=stacks.NEMO_INSTALLED)
def test_print_config_without_nemo_says_where_to_run_it(tmp_path: Path, capsys) -> None:
    """On the login node (no NeMo) --print-config is one line pointing at the image."""
    from llmb import entrypoint

    r, cfg = find("nemotron", "15b", "bf16", "h100", 16)
    path = tmp_path / "llmb_manifest.json"
    path.write_text(json.dumps(make_manifest(r, cfg)))
    assert entrypoint.main(r.directory, ["train", "--manifest", str(path),
                                         "--print-config"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("llmb: building the NeMo recipe needs NeMo, and nemo is missing here: "
                          "run it inside the benchmark image") and err.count("\n") == 1
    smoke = make_manifest(r, cfg, smoke_test=True)
    path.write_text(json.dumps(smoke))
    assert entrypoint.main(r.directory, ["train", "--manifest", str(path),
                                         "--print-config"]) == 2
    assert "is a SMOKE_TEST run" in capsys.readouterr().err


def test_cli_prints_the_plan(tmp_path: Path, capsys) -> None:
    r, cfg = find("nemotron", "340b", "bf16", "gb200", 512, "strong")
    path = tmp_path / "llmb_manifest.json"
    path.write_text(json.dumps(make_manifest(r, cfg)))
    assert train.main([str(path)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["strategy"]["pipeline_model_parallel_size"] == 4
    assert train.main([str(tmp_path / "missing.json")]) == 2
    assert capsys.readouterr().err.startswith("llmb: manifest ")
    path.write_text("{")
    assert train.main([str(path)]) == 2
    assert "is not valid JSON" in capsys.readouterr().err


def test_the_launchers_manifest_plans(tmp_path: Path) -> None:
    """The manifest llmb.launch.experiment really writes (not this file's copy of its schema)
    plans."""
    from llmb.launch import job, request

    recipe = catalog.find_recipe("llama3.1")
    env = {"LLMB_INSTALL": str(tmp_path), "JOB_TOTAL_GPUS": "64", "MODEL_SIZE": "70b",
           "DTYPE": "fp8", "SBATCH_ACCOUNT": "a", "SBATCH_PARTITION": "p", "HF_TOKEN": "hf_xtest",
           "ENABLE_CHECKPOINT": "true", "DRY_RUN": "true"}
    try:
        req = request.from_env(recipe, env)
    except request.RequestError as err:  # the launcher's rules may need more; say which
        pytest.fail(f"cannot build a launch request for the manifest: {err}")
    paths = job.JobPaths.new(req, stamp=1)
    m = job.build_manifest(req, paths)
    assert "hf_xtest" not in json.dumps(m)
    p = train.plan(m)
    assert p["strategy"]["pipeline_model_parallel_size"] == 8
    assert p["checkpoint"]["dir"] == str(paths.job_dir / "code" / "nemo_experiments" / "default"
                                         / "checkpoints")
