"""llmb.launch.bridgejob: the job of every Megatron-Bridge recipe (bridge/*), golden job
scripts for every row of NVIDIA/exemplar-performance v26.08.00's exemplar.yaml (each GPU type x
workload x dtype at its 512-GPU scale), and the refusals, each one line naming what is allowed.

UPDATE_GOLDEN=1 rewrites tests/golden/bridge/*.txt.
"""

from __future__ import annotations

import io
import os

import pytest
from launchrequests import INSTALL, env_for
from llmb.launch import bridgejob
from llmb.launch.request import RequestError
from llmb.llmbrun.suite import sets
from llmb.recipes import catalog
from paths import REPO

GOLDEN = REPO / "tests" / "golden" / "bridge"
pytestmark = pytest.mark.filterwarnings("ignore")
STAMP = 1_000_000_000_000_000_000

# exemplar.yaml (v26.08.00) as llmb carries it (common/suites/exemplar.yaml, held to upstream's
# lists by tests/llmbrun/suite/test_sets.py): each GPU type's (upstream workload key, size,
# dtypes); the rows of the recipes this repository carries are checked.
EXEMPLAR = {gpu: [(w.key, w.size, list(w.dtypes)) for w in entries]
            for gpu, entries in sets.load("exemplar").workloads.items()}
BRIDGE = {r.data["upstream"]["workload"]: r for r in catalog.all_recipes() if r.is_bridge}
ROWS = [(gpu, key, size, dtype) for gpu, rows in EXEMPLAR.items()
        for key, size, dtypes in rows if key in BRIDGE for dtype in dtypes]


def job(key: str, **extra: str) -> bridgejob.BridgeJob:
    return bridgejob.from_environment(BRIDGE[key], env_for(**extra))


def rendered(bj: bridgejob.BridgeJob) -> str:
    out = io.StringIO()
    assert bridgejob.dry_run(bj, bj.paths(stamp=STAMP), out) == 0
    return out.getvalue().replace(str(INSTALL), "<INSTALL>").replace(str(REPO), "<REPO>")


@pytest.mark.parametrize("row", ROWS, ids=["_".join(r) for r in ROWS])
def test_golden(row: tuple[str, str, str, str]) -> None:
    gpu, key, size, dtype = row
    bj = job(key, GPU_TYPE=gpu, MODEL_SIZE=size, DTYPE=dtype, JOB_TOTAL_GPUS="512")
    text = rendered(bj)
    path = GOLDEN / f"{BRIDGE[key].name}_{size}_{dtype}_{gpu}_512.txt"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"{path} missing: run UPDATE_GOLDEN=1 pytest {__file__}"
    assert text == path.read_text()


def test_every_listed_row_builds_its_arguments() -> None:
    """Every size x dtype x GPU type x scale a bridge recipe lists: the arguments name the
    recipe, the GPU, the scale and the compute dtype upstream's launch.sh would pass."""
    for recipe in BRIDGE.values():
        for cfg in recipe.rows():
            bj = bridgejob.from_environment(recipe, env_for(
                GPU_TYPE=cfg.gpu_type, MODEL_SIZE=cfg.model_size, DTYPE=cfg.dtype,
                JOB_TOTAL_GPUS=str(cfg.num_gpus)))
            args = list(bj.args)
            where = f"{recipe.name} {cfg.model_size} {cfg.dtype} {cfg.gpu_type} {cfg.num_gpus}"
            assert args[args.index("--num_gpus") + 1] == str(cfg.num_gpus), where
            assert args[args.index("--gpu") + 1] == cfg.gpu_type, where
            per_node = "4" if cfg.gpu_type.startswith("gb") else "8"
            assert args[args.index("--gpus_per_node") + 1] == per_node, where
            assert args[args.index("--model_recipe_name") + 1] == \
                recipe.size(cfg.model_size)["recipe_name"], where
            compute = args[args.index("--compute_dtype") + 1]
            assert compute == cfg.dtype or compute.startswith("fp8_"), where
            assert args[args.index("--max_steps") + 1] == "50", where


