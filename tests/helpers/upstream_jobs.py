"""What NVIDIA's published jobs configured, per published row: the fidelity test's table.

Every value below was read from the public sources the seeds come from, and each carries its
citation (repository, tag or commit, path); nothing is copied from llmb's metadata.yaml. The
NeMo tier (tests/nemo/test_fidelity.py) builds every published row's recipe with NeMo 2.3.1
and compares its performance-relevant fields with this table; tests/container/test_train.py does
the same for what the plan alone decides; tests/recipes/test_recipe_readmes.py renders it into each
recipe README's "Fidelity" section, so the README and the test can not disagree.

The upstream job of a recipe is the one whose configurations llmb runs (its `JOB_SEED`):
seed 003 for Llama 3.1 (NVIDIA/dgxc-benchmarking v25.04-v25.04.02, NeMo d2b21556 with that
release's llama3.1/gsw_nemo.patch, run in nemo:25.02.01), seed 004 for Nemotron-4 (v25.07, NeMo
00b778eb, nemo:25.04.01), seed 000 for Nemotron-H (v25.05.04/.05, NeMo 7a8f1cc7, nemo:25.04.01).
Where llmb deliberately differs, `DEVIATIONS` gives its value and the reason; the test then
checks llmb's value instead. A value of None for a field means "not set" (NeMo's default
applies, or the variable is not in the job's environment).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

DGXC = "NVIDIA/dgxc-benchmarking"
NEMO = "NVIDIA/NeMo"

# The seed whose configurations (and NeMo job) llmb runs, per recipe.
JOB_SEED = {"llama3.1": "003", "nemotron": "004", "nemotronh": "000"}
# The files that define that job, for the README.
JOB_FILES = {
    "llama3.1": [f"{DGXC} v25.04.02 llama3.1/pretrain_llama31.py, llama31_utils.py, launch.sh, "
                 "gsw_nemo.patch",
                 f"{NEMO} d2b21556 scripts/performance/utils.py, "
                 "nemo/collections/llm/recipes/llama3_8b.py, llama3_70b.py, llama31_405b.py"],
    "nemotron": [f"{DGXC} v25.07 nemotron/launch.sh",
                 f"{NEMO} 00b778eb scripts/performance/llm/pretrain_nemotron4_15b.py, "
                 "pretrain_nemotron4_340b.py, scripts/performance/utils.py, "
                 "nemo/collections/llm/recipes/nemotron4_15b.py, nemotron4_340b.py"],
    "nemotronh": [f"{DGXC} v25.05.04 nemotronh/launch.sh",
                  f"{NEMO} 7a8f1cc7 scripts/performance/llm/pretrain_nemotronh_56b.py, "
                  "scripts/performance/utils.py, nemo/collections/llm/recipes/nemotronh_56b.py"],
}

# The fields compared, with what they are in the configured NeMo recipe (README column order).
FIELDS: dict[str, str] = {
    "nemo_recipe": "nemo.collections.llm recipe module",
    "model_config": "model config class",
    "performance_mode": "pretrain_recipe(performance_mode=...)",
    "callbacks": "trainer callbacks, in order",
    "gc_interval": "GarbageCollectionCallback (train, val) step interval",
    "tp_comm_overlap": "MegatronCommOverlapCallback.tp_comm_overlap",
    "tp_comm_overlap_cfg": "userbuffer layout (tp_overlap_configs.userbuffers)",
    "tp_overlap_fprop": "the layout's proj_fprop / fc2_fprop overlap methods",
    "defer_embedding_wgrad_compute": "MegatronCommOverlapCallback.defer_embedding_wgrad_compute",
    "wgrad_deferral_limit": "MegatronCommOverlapCallback.wgrad_deferral_limit",
    "align_param_gather": "MegatronCommOverlapCallback.align_param_gather",
    "overlap_param_gather_with_optimizer_step":
        "MegatronCommOverlapCallback.overlap_param_gather_with_optimizer_step",
    "tp_comm_bootstrap_backend": "MegatronCommOverlapCallback.tp_comm_bootstrap_backend",
    "ddp_overlap_grad_reduce": "strategy.ddp.overlap_grad_reduce",
    "ddp_overlap_param_gather": "strategy.ddp.overlap_param_gather",
    "enable_cuda_graph": "model.config.enable_cuda_graph",
    "use_te_rng_tracker": "strategy.use_te_rng_tracker",
    "cross_entropy_fusion_impl": "model.config.cross_entropy_fusion_impl",
    "attention_backend": "model.config.attention_backend",
    "fp8": "precision plugin fp8 (None: bf16)",
    "fp8_recipe": "precision plugin fp8_recipe",
    "fp8_amax": "precision plugin (fp8_amax_history_len, fp8_amax_compute_algo)",
    "fp8_param_gather": "precision plugin fp8_param_gather",
    "grad_reduce_in_fp32": "precision plugin grad_reduce_in_fp32",
    "use_precision_aware_optimizer": "optim.config.use_precision_aware_optimizer",
    "tokenizer": "data.tokenizer (library, model name, vocabulary)",
}
ENV = ("TORCH_NCCL_AVOID_RECORD_STREAMS", "NCCL_NVLS_ENABLE", "NVTE_FLASH_ATTN",
       "NVTE_FUSED_ATTN", "TOKENIZERS_PARALLELISM", "NEMO_LOG_MEMORY_USAGE",
       "NVTE_FWD_LAYERNORM_SM_MARGIN", "NVTE_BWD_LAYERNORM_SM_MARGIN",
       "CUDA_DEVICE_MAX_CONNECTIONS", "NCCL_P2P_NET_CHUNKSIZE", "NVTE_NORM_FWD_USE_CUDNN",
       "NVTE_NORM_BWD_USE_CUDNN", "NCCL_NET_GDR_LEVEL", "TRANSFORMERS_OFFLINE")
FIELDS.update({f"env.{name}": "job environment" for name in ENV})

# Run variants every row is compared in (the ones that change upstream settings); a Run:ai
# run only where upstream has a Run:ai job (v25.07: Nemotron-4 15b).
VARIANTS = ("plain", "checkpoint_save", "checkpoint_load")
RUNAI_JOBS = {("nemotron", "15b")}


def variants(recipe: str, size: str) -> tuple[str, ...]:
    return VARIANTS + (("runai",) if (recipe, size) in RUNAI_JOBS else ())


@dataclass(frozen=True)
class Row:
    """One published row in one run variant."""

    recipe: str
    size: str
    dtype: str
    gpu_type: str
    scaling: str
    num_gpus: int
    tp: int
    pp: int
    cp: int
    vp: int | None
    dp: int
    variant: str = "plain"

    @property
    def checkpointing(self) -> bool:
        return self.variant in ("checkpoint_save", "checkpoint_load")


Value = Any | Callable[[Row], Any]


@dataclass(frozen=True)
class Rule:
    """A value that depends on the row's parallelism or run variant, and how to say it."""

    fn: Callable[[Row], Any]
    text: str

    def __call__(self, row: Row) -> Any:
        return self.fn(row)


