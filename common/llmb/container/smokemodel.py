"""The smoke workload's model, data, optimizer and data parallelism: a tiny decoder-only
transformer per recipe family (the mixture-of-experts families' in llmb.container.smokemoe).

The dense shapes keep the keys of each family's metadata.yaml model shape, so `llmb.recipes.perf`
gives their FLOPs (`model_flops`); the synthetic tokens follow a simple rule with noise, so the
loss falls. torch is imported inside the functions, so this module imports without it.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Mapping
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from llmb.container import smokemoe
from llmb.recipes import perf

if TYPE_CHECKING:
    import torch
    from torch import nn

# Tiny shapes, one per family, with the keys of the family's metadata.yaml model shape so that
# perf.model_flops() gives their FLOPs.
TINY_SHAPES: dict[str, dict[str, int]] = {
    "llama": {
        "num_layers": 2,
        "hidden_size": 64,
        "ffn_hidden_size": 176,
        "num_attention_heads": 4,
        "num_query_groups": 2,
        "vocab_size": 512,
    },
    "nemotron4": {
        "num_layers": 2,
        "hidden_size": 64,
        "ffn_hidden_size": 256,
        "num_attention_heads": 4,
        "num_query_groups": 2,
        "vocab_size": 512,
    },
    "nemotronh": {
        "num_layers": 5,
        "hidden_size": 64,
        "ffn_hidden_size": 256,
        "num_attention_heads": 4,
        "num_query_groups": 2,
        "kv_channels": 16,
        "vocab_size": 512,
        "mlp_layers": 2,
        "mamba_layers": 2,
        "attention_layers": 1,
        "mamba_num_heads": 4,
        "mamba_head_dim": 32,
        "mamba_expand": 2,
        "mamba_chunk_size": 32,
        "mamba_state_dim": 16,
        "mamba_num_groups": 1,
    },
    **smokemoe.MOE_SHAPES,
}
# Nemotron-H's layer order in NeMo's hybrid pattern letters: M mamba mixer, * attention, - MLP.
NEMOTRONH_PATTERN = "M-M*-"
TINY_SEQ_LENGTH = 64
TOKEN_STRIDE = 7  # synthetic text: token t+1 = token t + 7 (mod vocab), 10% noise; learnable


def build_model(family: str, shape: Mapping[str, int], seq_length: int) -> nn.Module:
    """A decoder-only transformer in the family's style (a torch.nn.Module).

    llama: RMSNorm, SwiGLU MLP, grouped-query attention with rotary positions.
    nemotron4: LayerNorm, squared-ReLU MLP, grouped-query attention with rotary positions.
    nemotronh: RMSNorm, NEMOTRONH_PATTERN of a Mamba-like mixer (gated causal depthwise conv
    and a per-head linear recurrence), attention without positions, squared-ReLU MLP.
    deepseek, kimi, qwen3, gpt_oss: llmb.container.smokemoe.
    """
    from torch import nn

    if family in smokemoe.MOE_SHAPES:
        return smokemoe.build(family, shape, seq_length, _layers())
    hidden = shape["hidden_size"]
    heads, groups = shape["num_attention_heads"], shape["num_query_groups"]
    head_dim = shape.get("kv_channels", hidden // heads)
    ffn = shape["ffn_hidden_size"]
    layers = _layers()

    def norm() -> nn.Module:
        return nn.LayerNorm(hidden) if family == "nemotron4" else nn.RMSNorm(hidden)

    def attention(rotary: bool) -> nn.Module:
        return layers.Attention(hidden, heads, groups, head_dim, seq_length, rotary)

    blocks: list[nn.Module] = []
    if family == "nemotronh":
        make = {"M": lambda: layers.MambaLikeMixer(hidden, shape["mamba_expand"],
                                                   shape["mamba_num_heads"]),
                "*": lambda: attention(False), "-": lambda: layers.MLP(hidden, ffn, False)}
        blocks = [layers.Residual(norm(), make[letter]()) for letter in NEMOTRONH_PATTERN]
    else:
        for _ in range(shape["num_layers"]):
            blocks += [layers.Residual(norm(), attention(True)),
                       layers.Residual(norm(), layers.MLP(hidden, ffn, family == "llama"))]
    return layers.TinyDecoder(shape["vocab_size"], hidden, blocks, norm())


def model_flops(family: str, shape: Mapping[str, int], seq_length: int) -> float:
    """Model FLOPs per sample of the family's tiny model (llmb.recipes.perf's formula; for the
    MoE families llmb.container.smokemoe's)."""
    if family in smokemoe.MOE_SHAPES:
        return smokemoe.model_flops(shape, seq_length)
    return perf.model_flops(family, shape, seq_length)