def test_qwen3_fp8_recipe_defaults_and_choice() -> None:
    assert job("pretrain_qwen3", GPU_TYPE="gb200", DTYPE="fp8",
               JOB_TOTAL_GPUS="256").compute_dtype == "fp8_mx"
    assert job("pretrain_qwen3", GPU_TYPE="b200", DTYPE="fp8", FP8_RECIPE="cs",
               JOB_TOTAL_GPUS="256").compute_dtype == "fp8_cs"
    assert job("pretrain_qwen3", GPU_TYPE="b200", DTYPE="fp8", FP8_RECIPE="fp8_cs",
               JOB_TOTAL_GPUS="256").compute_dtype == "fp8_cs"


def test_qwen3_bf16_235b_gets_the_nccl_qps_off_h100_only() -> None:
    on_gb = job("pretrain_qwen3", GPU_TYPE="gb300", DTYPE="bf16", JOB_TOTAL_GPUS="512")
    on_h100 = job("pretrain_qwen3", GPU_TYPE="h100", DTYPE="bf16", JOB_TOTAL_GPUS="512")
    small = job("pretrain_qwen3", GPU_TYPE="gb300", DTYPE="bf16", MODEL_SIZE="30b",
                JOB_TOTAL_GPUS="64")
    assert on_gb.env["NCCL_IB_QPS_PER_CONNECTION"] == "4"
    assert "NCCL_IB_QPS_PER_CONNECTION" not in on_h100.env
    assert "NCCL_IB_QPS_PER_CONNECTION" not in small.env


def test_overrides_reach_the_arguments_only_when_set() -> None:
    bj = job("pretrain_qwen3", GPU_TYPE="gb300", JOB_TOTAL_GPUS="512", TP="2", GBS="4096")
    args = list(bj.args)
    assert args[args.index("-tp") + 1] == "2" and args[args.index("-gb") + 1] == "4096"
    assert "-pp" not in args


REFUSALS = [
    (dict(GPU_TYPE="h100", DTYPE="fp8"), "GPU_TYPE=h100", "allowed: gb300, gb200, b300, b200"),
    (dict(GPU_TYPE="gb300", DTYPE="nvfp4"), "DTYPE=nvfp4", "allowed: bf16, fp8"),
    (dict(GPU_TYPE="gb300", DTYPE="fp8", FP8_RECIPE="sc"), "FP8_RECIPE=sc",
     "allowed: mx, cs"),
    (dict(GPU_TYPE="gb300", DTYPE="bf16", FP8_RECIPE="mx"), "FP8_RECIPE=mx",
     "DTYPE=fp8 only"),
    (dict(GPU_TYPE="gb300", JOB_TOTAL_GPUS="128"), "JOB_TOTAL_GPUS=128",
     "published: 256, 512"),
    (dict(GPU_TYPE="gb300", ENABLE_CHECKPOINT="true"), "ENABLE_CHECKPOINT=true", "unset it"),
    (dict(GPU_TYPE="gb300", ENABLE_NCCLTRACE="true"), "ENABLE_NCCLTRACE=true", "unset it"),
    (dict(GPU_TYPE="gb300", ENABLE_GPU_METRICS="true"), "ENABLE_GPU_METRICS=true",
     "needs ENABLE_PROFILE=true"),
    (dict(GPU_TYPE="gb300", TP="0"), "TP=0", "positive integer"),
    (dict(GPU_TYPE="gb300", GPUS_PER_NODE="8"), "GPUS_PER_NODE=8", "unset it"),
]


@pytest.mark.parametrize("extra,names,allowed", REFUSALS, ids=[r[1] for r in REFUSALS])
def test_refusals_are_one_line_naming_what_works(extra: dict[str, str], names: str,
                                                 allowed: str) -> None:
    env = {"JOB_TOTAL_GPUS": "512", **extra}
    with pytest.raises(RequestError) as err:
        job("pretrain_qwen3", **env)
    line = str(err.value)
    assert "\n" not in line and names in line and allowed in line, line


def test_gpu_override_pins_another_image() -> None:
    recipe = BRIDGE["pretrain_qwen3"]
    data = dict(recipe.data)
    data["gpu_overrides"] = {"b200": {"image": "nvcr.io/nvidia/nemo:26.04.01"}}
    other = catalog.Recipe(recipe.directory, data)
    bj = bridgejob.from_environment(other, env_for(GPU_TYPE="b200", JOB_TOTAL_GPUS="512"))
    assert bj.image == str(INSTALL / "images" / "nvidia+nemo+26.04.01.sqsh")
    assert bj.args[bj.args.index("--container_image") + 1] == bj.image