@dataclass(frozen=True)
class Fact:
    """`field` is `value` in the upstream job of the rows `when` selects (all keys must match;
    a tuple matches any of its values). A callable value is a rule of the row."""

    recipe: str
    field: str
    value: Value
    cite: str
    when: Mapping[str, Any] = field(default_factory=dict)

    def applies(self, row: Row) -> bool:
        return row.recipe == self.recipe and _matches(self.when, row)

    def of(self, row: Row) -> Any:
        return self.value(row) if callable(self.value) else self.value


@dataclass(frozen=True)
class Deviation:
    """Where llmb keeps `llmb` instead of the upstream value, and why."""

    recipe: str
    field: str
    llmb: Value
    reason: str
    when: Mapping[str, Any] = field(default_factory=dict)

    def applies(self, row: Row) -> bool:
        return row.recipe == self.recipe and _matches(self.when, row)

    def of(self, row: Row) -> Any:
        return self.llmb(row) if callable(self.llmb) else self.llmb


def _matches(when: Mapping[str, Any], row: Row) -> bool:
    for key, want in when.items():
        have = getattr(row, key)
        if have not in (want if isinstance(want, tuple) else (want,)):
            return False
    return True


def cite(repo: str, ref: str, path: str, note: str = "") -> str:
    return f"{repo} {ref} {path}" + (f" ({note})" if note else "")


def _tp_or_cp(value: str) -> Rule:
    return Rule(lambda r: value if r.tp > 1 or r.cp > 1 else None, f"{value} when TP or CP > 1")


