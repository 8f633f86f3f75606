"""The smoke workload: a real tiny training run, single process, torchrun and Slurm-style ranks.

The tests that train need torch (the dev venv installs the CPU build from
common/requirements/smoke.txt); the others check what must hold without it.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trainmanifests
from llmb import manifest
from llmb.analysis import timing
from llmb.container import nemolog, smoke, smokemodel, smokemoe
from llmb.recipes import catalog, perf
from paths import COMMON

RANK_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
STEP = re.compile(
    r"^Training epoch 0, iteration (\d+)/(\d+) \| lr: (\S+) \| global_batch_size: (\d+)"
    r" \| global_step: (\d+) \| reduced_train_loss: (\S+) \| train_step_timing in s: (\S+)"
    r" \| TFLOPS_per_GPU: (\S+) \| consumed_samples: (\d+)$"
)
PREFIX = r"^\[NeMo I \d{4}-\d\d-\d\d \d\d:\d\d:\d\d smoke:\d+\] "
SAVE = re.compile(
    PREFIX + r"Global Checkpoint Save : Rank: 0 : Iteration: (\d+) : Start time: \d+\.\d{3}s"
    r" : Save duration: \d+\.\d{3}s$"
)
LOAD = re.compile(
    PREFIX + r"Global Checkpoint Load : Rank : 0 : Start time : \d+\.\d{3}s"
    r" : Time spent in load_checkpoint: \d+\.\d{3}s$"
)


def make_manifest(job_dir: Path, family: str = "llama", steps: int = 12, **options: Any) -> dict:
    """The launcher's manifest of a SMOKE_TEST run of the family's first published row."""
    recipe = next(r for r in catalog.all_recipes() if r.family == family)
    m = trainmanifests.make_manifest(recipe, recipe.rows()[0], smoke_test=True, max_steps=steps,
                                     **options)
    m["job_dir"] = str(job_dir)
    return m


def step_lines(text: str) -> list[dict[str, float]]:
    names = ("iteration", "last", "lr", "gbs", "global_step", "loss", "time", "tflops", "consumed")
    return [
        dict(zip(names, map(float, m.groups()), strict=True))
        for line in text.splitlines()
        if (m := STEP.match(line))
    ]


@pytest.fixture
def no_launcher(monkeypatch: pytest.MonkeyPatch) -> None:
    """In-process runs are single-process whatever launched pytest."""
    for name in list(os.environ):
        if name in RANK_VARS or name.startswith(("SLURM_", "LLMB_SMOKE_")):
            monkeypatch.delenv(name)


def clean_env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in RANK_VARS and not k.startswith(("SLURM_", "LLMB_SMOKE_"))
    }
    env["PYTHONPATH"] = str(COMMON)
    env.update(extra)
    return env


# --- without torch ---------------------------------------------------------------------------
def test_module_imports_without_torch() -> None:
    code = "import sys; sys.modules['torch'] = None; import llmb.container.smoke; print('ok')"
    done = subprocess.run(
        [sys.executable, "-c", code], env=clean_env(), capture_output=True, text=True, check=False
    )
    assert done.stdout.strip() == "ok", done.stderr


@pytest.mark.parametrize("family", sorted(smokemodel.TINY_SHAPES))
def test_tiny_shapes_have_the_metadata_keys_perf_needs(family: str) -> None:
    shape = smokemodel.TINY_SHAPES[family]
    flops = smokemodel.model_flops(family, shape, smokemodel.TINY_SEQ_LENGTH)
    if family in smokemoe.MOE_SHAPES:  # no metadata shape: the GPT keys and the experts'
        assert set(perf.GPT_KEYS) <= set(shape) and shape["moe_router_topk"] > 1
    else:
        assert set(shape) == set(perf.SHAPE_KEYS[family])
        assert flops == perf.model_flops(family, shape, smokemodel.TINY_SEQ_LENGTH)
    assert flops > 0
    assert shape["hidden_size"] <= 128 and shape["vocab_size"] <= 1024
    assert shape["num_attention_heads"] % shape["num_query_groups"] == 0


def test_nemotronh_pattern_matches_its_layer_counts() -> None:
    shape, pattern = smokemodel.TINY_SHAPES["nemotronh"], smokemodel.NEMOTRONH_PATTERN
    assert len(pattern) == shape["num_layers"]
    assert pattern.count("M") == shape["mamba_layers"]
    assert pattern.count("*") == shape["attention_layers"]
    assert pattern.count("-") == shape["mlp_layers"]
    assert shape["mamba_num_heads"] * shape["mamba_head_dim"] == (
        shape["mamba_expand"] * shape["hidden_size"]
    )


def test_ranks_from_torchrun() -> None:
    env = {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "MASTER_ADDR": "h",
           "MASTER_PORT": "1", "SLURM_PROCID": "0", "SLURM_NTASKS": "2"}
    assert smoke.detect_ranks(env, Path("/j")) == smoke.Ranks(3, 4, 1, "torchrun", "env://")


def test_torchrun_vars_without_master_are_an_error() -> None:
    with pytest.raises(smoke.SmokeError, match="MASTER_ADDR and MASTER_PORT"):
        smoke.detect_ranks({"RANK": "0", "WORLD_SIZE": "2"}, Path("/j"))


def test_ranks_from_slurm_use_a_file_in_the_run_dir_per_job_step_and_restart() -> None:
    env = {"SLURM_PROCID": "9", "SLURM_NTASKS": "16", "SLURM_LOCALID": "1", "SLURM_JOB_ID": "42",
           "SLURM_STEP_ID": "2", "SLURM_RESTART_COUNT": "1"}
    ranks = smoke.detect_ranks(env, Path("/shared/run"))
    assert ranks == smoke.Ranks(
        9, 16, 1, "slurm", "file:///shared/run/.smoke_rendezvous/42-2-r1"
    )
    requeued = smoke.detect_ranks({**env, "SLURM_RESTART_COUNT": "2"}, Path("/shared/run"))
    assert requeued.init_method != ranks.init_method
    override = {**env, "LLMB_SMOKE_INIT_METHOD": "tcp://10.0.0.1:29500"}
    assert smoke.detect_ranks(override, Path("/r")).init_method == "tcp://10.0.0.1:29500"


def test_no_launcher_is_one_process() -> None:
    assert smoke.detect_ranks({}, Path("/j")) == smoke.Ranks(0, 1, 0, "single", None)
    with pytest.raises(smoke.SmokeError, match="SLURM_PROCID=x is not an integer"):
        smoke.detect_ranks({"SLURM_PROCID": "x", "SLURM_NTASKS": "2"}, Path("/j"))


def test_learning_rate_warms_up_then_decays() -> None:
    rates = [smoke.learning_rate(step, 50) for step in range(50)]
    assert rates[0] < rates[9] == pytest.approx(smoke.PEAK_LR)
    assert all(a >= b for a, b in itertools.pairwise(rates[9:]))
    assert rates[-1] >= 0.1 * smoke.PEAK_LR


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.update(family="gpt"),
         "family=gpt has no smoke model; known: llama, nemotron4, nemotronh, deepseek, kimi, "
         "qwen3, gpt_oss"),
        (lambda d: d.update(job_dir="runs/x"), "job_dir=runs/x is not an absolute path"),
        (lambda d: d.update(experiment="a/b"), "experiment=a/b is not an experiment name"),
        (lambda d: d["options"].update(max_steps=0),
         "options.max_steps=0 is not a positive integer"),
    ],
)
def test_bad_manifest_is_one_line_and_exit_2(
    tmp_path: Path, no_launcher: None, capsys: pytest.CaptureFixture[str],
    change: Any, message: str,
) -> None:
    """Values the smoke workload cannot run; their types were checked as the manifest was read."""
    m = make_manifest(tmp_path)
    change(m)
    assert smoke.run(manifest.check(m)) == 2
    err = capsys.readouterr().err
    assert err == f"llmb: manifest {message}\n"


# --- training (torch) ------------------------------------------------------------------------
@pytest.fixture
def torch() -> Any:
    return pytest.importorskip("torch")


def test_single_process_run_prints_nemo_step_lines(
    tmp_path: Path, no_launcher: None, torch: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    assert smoke.run(make_manifest(tmp_path, steps=12)) == 0
    out = capsys.readouterr().out
    assert "Smoke workload (SMOKE_TEST=true): NOT the pretrain_llama3.1 8b benchmark" in out
    assert "world size 1" in out
    steps = step_lines(out)
    assert [s["iteration"] for s in steps] == list(range(12))
    assert {s["last"] for s in steps} == {11}
    assert [s["global_step"] for s in steps] == list(range(12))
    assert {s["gbs"] for s in steps} == {1}
    assert [s["consumed"] for s in steps] == [i + 1 for i in range(12)]
    flops = perf.model_flops("llama", smokemodel.TINY_SHAPES["llama"], smokemodel.TINY_SEQ_LENGTH)
    for s in steps:
        assert s["time"] > 0 and s["lr"] > 0 and 0 < s["loss"] < 20
        # TFLOPS_per_GPU is the shared formula on the tiny shape (both printed to 4 digits).
        assert s["tflops"] == pytest.approx(perf.tflops_per_gpu(1, flops, s["time"], 1), rel=2e-3)
    assert not (tmp_path / ".smoke_rendezvous").exists()


@pytest.mark.parametrize("family", sorted(set(smokemodel.TINY_SHAPES) - set(smokemoe.MOE_SHAPES)))
def test_each_family_builds_and_trains(
    tmp_path: Path, no_launcher: None, torch: Any, capsys: pytest.CaptureFixture[str],
    family: str,
) -> None:
    assert smoke.run(make_manifest(tmp_path, family=family, steps=3)) == 0
    steps = step_lines(capsys.readouterr().out)
    assert [s["iteration"] for s in steps] == [0, 1, 2]
    assert all(s["loss"] > 0 for s in steps)


@pytest.mark.parametrize("family", sorted(smokemoe.MOE_SHAPES))
def test_each_moe_family_trains_and_logs_its_losses_as_megatron_bridge_does(
    tmp_path: Path, no_launcher: None, torch: Any, capsys: pytest.CaptureFixture[str],
    family: str,
) -> None:
    """A Megatron-Bridge recipe of the family (no 25.04 recipe has one): the iteration lines
    hold the router's and MTP losses after `lm loss`, and the analyzer reads every step."""
    m = make_manifest(tmp_path, steps=3)
    recipe = next(r for r in catalog.all_recipes() if r.family == family)
    m.update(family=family, framework="megatron-bridge", workload=recipe.workload)
    assert smoke.run(m) == 0
    out = capsys.readouterr().out
    records = [line for line in out.splitlines() if "elapsed time per iteration" in line]
    assert [re.search(r"iteration +(\d+)/ +3 \|", r).group(1) for r in records] == [  # type: ignore[union-attr]
        "1", "2", "3"]
    names = re.findall(r"\| ([a-z_0-9 ]+): [0-9.E+-]+ (?=\|)", records[0].split("lm loss")[1])
    assert tuple(names[:names.index("loss scale")]) == smokemoe.logged_names(family)
    for name in smokemoe.logged_names(family):
        value = float(re.search(rf"\| {name}: (\S+) \|", records[-1]).group(1))  # type: ignore[union-attr]
        # a seq_aux_loss router records no batch-wide loss: logged 0, as a real run logs it
        zero = name == "load_balancing_loss" and smokemoe.ROUTER_LOSS[family] == "seq_aux_loss"
        assert value == 0.0 if zero else 0.5 < value < 20, (name, value)
    scan = timing.scan_lines(out.splitlines())
    assert sorted(scan.steps) == [0, 1, 2] and scan.complete()