def test_dry_run_writes_nothing(tmp_path) -> None:
    bj = bridgejob.from_environment(BRIDGE["pretrain_qwen3"], env_for(
        LLMB_INSTALL=str(tmp_path), GPU_TYPE="gb300", JOB_TOTAL_GPUS="512"))
    out = io.StringIO()
    bridgejob.dry_run(bj, out=out)
    assert list(tmp_path.iterdir()) == []
    assert f"{bj.request.experiments_dir}/pretrain_qwen3_235b_bf16_gpus512/" in out.getvalue()


def test_llmb_run_lists_and_dry_runs_a_bridge_workload(tmp_path) -> None:
    """llmb-run on a gb300 install: `list` shows the workload's sizes, dtypes and scales, and
    `single --dry-run` prints the job llmb would submit, through launch.sh's own rules."""
    from runinstall import make_install, run

    root = make_install(tmp_path / "install", gpu_type="gb300", gres=None,
                        workloads=("pretrain_qwen3",))
    listed = run(["list"], cwd=root)
    assert listed.returncode == 0, listed.stderr
    assert "pretrain_qwen3 (installed)" in listed.stdout
    assert "-s 235b  --dtype fp8  --scale 256, 512" in listed.stdout
    done = run(["single", "-w", "pretrain_qwen3", "-s", "235b", "--dtype", "fp8", "--scale",
                "512", "--dry-run"], cwd=root)
    assert done.returncode == 0, done.stderr
    assert "#SBATCH --nodes=128" in done.stdout
    assert "--compute_dtype fp8_mx --model_family_name qwen" in done.stdout


def test_llama31_rules_gbs_fp8_recipe_and_checkpoints() -> None:
    key = "pretrain_llama3.1"
    on_b200 = job(key, GPU_TYPE="b200", MODEL_SIZE="405b", JOB_TOTAL_GPUS="256")
    assert on_b200.args[on_b200.args.index("-gb") + 1] == "1536"  # 6 per GPU
    with pytest.raises(RequestError, match=r"^GBS=512: upstream's launch.sh sets GBS=1536 .*"
                                           "unset it$"):
        job(key, GPU_TYPE="b200", MODEL_SIZE="405b", JOB_TOTAL_GPUS="256", GBS="512")
    assert job(key, GPU_TYPE="b300", MODEL_SIZE="70b", JOB_TOTAL_GPUS="128").compute_dtype == \
        "fp8_mx"
    assert job(key, GPU_TYPE="b300", MODEL_SIZE="70b", JOB_TOTAL_GPUS="64").compute_dtype == \
        "fp8_cs"
    with pytest.raises(RequestError, match=r"allowed: mx$"):
        job(key, GPU_TYPE="b300", MODEL_SIZE="70b", JOB_TOTAL_GPUS="128", FP8_RECIPE="cs")
    with pytest.raises(RequestError, match="known NCCL error"):
        job(key, GPU_TYPE="gb300", MODEL_SIZE="70b", JOB_TOTAL_GPUS="64", ENABLE_CHECKPOINT="1")
    small = job(key, GPU_TYPE="gb300", MODEL_SIZE="8b", JOB_TOTAL_GPUS="8",
                ENABLE_CHECKPOINT="true")
    assert "--save_interval=50" in small.args
    assert small.request.llmb_workload == INSTALL / "workloads" / "pretrain_llama3.1-bridge"


def test_gpt_oss_ep_and_mbs_defaults_yield_to_the_variables() -> None:
    at_72 = job("pretrain_gpt_oss", GPU_TYPE="gb300", JOB_TOTAL_GPUS="72")
    assert at_72.args[at_72.args.index("-ep") + 1] == "8"
    assert at_72.args[at_72.args.index("-mb") + 1] == "5"
    own = job("pretrain_gpt_oss", GPU_TYPE="gb300", JOB_TOTAL_GPUS="72", EP="4")
    assert own.args[own.args.index("-ep") + 1] == "4"
    assert "-ep" not in job("pretrain_gpt_oss", GPU_TYPE="gb300", JOB_TOTAL_GPUS="64").args