def _pp(value: str) -> Rule:
    return Rule(lambda r: value if r.pp > 1 else None, f"{value} when PP > 1")


# set_primary_perf_configs: DP, PP and VP > 1; off when checkpoints are saved or loaded.
_overlap_with_optimizer = Rule(
    lambda r: r.dp > 1 and r.pp > 1 and bool(r.vp and r.vp > 1) and not r.checkpointing,
    "true when DP, PP and VP > 1 and no checkpoint is saved or loaded")


FP8_DELAYED = {"fp8": "hybrid", "fp8_recipe": "delayed", "fp8_amax": (1024, "max"),
               "fp8_param_gather": True}
BASE_ENV = {"TORCH_NCCL_AVOID_RECORD_STREAMS": "1", "NCCL_NVLS_ENABLE": "0",
            "NVTE_FLASH_ATTN": "1", "NVTE_FUSED_ATTN": "1", "TOKENIZERS_PARALLELISM": "False",
            "NEMO_LOG_MEMORY_USAGE": "1"}


def _common(recipe: str, executor: str, plugins: str, perf: str) -> list[Fact]:
    """Facts every recipe's job shares, cited to that job's own files: the executor's
    environment, PerfEnvPlugin's, and the performance script's precision and defaults."""
    facts = [Fact(recipe, f"env.{k}", v, executor) for k, v in BASE_ENV.items()]
    facts += [
        Fact(recipe, "env.NVTE_FWD_LAYERNORM_SM_MARGIN", "16", plugins),
        Fact(recipe, "env.NVTE_BWD_LAYERNORM_SM_MARGIN", "16", plugins),
        Fact(recipe, "env.NCCL_P2P_NET_CHUNKSIZE", _pp("2097152"), plugins),
        Fact(recipe, "env.NVTE_NORM_FWD_USE_CUDNN", None, executor),
        Fact(recipe, "env.NVTE_NORM_BWD_USE_CUDNN", None, executor),
        Fact(recipe, "env.NCCL_NET_GDR_LEVEL", None, executor),
        Fact(recipe, "grad_reduce_in_fp32", False, perf),
        Fact(recipe, "fp8", None, perf, {"dtype": "bf16"}),
        *[Fact(recipe, k, v, perf, {"dtype": "fp8"}) for k, v in FP8_DELAYED.items()],
        Fact(recipe, "enable_cuda_graph", False, perf),
        Fact(recipe, "use_te_rng_tracker", False, perf),
        Fact(recipe, "tp_comm_bootstrap_backend", None, perf),
    ]
    return facts


# --- Llama 3.1: seed 003 --------------------------------------------------------------------
L_SCRIPT = cite(DGXC, "v25.04.02", "llama3.1/pretrain_llama31.py")
L_UTILS = cite(DGXC, "v25.04.02", "llama3.1/llama31_utils.py")
L_PERF = cite(NEMO, "d2b21556", "scripts/performance/utils.py", "set_primary_perf_configs")
L_PLUGINS = cite(NEMO, "d2b21556", "nemo/lightning/run/plugins.py", "PerfEnvPlugin")
L_UB = cite(NEMO, "d2b21556", "nemo/collections/llm/recipes/tp_overlap_configs/userbuffers.py")


def _llama_recipe(module: str) -> str:
    return cite(NEMO, "d2b21556", f"nemo/collections/llm/recipes/{module}.py")