def test_the_model_is_shaped_after_the_family(torch: Any) -> None:
    def kinds(family: str) -> set[str]:
        shape = smokemodel.TINY_SHAPES[family]
        model = smokemodel.build_model(family, shape, smokemodel.TINY_SEQ_LENGTH)
        return {type(m).__name__ for m in model.modules()}

    assert {"RMSNorm", "Attention", "MLP"} <= kinds("llama")
    assert "LayerNorm" in kinds("nemotron4") and "RMSNorm" not in kinds("nemotron4")
    assert "MambaLikeMixer" in kinds("nemotronh")
    shape = smokemodel.TINY_SHAPES["llama"]
    model = smokemodel.build_model("llama", shape, smokemodel.TINY_SEQ_LENGTH)
    mlp = next(m for m in model.modules() if type(m).__name__ == "MLP")
    assert mlp.gated  # SwiGLU
    tokens = torch.zeros(2, smokemodel.TINY_SEQ_LENGTH, dtype=torch.long)
    vocab = smokemodel.TINY_SHAPES["llama"]["vocab_size"]
    assert model(tokens).shape == (2, smokemodel.TINY_SEQ_LENGTH, vocab)


def test_checkpoint_save_then_load(
    tmp_path: Path, no_launcher: None, torch: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = make_manifest(tmp_path, steps=4, checkpoint_save=True)
    assert smoke.run(manifest) == 0
    out = capsys.readouterr().out
    saves = [m for line in out.splitlines() if (m := SAVE.match(line))]
    assert [m.group(1) for m in saves] == ["4"]
    ckpt = (
        Path(manifest["job_dir"]) / nemolog.CHECKPOINTS_DIR
        / "default--None=0.0000-epoch=0-consumed_samples=4.0"
    )
    assert [p.name for p in (ckpt / "weights").glob("*.distcp")] == ["__0_0.distcp"]
    metadata = json.loads((ckpt / "weights" / "metadata.json").read_text())
    assert metadata["family"] == "llama" and metadata["global_step"] == 4

    loading = make_manifest(tmp_path, steps=1, checkpoint_load_path=str(ckpt))
    assert smoke.run(loading) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    load_at = next(i for i, line in enumerate(lines) if LOAD.match(line))
    first_step = next(i for i, line in enumerate(lines) if STEP.match(line))
    assert load_at < first_step
    (step,) = step_lines(out)
    assert (step["iteration"], step["last"]) == (0, 0)
    assert (step["global_step"], step["consumed"]) == (4, 5)  # resumed where the save left off


def test_load_restores_the_saved_weights(tmp_path: Path, torch: Any) -> None:
    shape, seq = smokemodel.TINY_SHAPES["nemotronh"], smokemodel.TINY_SEQ_LENGTH
    identity = {"family": "nemotronh", "shape": shape, "seq_length": seq}
    torch.manual_seed(1)
    saved = smokemodel.build_model("nemotronh", shape, seq)
    smoke.save_checkpoint(tmp_path, saved, torch.optim.AdamW(saved.parameters()), identity, 7, 70)
    torch.manual_seed(2)
    fresh = smokemodel.build_model("nemotronh", shape, seq)
    optimizer = torch.optim.AdamW(fresh.parameters())
    assert smoke.load_checkpoint(tmp_path, fresh, optimizer, identity) == (7, 70)
    for (name, a), (_, b) in zip(
        saved.state_dict().items(), fresh.state_dict().items(), strict=True
    ):
        assert torch.equal(a, b), name


def test_loading_another_family_or_a_missing_checkpoint_fails_in_one_line(
    tmp_path: Path, no_launcher: None, torch: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    assert smoke.run(make_manifest(tmp_path, steps=1, checkpoint_save=True)) == 0
    ckpt = next((tmp_path).rglob("weights")).parent
    capsys.readouterr()
    other = make_manifest(tmp_path, family="nemotron4", steps=1, checkpoint_load_path=str(ckpt))
    assert smoke.run(other) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"llmb: LOAD_CHECKPOINT_PATH={ckpt} holds a tiny llama model")
    missing = make_manifest(tmp_path, steps=1, checkpoint_load_path=str(tmp_path / "nope"))
    assert smoke.run(missing) == 2
    assert "has no weights/__0_0.distcp" in capsys.readouterr().err


def test_smoke_output_reads_as_a_complete_run_to_the_analyzer(
    tmp_path: Path, no_launcher: None, torch: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    timing = pytest.importorskip("llmb.analysis.timing")
    assert smoke.run(make_manifest(tmp_path, steps=12, checkpoint_save=True)) == 0
    scan = timing.scan_lines(capsys.readouterr().out.splitlines())
    assert scan.complete() and scan.max_iteration == 11
    assert all(step.time > 0 and step.tflops for step in scan.steps.values())
    assert scan.checkpoint_save_s is not None


def test_torchrun_two_processes_only_rank_0_prints(tmp_path: Path, torch: Any) -> None:
    path = tmp_path / "llmb_manifest.json"
    path.write_text(json.dumps(make_manifest(tmp_path, steps=6)))
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         "-m", "llmb.container.smoke", str(path)],
        cwd=tmp_path, env=clean_env(), capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    steps = step_lines(done.stdout)
    assert [s["iteration"] for s in steps] == list(range(6))  # once each: rank 0 only
    assert {s["gbs"] for s in steps} == {2}
    assert [s["consumed"] for s in steps] == [2 * (i + 1) for i in range(6)]
    assert "world size 2 (data parallel over gloo, ranks from torchrun, rendezvous env://)" in (
        done.stdout
    )
    # Lightning's lines, from which the analyzer takes the world size it checks the manifest by
    from llmb.analysis import timing

    assert timing.scan_lines(done.stdout.splitlines()).world_sizes == {
        2: "Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/2"}
    assert "All distributed processes registered. Starting with 2 processes" in done.stdout


def slurm_task(path: Path, rank: int, ntasks: int, **extra: str) -> subprocess.Popen[str]:
    env = clean_env(
        SLURM_PROCID=str(rank), SLURM_NTASKS=str(ntasks), SLURM_LOCALID=str(rank),
        SLURM_JOB_ID="4242", SLURM_STEP_ID="0", **extra,
    )
    return subprocess.Popen(
        [sys.executable, "-m", "llmb.container.smoke", str(path)],
        cwd="/", env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def test_slurm_tasks_meet_through_a_file_in_the_run_dir(tmp_path: Path, torch: Any) -> None:
    path = tmp_path / "llmb_manifest.json"
    path.write_text(json.dumps(make_manifest(tmp_path, steps=5)))
    tasks = [slurm_task(path, rank, 2) for rank in (0, 1)]
    (out0, err0), (out1, err1) = (task.communicate(timeout=120) for task in tasks)
    assert [task.returncode for task in tasks] == [0, 0], err0 + err1
    assert "ranks from slurm, rendezvous file://" + str(tmp_path / ".smoke_rendezvous") in out0
    steps = step_lines(out0)
    assert [s["iteration"] for s in steps] == list(range(5))
    assert {s["gbs"] for s in steps} == {2}
    assert out1 == ""  # only rank 0 prints
    assert list((tmp_path / ".smoke_rendezvous").iterdir()) == []  # rank 0 cleaned up


def test_a_missing_task_times_out_with_a_clear_error(tmp_path: Path, torch: Any) -> None:
    path = tmp_path / "llmb_manifest.json"
    path.write_text(json.dumps(make_manifest(tmp_path, steps=1)))
    task = slurm_task(path, 1, 2, LLMB_SMOKE_INIT_TIMEOUT_S="1")
    out, err = task.communicate(timeout=60)
    assert task.returncode == 2 and out == ""
    assert err.startswith("llmb: smoke workload rank 1 of 2 could not join the others at file://")
    assert "within 1 s" in err and "storage all nodes share" in err


def test_a_bridge_recipes_smoke_run_prints_megatron_bridges_lines(
    tmp_path: Path, no_launcher: None, torch: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from llmb.analysis import timing

    m = make_manifest(tmp_path, steps=5)
    m["framework"] = "megatron-bridge"
    assert smoke.run(m) == 0
    out = capsys.readouterr().out
    assert "train_iters: 5" in out and "Training epoch" not in out
    assert out.count("MODEL_TFLOP/s/GPU") == 5 and "iteration        5/       5 |" in out
    log = tmp_path / "log.out"
    log.write_text(out)
    scan = timing.scan_log(log)
    assert scan.complete() and sorted(scan.steps) == list(range(5))
    # the tiny model's TFLOPS print as 0.0 with Megatron-Bridge's one decimal, as they would
    assert all(step.time > 0 and step.tflops is not None for step in scan.steps.values())


def test_a_framework_the_smoke_workload_does_not_know_is_one_line(
    tmp_path: Path, no_launcher: None, capsys: pytest.CaptureFixture[str]
) -> None:
    m = make_manifest(tmp_path, steps=2)
    m["framework"] = "megatron-lm"
    assert smoke.run(m) != 0
    assert capsys.readouterr().err == ("llmb: manifest framework=megatron-lm is not one llmb "
                                       "runs; known: nemo, megatron-bridge\n")
