"""The smoke workload's model and data: a tiny decoder-only transformer per recipe family.

Shapes keep the keys of each family's metadata.yaml model shape, so `llmb.recipes.perf` gives their
FLOPs; the synthetic tokens follow a simple rule with noise, so the loss falls. torch is
imported inside the functions, so this module imports without it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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
}
# Nemotron-H's layer order in NeMo's hybrid pattern letters: M mamba mixer, * attention, - MLP.
NEMOTRONH_PATTERN = "M-M*-"
TINY_SEQ_LENGTH = 64
TOKEN_STRIDE = 7  # synthetic text: token t+1 = token t + 7 (mod vocab), 10% noise; learnable


def _layer_classes(shape: Mapping[str, int], seq_length: int) -> tuple[Any, Any, Any]:
    """The mixers build_model stacks: Attention(rotary), MLP(gated), MambaLikeMixer()."""
    import torch
    from torch import nn
    from torch.nn import functional

    hidden = shape["hidden_size"]
    heads, groups = shape["num_attention_heads"], shape["num_query_groups"]
    head_dim = shape.get("kv_channels", hidden // heads)

    class Attention(nn.Module):
        def __init__(self, rotary: bool) -> None:
            super().__init__()
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
            q = self.query(x).view(b, s, heads, head_dim).transpose(1, 2)
            k, v = self.key_value(x).view(b, s, 2, groups, head_dim).permute(2, 0, 3, 1, 4)
            if self.rotary:
                q, k = self.rotate(q), self.rotate(k)
            k = k.repeat_interleave(heads // groups, dim=1)
            v = v.repeat_interleave(heads // groups, dim=1)
            y = functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.out(y.transpose(1, 2).reshape(b, s, heads * head_dim))

    class MLP(nn.Module):
        def __init__(self, gated: bool) -> None:
            super().__init__()
            ffn = shape["ffn_hidden_size"]
            self.gated = gated
            self.up = nn.Linear(hidden, ffn * (2 if gated else 1), bias=False)
            self.down = nn.Linear(ffn, hidden, bias=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if self.gated:
                value, gate = self.up(x).chunk(2, dim=-1)
                return self.down(functional.silu(gate) * value)
            return self.down(functional.relu(self.up(x)).square())

    class MambaLikeMixer(nn.Module):
        """A cheap stand-in for a Mamba-2 mixer: gated causal conv + linear recurrence."""

        def __init__(self) -> None:
            super().__init__()
            inner = shape["mamba_expand"] * hidden
            self.heads = shape["mamba_num_heads"]
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

    return Attention, MLP, MambaLikeMixer


def build_model(family: str, shape: Mapping[str, int], seq_length: int) -> Any:
    """A decoder-only transformer in the family's style (a torch.nn.Module).

    llama: RMSNorm, SwiGLU MLP, grouped-query attention with rotary positions.
    nemotron4: LayerNorm, squared-ReLU MLP, grouped-query attention with rotary positions.
    nemotronh: RMSNorm, NEMOTRONH_PATTERN of a Mamba-like mixer (gated causal depthwise conv
    and a per-head linear recurrence), attention without positions, squared-ReLU MLP.
    """
    import torch
    from torch import nn

    hidden = shape["hidden_size"]

    def norm() -> nn.Module:
        return nn.LayerNorm(hidden) if family == "nemotron4" else nn.RMSNorm(hidden)

    Attention, MLP, MambaLikeMixer = _layer_classes(shape, seq_length)

    class Residual(nn.Module):
        def __init__(self, mixer: nn.Module) -> None:
            super().__init__()
            self.norm = norm()
            self.mixer = mixer

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + self.mixer(self.norm(x))

    blocks: list[nn.Module] = []
    if family == "nemotronh":
        make = {"M": MambaLikeMixer, "*": lambda: Attention(rotary=False), "-": lambda: MLP(False)}
        blocks = [Residual(make[letter]()) for letter in NEMOTRONH_PATTERN]
    else:
        for _ in range(shape["num_layers"]):
            blocks += [Residual(Attention(rotary=True)), Residual(MLP(family == "llama"))]

    class TinyDecoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embedding = nn.Embedding(shape["vocab_size"], hidden)
            self.blocks = nn.ModuleList(blocks)
            self.final_norm = norm()
            self.output = nn.Linear(hidden, shape["vocab_size"], bias=False)

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            x = self.embedding(tokens)
            for block in self.blocks:
                x = block(x)
            return self.output(self.final_norm(x))

    return TinyDecoder()


def synthetic_batch(generator: Any, vocab: int, seq_length: int, batch: int) -> tuple[Any, Any]:
    """Tokens that follow a simple rule (so the loss falls), with 10% noise; (inputs, labels)."""
    import torch

    start = torch.randint(0, vocab, (batch, 1), generator=generator)
    tokens = (start + TOKEN_STRIDE * torch.arange(seq_length + 1)) % vocab
    noise = torch.rand(tokens.shape, generator=generator) < 0.1
    tokens = torch.where(noise, torch.randint(0, vocab, tokens.shape, generator=generator), tokens)
    return tokens[:, :-1], tokens[:, 1:]