LLAMA = [
    *_common("llama3.1", L_UTILS, L_PLUGINS, f"{L_SCRIPT}; {L_UTILS}"),
    Fact("llama3.1", "env.TRANSFORMERS_OFFLINE", "0", f"{L_UTILS} (with the HF token)"),
    Fact("llama3.1", "env.CUDA_DEVICE_MAX_CONNECTIONS", _tp_or_cp("1"), L_PLUGINS),
    Fact("llama3.1", "performance_mode", True, L_SCRIPT),
    Fact("llama3.1", "callbacks",
         ("TimingCallback", "GarbageCollectionCallback", "MegatronCommOverlapCallback"),
         f"{_llama_recipe('llama3_8b')} trainer and pretrain_performance_optimizations; "
         f"{L_SCRIPT} adds none"),
    Fact("llama3.1", "gc_interval", (100, 100), _llama_recipe("llama3_8b")),
    Fact("llama3.1", "align_param_gather", None, f"{L_SCRIPT}; {_llama_recipe('llama3_70b')}"),
    Fact("llama3.1", "overlap_param_gather_with_optimizer_step", _overlap_with_optimizer,
         f"{L_PERF}; {L_SCRIPT} (off with checkpoints)"),
    Fact("llama3.1", "cross_entropy_fusion_impl", "te",
         cite(NEMO, "v2.3.1", "scripts/performance/utils.py",
              "d2b21556 predates the option; NeMo 2.3.1's performance scripts")),
    Fact("llama3.1", "use_precision_aware_optimizer", False,
         f"{L_SCRIPT}; {L_PERF}: not set, megatron-core's default"),
    # 8b
    Fact("llama3.1", "nemo_recipe", "llama3_8b", L_SCRIPT, {"size": "8b"}),
    Fact("llama3.1", "model_config", "Llama3Config8B", _llama_recipe("llama3_8b"),
         {"size": "8b"}),
    Fact("llama3.1", "tp_comm_overlap", False, _llama_recipe("llama3_8b"), {"size": "8b"}),
    Fact("llama3.1", "tp_comm_overlap_cfg", None, L_SCRIPT, {"size": "8b"}),
    Fact("llama3.1", "defer_embedding_wgrad_compute", None, _llama_recipe("llama3_8b"),
         {"size": "8b"}),
    Fact("llama3.1", "wgrad_deferral_limit", None, _llama_recipe("llama3_8b"), {"size": "8b"}),
    Fact("llama3.1", "tokenizer", ("huggingface", "meta-llama/Meta-Llama-3-8B", None), L_SCRIPT,
         {"size": "8b"}),
    # 70b
    Fact("llama3.1", "nemo_recipe", "llama3_70b", L_SCRIPT, {"size": "70b"}),
    Fact("llama3.1", "model_config", "Llama3Config70B", _llama_recipe("llama3_70b"),
         {"size": "70b"}),
    Fact("llama3.1", "tp_comm_overlap", True, _llama_recipe("llama3_70b"), {"size": "70b"}),
    Fact("llama3.1", "tp_comm_overlap_cfg",
         lambda r: f"userbuffers_{r.dtype}_h100_h8192_tp4_mbs1_seqlen8192", L_SCRIPT,
         {"size": "70b"}),
    Fact("llama3.1", "tp_overlap_fprop", ("pipeline", "pipeline"), L_UB, {"size": "70b"}),
    Fact("llama3.1", "defer_embedding_wgrad_compute", True, _llama_recipe("llama3_70b"),
         {"size": "70b"}),
    Fact("llama3.1", "wgrad_deferral_limit", 22, _llama_recipe("llama3_70b"), {"size": "70b"}),
    Fact("llama3.1", "tokenizer", ("huggingface", "meta-llama/Meta-Llama-3-70B", None),
         L_SCRIPT, {"size": "70b"}),
    # 405b (and its proxies)
    Fact("llama3.1", "nemo_recipe", "llama31_405b", L_SCRIPT, {"size": "405b"}),
    Fact("llama3.1", "model_config", "Llama31Config405B", _llama_recipe("llama31_405b"),
         {"size": "405b"}),
    Fact("llama3.1", "tp_comm_overlap", True, _llama_recipe("llama31_405b"), {"size": "405b"}),
    Fact("llama3.1", "tp_comm_overlap_cfg",
         lambda r: f"userbuffers_{r.dtype}_h100_h16384_tp8_cp2_mbs1_seqlen8192", L_SCRIPT,
         {"size": "405b"}),
    Fact("llama3.1", "tp_overlap_fprop", ("pipeline", "pipeline"), L_UB, {"size": "405b"}),
    Fact("llama3.1", "defer_embedding_wgrad_compute", True, _llama_recipe("llama31_405b"),
         {"size": "405b"}),
    Fact("llama3.1", "wgrad_deferral_limit", 50, _llama_recipe("llama31_405b"),
         {"size": "405b"}),
    Fact("llama3.1", "tokenizer", ("huggingface", "meta-llama/Llama-3.1-405B", None), L_SCRIPT,
         {"size": "405b"}),
]