def test_deepseek_layouts_at_128_and_h100_time_limit() -> None:
    gb200 = job("pretrain_deepseek-v3", GPU_TYPE="gb200", DTYPE="fp8", JOB_TOTAL_GPUS="128")
    assert " ".join(gb200.args).count("-tp 2 -pp 2 -vp 8 -ep 32") == 1
    assert gb200.compute_dtype == "fp8_mx"
    h100 = job("pretrain_deepseek-v3", GPU_TYPE="h100", DTYPE="fp8", JOB_TOTAL_GPUS="1024")
    assert (h100.compute_dtype, h100.request.time_limit) == ("fp8_sc", "01:30:00")
    own = job("pretrain_deepseek-v3", GPU_TYPE="h100", JOB_TOTAL_GPUS="1024",
              TIME_LIMIT="00:10:00")
    assert own.request.time_limit == "00:10:00"


def test_a_comma_list_argument_stays_one_argument() -> None:
    """metadata.yaml quotes `--recompute_modules=mla_up_proj,core_attn` (a plain comma would
    split a YAML flow sequence's item): the job passes it whole, as launch.sh does."""
    bj = job("pretrain_deepseek-v3", GPU_TYPE="b300", DTYPE="fp8", JOB_TOTAL_GPUS="128")
    assert "--recompute_modules=mla_up_proj,core_attn" in bj.args
    assert "core_attn" not in bj.args


def test_kimi_k2_on_b200_runs_the_image_it_pins() -> None:
    bj = job("pretrain_kimi-k2", GPU_TYPE="b200", JOB_TOTAL_GPUS="256")
    assert bj.image == str(INSTALL / "images" / "nvidia+nemo+26.04.01.sqsh")
    assert job("pretrain_kimi-k2", GPU_TYPE="gb200", JOB_TOTAL_GPUS="256").image == \
        str(INSTALL / "images" / "nvidia+nemo+26.06.01.sqsh")


# --- SMOKE_TEST and the run manifest ----------------------------------------------------------

SMOKE = dict(GPU_TYPE="h100", MODEL_SIZE="8b", DTYPE="fp8", JOB_TOTAL_GPUS="16",
             SMOKE_TEST="true")


def test_smoke_golden() -> None:
    """The smoke job of pretrain_llama3.1-bridge: llmb's directives and the recipe's
    environment and image, every rank running the recipes' entrypoint with the run's manifest,
    the repository and the workload directory mounted, no Megatron-Bridge checkout."""
    bj = job("pretrain_llama3.1", **SMOKE)
    text = rendered(bj)
    path = GOLDEN / "smoke_llama3.1-bridge_8b_fp8_h100_16.txt"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.write_text(text)
    assert text == path.read_text()
    manifest = str(bj.paths(stamp=STAMP).manifest).replace(str(INSTALL), "<INSTALL>")
    assert f"python <REPO>/bridge/entry.py train --manifest {manifest}'" in text
    assert "run_script.py" not in text and "print_sha" not in text
    assert "<REPO>:<REPO>" in text and "#SBATCH --nodes=2" in text
    assert "#SBATCH --ntasks-per-node=8" in text
    for name, value in bj.env.items():  # the real job's environment
        assert f"export {name}={value}".replace(str(INSTALL), "<INSTALL>") in text


def test_smoke_dry_run_writes_nothing_and_needs_no_checkout(tmp_path) -> None:
    bj = bridgejob.from_environment(BRIDGE["pretrain_nemotron-h"], env_for(
        LLMB_INSTALL=str(tmp_path), GPU_TYPE="h100", JOB_TOTAL_GPUS="16", SMOKE_TEST="true"))
    out = io.StringIO()
    bridgejob.dry_run(bj, out=out)
    assert list(tmp_path.iterdir()) == []
    assert "# SMOKE_TEST: every rank runs llmb's smoke workload" in out.getvalue()
    assert "Megatron-Bridge checkout" not in out.getvalue()


