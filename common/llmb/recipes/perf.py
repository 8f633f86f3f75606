"""Performance math: model FLOPs per sample, peak TFLOPS, tokens/s, MFU, time to train.

The FLOPs formulas are the ones the seed READMEs publish (their "Notes" sections), so a
measured step time turns into the same MFU the published tables show.
"""

from __future__ import annotations

from collections.abc import Mapping

TOKENS_TO_TRAIN = 1e12  # "time to train 1T tokens"
SECONDS_PER_DAY = 86400

# Model-shape keys each FLOPs family needs (metadata.yaml `sizes.<size>.model`).
GPT_KEYS = (
    "num_layers",
    "hidden_size",
    "ffn_hidden_size",
    "num_attention_heads",
    "num_query_groups",
    "vocab_size",
)
SHAPE_KEYS: dict[str, tuple[str, ...]] = {
    "llama": GPT_KEYS,
    "nemotron4": GPT_KEYS,
    "nemotronh": (
        *GPT_KEYS,
        "kv_channels",
        "mlp_layers",
        "mamba_layers",
        "attention_layers",
        "mamba_num_heads",
        "mamba_head_dim",
        "mamba_expand",
        "mamba_chunk_size",
        "mamba_state_dim",
        "mamba_num_groups",
    ),
}

# FLOPs per (layer x hidden x ffn) of the MLP, forward+backward: a gated (SwiGLU) MLP has
# three weight matrices, a plain one two.
MLP_FACTOR = {"llama": 18, "nemotron4": 12}


def gpt_flops_terms(
    family: str, shape: Mapping[str, int], seq_length: int, gqa: bool = True
) -> dict[str, float]:
    """The per-token terms of `gpt_flops` as the seeds' Notes print them (before x seq_length).

    Keys: attention, mlp, embedding. gqa=False is the older Nemotron-4 reading (001/002).
    """
    layers = shape["num_layers"]
    hidden = shape["hidden_size"]
    heads = shape["num_attention_heads"]
    groups = shape["num_query_groups"] if gqa else heads
    return {
        "attention": 12 * layers * hidden**2 * (1 + groups / heads + seq_length / hidden),
        "mlp": MLP_FACTOR[family] * layers * hidden * shape["ffn_hidden_size"],
        "embedding": 6 * shape["vocab_size"] * hidden,
    }


def gpt_flops(
    family: str, shape: Mapping[str, int], seq_length: int, gqa: bool = True
) -> float:
    """Forward+backward FLOPs per sample of a GPT-style decoder (seeds 003 and 004).

    gqa=False gives the older Nemotron-4 figure of seeds 001/002, which counts attention as
    if every head had its own key/value projection (query groups = heads).
    """
    return seq_length * sum(gpt_flops_terms(family, shape, seq_length, gqa=gqa).values())


def nemotronh_flops_blocks(shape: Mapping[str, int], seq_length: int) -> dict[str, int]:
    """The blocks of `nemotronh_flops` as seed 000's Notes print them (before the x 6).

    Keys: mlp, attention, mamba, lm_head. Integer arithmetic, so the figures are exact.
    """
    s = seq_length
    h = shape["hidden_size"]
    head_dim = shape["kv_channels"]
    mlp = 2 * s * h * shape["ffn_hidden_size"] * shape["mlp_layers"]
    attention = (
        2 * s * h * shape["num_attention_heads"] * head_dim
        + 2 * s * h * shape["num_query_groups"] * head_dim
        + 2 * s * s * h
    ) * shape["attention_layers"]
    heads, head_size = shape["mamba_num_heads"], shape["mamba_head_dim"]
    groups, state = shape["mamba_num_groups"], shape["mamba_state_dim"]
    expand, chunk = shape["mamba_expand"], shape["mamba_chunk_size"]
    mamba = (
        s * h * (heads * head_size * 3 + groups * state * 2 + heads)
        + s * h * expand * chunk
        + 2 * s * h * expand * state
        + s * chunk * state * groups
    ) * shape["mamba_layers"]
    lm_head = s * h * shape["vocab_size"]
    return {"mlp": mlp, "attention": attention, "mamba": mamba, "lm_head": lm_head}


def nemotronh_flops(shape: Mapping[str, int], seq_length: int) -> float:
    """Forward+backward FLOPs per sample of the hybrid Mamba model (seed 000, Notes)."""
    return 6 * sum(nemotronh_flops_blocks(shape, seq_length).values())


def model_flops(
    family: str, shape: Mapping[str, int], seq_length: int, gqa: bool = True
) -> float:
    """Model FLOPs for one sample (GBS=1), forward and backward."""
    if family == "nemotronh":
        return nemotronh_flops(shape, seq_length)
    if family in MLP_FACTOR:
        return gpt_flops(family, shape, seq_length, gqa=gqa)
    raise ValueError(f"unknown model family {family!r}; known: {', '.join(SHAPE_KEYS)}")


def tokens_per_second(seq_length: int, global_batch_size: int, step_time: float) -> float:
    return seq_length * global_batch_size / step_time


def days_to_train(tokens_per_s: float, tokens: float = TOKENS_TO_TRAIN) -> float:
    return tokens / tokens_per_s / SECONDS_PER_DAY


# Which dense peak a run's dtype computes at: Megatron-Bridge's FP8 recipes (current, delayed,
# MX, sub-channel scaling) at the FP8 peak, NVFP4 at the FP4 peak (Blackwell only; a GPU type
# without one has no peak for it), BF16 at the BF16 peak.
PEAK_DTYPES = {"bf16": "bf16", "fp8": "fp8", "mxfp8": "fp8", "nvfp4": "nvfp4",
               **{f"fp8{sep}{kind}": "fp8" for sep in ("_", "")
                  for kind in ("cs", "ds", "mx", "sc")}}


def peak_dtype(dtype: str) -> str | None:
    """The peak a run of this dtype is held to (bf16, fp8, nvfp4), or None when unknown."""
    return PEAK_DTYPES.get(dtype.lower())


def peak_tflops(peaks: Mapping[str, float], dtype: str) -> float | None:
    """The dense peak TFLOPS per GPU a run of `dtype` is held to, from a GPU type's peaks
    (GpuType.peak_tflops); None where the GPU type publishes none for it."""
    key = peak_dtype(dtype)
    value = peaks.get(key) if key else None
    return float(value) if value else None


def mfu(
    global_batch_size: int,
    flops_per_sample: float,
    step_time: float,
    num_gpus: int,
    peak_tflops: float,
) -> float:
    """Model FLOPs utilization as a fraction (0.3093, not 30.93)."""
    return global_batch_size * flops_per_sample / step_time / num_gpus / (peak_tflops * 1e12)


def tflops_per_gpu(
    global_batch_size: int, flops_per_sample: float, step_time: float, num_gpus: int
) -> float:
    """Achieved model TFLOPS per GPU, as NeMo's TFLOPS_per_GPU reports it."""
    return global_batch_size * flops_per_sample / step_time / num_gpus / 1e12