# --- Nemotron-4: seed 004 (v25.07) ----------------------------------------------------------
N_LAUNCH = cite(DGXC, "v25.07", "nemotron/launch.sh")
N_PERF = cite(NEMO, "00b778eb", "scripts/performance/utils.py")
N_PLUGINS = cite(NEMO, "00b778eb", "nemo/lightning/run/plugins.py", "PerfEnvPlugin")
N_CSV = cite(NEMO, "00b778eb",
             "scripts/performance/recommended_model_configs/model_configs_h100.csv")
BLACKWELL = ("b200", "gb200")


def _nemotron_script(size: str) -> str:
    return cite(NEMO, "00b778eb", f"scripts/performance/llm/pretrain_nemotron4_{size}.py")


def _nemotron_recipe(size: str) -> str:
    return cite(NEMO, "00b778eb", f"nemo/collections/llm/recipes/nemotron4_{size}.py")


NEMOTRON = [
    *_common("nemotron", f"{N_PERF} (slurm_executor)",
             f"{N_PLUGINS}; {_nemotron_script('15b')}", f"{N_PERF} (set_primary_perf_configs)"),
    Fact("nemotron", "env.TRANSFORMERS_OFFLINE", "1", f"{N_PERF} (slurm_executor, no HF token)"),
    Fact("nemotron", "env.CUDA_DEVICE_MAX_CONNECTIONS", _tp_or_cp("1"), N_PLUGINS,
         {"gpu_type": "h100"}),
    Fact("nemotron", "env.CUDA_DEVICE_MAX_CONNECTIONS", _tp_or_cp("32"),
         cite(NEMO, "00b778eb", "nemo/lightning/run/plugins.py",
              "PerfEnvPlugin, gpu_sm100_or_newer"), {"gpu_type": BLACKWELL}),
    Fact("nemotron", "env.NCCL_NET_GDR_LEVEL", "PHB", _nemotron_script("340b"),
         {"gpu_type": "gb200"}),
    Fact("nemotron", "env.NVTE_NORM_FWD_USE_CUDNN", "1", _nemotron_script("340b"),
         {"size": "340b"}),
    Fact("nemotron", "env.NVTE_NORM_BWD_USE_CUDNN", "1", _nemotron_script("340b"),
         {"size": "340b"}),
    Fact("nemotron", "performance_mode", True, _nemotron_script("15b")),
    Fact("nemotron", "callbacks",
         ("TimingCallback", "GarbageCollectionCallback", "MegatronCommOverlapCallback",
          "FLOPsMeasurementCallback"),
         f"{_nemotron_recipe('15b')}; {N_PERF} (set_exp_logging_configs)"),
    Fact("nemotron", "gc_interval", (100, 100), _nemotron_recipe("15b")),
    Fact("nemotron", "tp_comm_overlap", True, _nemotron_recipe("15b")),
    Fact("nemotron", "tp_comm_overlap_cfg", None, _nemotron_script("340b"),
         {"gpu_type": "h100"}),
    Fact("nemotron", "tp_comm_overlap_cfg",
         lambda r: f"userbuffers_{r.dtype}_b200_h18432_tp8_mbs1_seqlen4096",
         _nemotron_script("340b"), {"size": "340b", "gpu_type": BLACKWELL}),
    Fact("nemotron", "align_param_gather", None, _nemotron_recipe("340b")),
    Fact("nemotron", "overlap_param_gather_with_optimizer_step", _overlap_with_optimizer, N_PERF),
    Fact("nemotron", "tp_comm_bootstrap_backend", "nccl", _nemotron_script("15b"),
         {"size": "15b", "variant": "runai"}),
    Fact("nemotron", "enable_cuda_graph", True, f"{N_LAUNCH} (--cuda_graphs true)",
         {"gpu_type": BLACKWELL}),
    Fact("nemotron", "use_te_rng_tracker", True, f"{N_PERF} (with CUDA graphs)",
         {"gpu_type": BLACKWELL}),
    Fact("nemotron", "enable_cuda_graph", False, f"{N_CSV} (cuda_graphs 0)",
         {"gpu_type": "h100"}),
    Fact("nemotron", "cross_entropy_fusion_impl", "te", N_PERF),
    Fact("nemotron", "use_precision_aware_optimizer", True, N_PERF, {"dtype": "bf16"}),
    Fact("nemotron", "use_precision_aware_optimizer", False,
         f"{_nemotron_recipe('15b')}: not set for fp8, megatron-core's default",
         {"dtype": "fp8"}),
    Fact("nemotron", "use_precision_aware_optimizer", False,
         f"{_nemotron_script('15b')}; {_nemotron_script('340b')}",
         {"dtype": "bf16", "variant": "checkpoint_load"}),
    Fact("nemotron", "tokenizer", ("null", "NullTokenizer", 256000), _nemotron_script("15b")),
    # per size
    Fact("nemotron", "nemo_recipe", "nemotron4_15b", _nemotron_script("15b"), {"size": "15b"}),
    Fact("nemotron", "model_config", "Nemotron4Config15B",
         cite(NEMO, "00b778eb", "nemo/collections/llm/recipes/nemotron.py"), {"size": "15b"}),
    Fact("nemotron", "defer_embedding_wgrad_compute", None, _nemotron_recipe("15b"),
         {"size": "15b"}),
    Fact("nemotron", "wgrad_deferral_limit", None, _nemotron_recipe("15b"), {"size": "15b"}),
    Fact("nemotron", "nemo_recipe", "nemotron4_340b", _nemotron_script("340b"),
         {"size": "340b"}),
    Fact("nemotron", "model_config", "Nemotron4Config340B",
         cite(NEMO, "00b778eb", "nemo/collections/llm/recipes/nemotron.py"), {"size": "340b"}),
    Fact("nemotron", "defer_embedding_wgrad_compute", True, _nemotron_recipe("340b"),
         {"size": "340b"}),
    Fact("nemotron", "wgrad_deferral_limit", 22, _nemotron_recipe("340b"), {"size": "340b"}),
]