def smoke_env(recipe: catalog.Recipe) -> dict[str, str]:
    """SMOKE_TEST=true on the recipe's first row, at one node: a scale no row publishes."""
    row = recipe.rows()[0]
    return env_for(SMOKE_TEST="true", GPU_TYPE=row.gpu_type, MODEL_SIZE=row.model_size,
                   DTYPE=row.dtype, JOB_TOTAL_GPUS=str(row.gpus_per_node))


def test_smoke_families_are_the_smoke_workloads() -> None:
    from llmb.container.smokemodel import TINY_SHAPES

    assert set(bridgejob.SMOKE_FAMILIES) == set(TINY_SHAPES)
    # every Megatron-Bridge recipe's family has a smoke model: each builds its smoke job
    assert {r.family for r in BRIDGE.values()} <= set(TINY_SHAPES)
    for recipe in BRIDGE.values():
        bj = bridgejob.from_environment(recipe, smoke_env(recipe))
        assert bj.smoke and bj.request.config.num_gpus == bj.request.config.gpus_per_node
        assert any("not a published scale" in w for w in bj.request.warnings)


def test_a_family_without_a_smoke_model_is_refused_in_one_line(monkeypatch) -> None:
    recipe = BRIDGE["pretrain_kimi-k2"]
    monkeypatch.setattr(bridgejob, "SMOKE_FAMILIES", ("llama",))
    with pytest.raises(RequestError) as err:
        bridgejob.from_environment(recipe, smoke_env(recipe))
    assert str(err.value) == ("SMOKE_TEST=true is not supported by kimi-k2: the smoke workload "
                              "has no model of family kimi (it has: llama); unset it")


@pytest.mark.parametrize("smoke", [False, True])
def test_manifest_is_a_run_manifest_of_a_megatron_bridge_run(smoke: bool) -> None:
    """The 25.04 recipes' schema, checked by llmb.manifest, with the framework, what
    Megatron-Bridge is asked, and the NeMo fields empty."""
    from llmb import manifest as run_manifest

    extra = dict(SMOKE) if smoke else dict(GPU_TYPE="h100", MODEL_SIZE="70b", DTYPE="fp8",
                                           JOB_TOTAL_GPUS="64")
    bj = job("pretrain_llama3.1", **extra)
    paths = bj.paths(stamp=STAMP)
    m = run_manifest.check(bridgejob.manifest(bj, paths, created="2026-01-01T00:00:00Z"))
    assert m["framework"] == "megatron-bridge" and m["family"] == "llama"
    size = extra["MODEL_SIZE"]
    assert m["bridge"] == {"compute_dtype": "fp8_cs",
                           "model_recipe_name": f"llama3_{size}",
                           "args": list(bj.args)}
    assert (m["nemo_recipe"], m["nemo"], m["model"]) == ("", {}, {})
    assert m["parallelism"]["tp"] is None and m["parallelism"]["gbs"] is None
    assert m["parallelism"]["num_layers"] == bj.request.config.num_layers
    assert (m["options"]["smoke_test"], m["num_gpus"], m["image"]) == (
        smoke, int(extra["JOB_TOTAL_GPUS"]), bj.image)
    assert m["job_dir"] == str(paths.job_dir) and m["experiment"] == bj.experiment
    assert m["workload"] == "pretrain_llama3.1-bridge"


def test_train_refuses_a_megatron_bridge_manifest_it_cannot_train(tmp_path, capsys) -> None:
    """`train --manifest` of a Megatron-Bridge run: its smoke workload only."""
    from llmb import entrypoint
    from llmb import manifest as run_manifest

    bj = job("pretrain_llama3.1", GPU_TYPE="h100", MODEL_SIZE="70b", DTYPE="fp8",
             JOB_TOTAL_GPUS="64")
    path = tmp_path / "llmb_manifest.json"
    run_manifest.write(bridgejob.manifest(bj, bj.paths(stamp=STAMP)), path)
    assert entrypoint.main(REPO / "bridge" / "llama3.1", ["train", "--manifest", str(path)]) == 2
    assert capsys.readouterr().err == (
        f"llmb: manifest {path} is a megatron-bridge run: its own scripts train it; train "
        "--manifest runs its SMOKE_TEST workload only\n")