def training_loss(family: str, model: nn.Module, logits: torch.Tensor, labels: torch.Tensor
                  ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The loss to train on, and the figures a step line logs by their Megatron names, `lm
    loss` first (the MoE families add their router's and MTP losses)."""
    from torch.nn import functional

    lm_loss = functional.cross_entropy(logits.flatten(0, 1), labels.flatten())
    if family not in smokemoe.MOE_SHAPES:
        return lm_loss, {"lm loss": lm_loss}
    total, figures = smokemoe.losses(family, model, lm_loss, labels)
    return total, {"lm loss": lm_loss, **figures}


@functools.cache
def _layers() -> SimpleNamespace:
    """The model's torch.nn.Module classes, defined on first use (torch is imported here)."""
    from torch import nn

    class Residual(nn.Module):
        def __init__(self, norm: nn.Module, mixer: nn.Module) -> None:
            super().__init__()
            self.norm = norm
            self.mixer = mixer

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + self.mixer(self.norm(x))

    class TinyDecoder(nn.Module):
        def __init__(self, vocab: int, hidden: int, blocks: list[nn.Module],
                     final_norm: nn.Module) -> None:
            super().__init__()
            self.embedding = nn.Embedding(vocab, hidden)
            self.blocks = nn.ModuleList(blocks)
            self.final_norm = final_norm
            self.output = nn.Linear(hidden, vocab, bias=False)

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            x = self.embedding(tokens)
            for block in self.blocks:
                x = block(x)
            return self.output(self.final_norm(x))

    return SimpleNamespace(Attention=_attention_class(), MLP=_mlp_class(),
                           MambaLikeMixer=_mixer_class(), Residual=Residual,
                           TinyDecoder=TinyDecoder)


def _attention_class() -> type:
    """Grouped-query causal self-attention, with or without rotary positions."""
    import torch
    from torch import nn
    from torch.nn import functional

    class Attention(nn.Module):
        def __init__(self, hidden: int, heads: int, groups: int, head_dim: int,
                     seq_length: int, rotary: bool) -> None:
            super().__init__()
            self.heads, self.groups, self.head_dim = heads, groups, head_dim
            self.query = nn.Linear(hidden, heads * head_dim, bias=False)
            self.key_value = nn.Linear(hidden, 2 * groups * head_dim, bias=False)
            self.out = nn.Linear(heads * head_dim, hidden, bias=False)
            self.rotary = rotary
            if rotary:
                inv_freq = 1.0 / 10000 ** (torch.arange(0, head_dim, 2).float() / head_dim)
                angles = torch.outer(torch.arange(seq_length).float(), inv_freq)
                # Plain tensors, not buffers: nothing for DDP to broadcast or save.
                self.cos, self.sin = angles.cos(), angles.sin()

        def rotate(self, x: torch.Tensor) -> torch.Tensor:
            s = x.shape[-2]
            cos, sin = self.cos[:s], self.sin[:s]
            x1, x2 = x[..., 0::2], x[..., 1::2]
            return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, s, _ = x.shape
            heads, groups, head_dim = self.heads, self.groups, self.head_dim
            q = self.query(x).view(b, s, heads, head_dim).transpose(1, 2)
            k, v = self.key_value(x).view(b, s, 2, groups, head_dim).permute(2, 0, 3, 1, 4)
            if self.rotary:
                q, k = self.rotate(q), self.rotate(k)
            k = k.repeat_interleave(heads // groups, dim=1)
            v = v.repeat_interleave(heads // groups, dim=1)
            y = functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.out(y.transpose(1, 2).reshape(b, s, heads * head_dim))

    return Attention


def _mlp_class() -> type:
    """A SwiGLU MLP (gated) or a squared-ReLU one."""
    from torch import nn
    from torch.nn import functional

    class MLP(nn.Module):
        def __init__(self, hidden: int, ffn: int, gated: bool) -> None:
            super().__init__()
            self.gated = gated
            self.up = nn.Linear(hidden, ffn * (2 if gated else 1), bias=False)
            self.down = nn.Linear(ffn, hidden, bias=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if self.gated:
                value, gate = self.up(x).chunk(2, dim=-1)
                return self.down(functional.silu(gate) * value)
            return self.down(functional.relu(self.up(x)).square())

    return MLP


def _mixer_class() -> type:
    """A cheap stand-in for a Mamba-2 mixer: gated causal conv + linear recurrence."""
    import torch
    from torch import nn
    from torch.nn import functional

    class MambaLikeMixer(nn.Module):
        def __init__(self, hidden: int, expand: int, heads: int) -> None:
            super().__init__()
            inner = expand * hidden
            self.heads = heads
            self.inner = inner
            self.in_proj = nn.Linear(hidden, 2 * inner, bias=False)
            self.conv = nn.Conv1d(inner, inner, kernel_size=4, groups=inner, padding=3)
            self.decay = nn.Parameter(torch.linspace(-2.0, 1.0, self.heads))
            self.out_proj = nn.Linear(inner, hidden, bias=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, s, _ = x.shape
            u, gate = self.in_proj(x).chunk(2, dim=-1)
            u = functional.silu(self.conv(u.transpose(1, 2))[..., :s]).transpose(1, 2)
            # h_t = a * h_{t-1} + u_t per head, written as a causal decay matrix.
            log_a = -functional.softplus(self.decay)
            t = torch.arange(s)
            lag = t[:, None] - t[None, :]
            decay = torch.exp(log_a[:, None, None] * lag.clamp(min=0)) * (lag >= 0)
            u = u.reshape(b, s, self.heads, -1).transpose(1, 2)
            y = (decay @ u).transpose(1, 2).reshape(b, s, self.inner)
            return self.out_proj(y * functional.silu(gate))

    return MambaLikeMixer


def synthetic_batch(generator: torch.Generator, vocab: int, seq_length: int, batch: int
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """Tokens that follow a simple rule (so the loss falls), with 10% noise; (inputs, labels)."""
    import torch

    start = torch.randint(0, vocab, (batch, 1), generator=generator)
    tokens = (start + TOKEN_STRIDE * torch.arange(seq_length + 1)) % vocab
    noise = torch.rand(tokens.shape, generator=generator) < 0.1
    tokens = torch.where(noise, torch.randint(0, vocab, tokens.shape, generator=generator), tokens)
    return tokens[:, :-1], tokens[:, 1:]


class AdamW:
    """The update of torch.optim.AdamW (Adam with decoupled weight decay and bias correction),
    for the tiny model's few tensors, with the part of a torch optimizer's interface the smoke
    workload uses (param_groups[0]["lr"], zero_grad, step, state_dict, load_state_dict).

    Why not torch.optim: the first use of any torch optimizer (as of DistributedDataParallel)
    imports torch._dynamo, about 0.9 s of CPU per task: a smoke job runs 16 tasks, on a test
    machine's 2 cores that is 7 s of each job's minute. tests/container/test_smokemodel.py
    holds this update to torch.optim.AdamW's, step by step."""

    def __init__(self, params: Iterable[torch.Tensor], lr: float,
                 betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.01) -> None:
        import torch

        self.params = list(params)
        self.param_groups = [{"lr": lr}]
        self.betas, self.eps, self.weight_decay = betas, eps, weight_decay
        self.steps = 0
        self.exp_avg = [torch.zeros_like(p) for p in self.params]
        self.exp_avg_sq = [torch.zeros_like(p) for p in self.params]

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            p.grad = None

    def step(self) -> None:
        import torch

        lr, (beta1, beta2) = self.param_groups[0]["lr"], self.betas
        self.steps += 1
        correction1 = 1 - beta1 ** self.steps
        correction2_sqrt = math.sqrt(1 - beta2 ** self.steps)
        with torch.no_grad():
            for p, avg, avg_sq in zip(self.params, self.exp_avg, self.exp_avg_sq, strict=True):
                if p.grad is None:
                    continue
                p.mul_(1 - lr * self.weight_decay)
                avg.lerp_(p.grad, 1 - beta1)
                avg_sq.mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
                denom = (avg_sq.sqrt() / correction2_sqrt).add_(self.eps)
                p.addcdiv_(avg, denom, value=-lr / correction1)

    def state_dict(self) -> dict[str, object]:
        return {"steps": self.steps, "lr": self.param_groups[0]["lr"],
                "exp_avg": list(self.exp_avg), "exp_avg_sq": list(self.exp_avg_sq)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """ValueError when the state (as torch.load read it: unchecked) is not one of this
        optimizer for these parameters."""
        try:
            avgs, avg_sqs = list(state["exp_avg"]), list(state["exp_avg_sq"])
            steps, lr = int(state["steps"]), float(state["lr"])
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f"not the smoke workload's optimizer state ({err})") from None
        shapes = [tuple(p.shape) for p in self.params]
        if [tuple(t.shape) for t in avgs] != shapes or [tuple(t.shape) for t in avg_sqs] != shapes:
            raise ValueError("the optimizer state holds tensors of other shapes")
        self.exp_avg = [t.clone() for t in avgs]
        self.exp_avg_sq = [t.clone() for t in avg_sqs]
        self.steps, self.param_groups[0]["lr"] = steps, lr


def same_weights(model: nn.Module) -> None:
    """Rank 0's weights on every rank, as DistributedDataParallel starts (every rank seeds
    alike, so this only makes sure)."""
    import torch.distributed as dist

    for p in model.parameters():
        dist.broadcast(p.data, 0)


def average_gradients(model: nn.Module, world_size: int) -> None:
    """Data parallel as DistributedDataParallel does it, by hand: the gradients summed over the
    ranks in one all-reduce (gloo) of one flat buffer, then divided by their number. Not DDP
    itself: it imports torch._dynamo when first used (see AdamW)."""
    import torch
    import torch.distributed as dist

    grads = [p.grad for p in model.parameters() if p.grad is not None]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    flat /= world_size
    offset = 0
    for g in grads:
        g.copy_(flat[offset:offset + g.numel()].view_as(g))
        offset += g.numel()