# --- Nemotron-H: seed 000 -------------------------------------------------------------------
H_SCRIPT = cite(NEMO, "7a8f1cc7", "scripts/performance/llm/pretrain_nemotronh_56b.py")
H_PERF = cite(NEMO, "7a8f1cc7", "scripts/performance/utils.py")
H_RECIPE = cite(NEMO, "7a8f1cc7", "nemo/collections/llm/recipes/nemotronh_56b.py")
H_PLUGINS = cite(NEMO, "7a8f1cc7", "nemo/lightning/run/plugins.py", "PerfEnvPlugin")

NEMOTRONH = [
    *_common("nemotronh", f"{H_PERF} (slurm_executor)", H_PLUGINS,
             f"{H_PERF} (set_primary_perf_configs)"),
    Fact("nemotronh", "env.NVTE_FUSED_ATTN", "0", H_SCRIPT),
    Fact("nemotronh", "env.TRANSFORMERS_OFFLINE", "0", H_SCRIPT),
    Fact("nemotronh", "env.CUDA_DEVICE_MAX_CONNECTIONS", _tp_or_cp("1"), H_PLUGINS),
    Fact("nemotronh", "nemo_recipe", "nemotronh_56b", H_SCRIPT),
    Fact("nemotronh", "model_config", "NemotronHConfig56B", H_RECIPE),
    Fact("nemotronh", "performance_mode", False, f"{H_SCRIPT} (pretrain_recipe())"),
    Fact("nemotronh", "callbacks", ("TimingCallback", "FLOPsMeasurementCallback"),
         f"{H_RECIPE} (trainer); {H_PERF} (set_exp_logging_configs)"),
    Fact("nemotronh", "gc_interval", None, f"{H_RECIPE} (no performance mode)"),
    # Without performance mode there is no MegatronCommOverlapCallback: no TP overlap, no extras.
    *[Fact("nemotronh", name, None, f"{H_RECIPE} (no performance mode)")
      for name in ("tp_comm_overlap", "tp_comm_overlap_cfg", "defer_embedding_wgrad_compute",
                   "wgrad_deferral_limit", "align_param_gather",
                   "overlap_param_gather_with_optimizer_step")],
    Fact("nemotronh", "ddp_overlap_grad_reduce", True, H_RECIPE),
    Fact("nemotronh", "ddp_overlap_param_gather", False, H_RECIPE),
    Fact("nemotronh", "attention_backend", "flash",
         cite(NEMO, "7a8f1cc7", "nemo/collections/llm/gpt/model/ssm.py", "NemotronH config")),
    Fact("nemotronh", "cross_entropy_fusion_impl", "te", H_PERF),
    Fact("nemotronh", "use_precision_aware_optimizer", False,
         f"{H_PERF}: set only for bf16, megatron-core's default"),
    Fact("nemotronh", "tokenizer", ("null", "NullTokenizer", 131072), H_SCRIPT),
]

FACTS: list[Fact] = LLAMA + NEMOTRON + NEMOTRONH

# --- where llmb differs on purpose ------------------------------------------------------------
DEVIATIONS: list[Deviation] = [
    Deviation(
        "llama3.1", "callbacks",
        ("TimingCallback", "GarbageCollectionCallback", "MegatronCommOverlapCallback",
         "FLOPsMeasurementCallback"),
        "llmb adds NeMo's FLOPsMeasurementCallback so every step logs TFLOPS_per_GPU (seed "
        "003's log line has none); it evaluates one formula on the host per step."),
    Deviation(
        "llama3.1", "tp_overlap_fprop", ("ring_exchange", "ring_exchange"),
        "FP8 userbuffer layouts of 70b/405b: the NeMo inside the image (2.3.1) ships these "
        "layout names with ring-exchange proj/fc2 fprop overlap; d2b21556's pipelined fp8 "
        "ones were replaced in NeMo 8f3e86df (\"ub fp8 h100 fixes\"). llmb does not patch the "
        "withdrawn layouts back in.",
        {"size": ("70b", "405b"), "dtype": "fp8"}),
    Deviation(
        "llama3.1", "env.NVTE_NORM_FWD_USE_CUDNN", "1",
        "cuDNN normalization kernels for 405b, as llmb sets for the largest models (and "
        "v25.07 sets them for Nemotron-4 340b); seed 003's job predates them.",
        {"size": "405b"}),
    Deviation(
        "llama3.1", "env.NVTE_NORM_BWD_USE_CUDNN", "1",
        "as NVTE_NORM_FWD_USE_CUDNN.", {"size": "405b"}),
    Deviation(
        "nemotronh", "callbacks", ("TimingCallback",),
        "No FLOPsMeasurementCallback: NeMo has no Nemotron-H formula and the \"nemotron\" one "
        "upstream passes is Nemotron-4's dense model; seed 000 calls that TFLOPS_per_GPU "
        "invalid. The analyzer computes TFLOPS from the model FLOPs instead."),
    Deviation(
        "nemotronh", "env.TRANSFORMERS_OFFLINE", "1",
        "The NullTokenizer downloads nothing; llmb keeps compute nodes offline (upstream's 0 "
        "is left from the recipe's Hugging Face tokenizer and has no effect)."),
]


def row_of(config: Any, variant: str = "plain") -> Row:
    """The Row of an llmb.recipes.catalog.Config."""
    return Row(config.recipe, config.model_size, config.dtype, config.gpu_type, config.scaling,
               config.num_gpus, config.tp, config.pp, config.cp, config.vp, config.dp, variant)


# The run options (llmb.container.train manifest) of each variant.
VARIANT_OPTIONS: dict[str, dict[str, Any]] = {
    "plain": {},
    "checkpoint_save": {"checkpoint_save": True},
    "checkpoint_load": {"checkpoint_load_path": "/ckpt/default", "max_steps": 1},
    "runai": {"cluster_type": "runai"},
}


def expected(row: Row) -> dict[str, tuple[Any, str]]:
    """Every upstream field of a row: field -> (value, citation); later facts win."""
    out: dict[str, tuple[Any, str]] = {}
    for fact in FACTS:
        if fact.applies(row):
            out[fact.field] = (fact.of(row), fact.cite)
    return out


def deviations(row: Row) -> dict[str, Deviation]:
    return {d.field: d for d in DEVIATIONS if d.applies(row)}


def mismatches(row: Row, view: Mapping[str, Any],
               fields: set[str] | None = None) -> list[str]:
    """Where a configured recipe's `view` differs from upstream minus the deviations (one line
    each); `fields` limits the comparison (None: every expected field)."""
    out = []
    devs = deviations(row)
    for name, (upstream, source) in expected(row).items():
        if fields is not None and name not in fields:
            continue
        if name in devs:
            want, why = devs[name].of(row), "llmb's deliberate deviation"
            if want == upstream:
                out.append(f"{name}: the deviation's value {want!r} equals upstream's")
        else:
            want, why = upstream, source
        have = view.get(name, "<missing>")
        if have != want:
            out.append(f"{name} is {have!r}, expected {want!r} ({why})")
    return out
