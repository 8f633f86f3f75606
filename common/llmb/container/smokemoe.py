"""The smoke workload's tiny mixture-of-experts models: DeepSeek-V3 and Kimi K2 (multi-latent
attention, routed and shared experts after dense first layers; DeepSeek-V3 also one
multi-token-prediction depth), Qwen3 MoE and GPT-OSS (grouped-query attention, routed experts).

Stand-ins, said plainly: every expert computes every token and the router's top-k gates pick
(a real top-k routing of the outputs and gradients, with no token dispatch); GPT-OSS's
attention sinks, sliding windows and biases, and Qwen3's query/key norms, are left out.

What a real Megatron-Bridge run of these models prints on its iteration lines after `lm loss`
is the same here (NVIDIA-NeMo/Megatron-Bridge b50da4c7, training/utils/train_utils.py
training_log; NVIDIA/Megatron-LM 458c8d0, transformer/moe/router.py, moe_logging.py,
multi_token_prediction.py): `load_balancing_loss` when the router's load-balancing type holds
`aux_loss`, `seq_load_balancing_loss` when it holds `seq_aux_loss` (each the mean over the MoE
layers, the one the router does not record logged as 0), and `mtp_1 loss` with one MTP depth.
The router types are the models' in Megatron-Bridge b50da4c7 (models/deepseek/deepseek_v3_bridge.py,
kimi/kimi_bridge.py, qwen/qwen3_moe_bridge.py, gpt_oss/gpt_oss_bridge.py); Kimi K2's Hugging
Face config predicts no next tokens (num_nextn_predict_layers 0), so it has no MTP depth.
torch is imported inside the functions.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from types import SimpleNamespace
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    import torch
    from torch import nn

_MLA = {"q_lora_rank": 32, "kv_lora_rank": 32, "qk_head_dim": 16, "qk_pos_emb_head_dim": 8,
        "v_head_dim": 16}
_COMMON = {"num_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 512,
           "moe_ffn_hidden_size": 32}
MOE_SHAPES: dict[str, dict[str, int]] = {
    "deepseek": {**_COMMON, **_MLA, "num_query_groups": 4, "ffn_hidden_size": 176,
                 "dense_layers": 1, "num_moe_experts": 8, "moe_router_topk": 2,
                 "moe_shared_expert_intermediate_size": 32, "mtp_num_layers": 1},
    "kimi": {**_COMMON, **_MLA, "num_query_groups": 4, "ffn_hidden_size": 176,
             "dense_layers": 1, "num_moe_experts": 16, "moe_router_topk": 4,
             "moe_shared_expert_intermediate_size": 32, "mtp_num_layers": 0},
    "qwen3": {**_COMMON, "num_query_groups": 2, "ffn_hidden_size": 176, "dense_layers": 0,
              "num_moe_experts": 8, "moe_router_topk": 2,
              "moe_shared_expert_intermediate_size": 0, "mtp_num_layers": 0},
    "gpt_oss": {**_COMMON, "num_query_groups": 2, "ffn_hidden_size": 176, "dense_layers": 0,
                "num_moe_experts": 16, "moe_router_topk": 4,
                "moe_shared_expert_intermediate_size": 0, "mtp_num_layers": 0},
}
# moe_router_load_balancing_type per family (Megatron-Bridge b50da4c7's model bridges).
ROUTER_LOSS = {"deepseek": "seq_aux_loss", "kimi": "seq_aux_loss", "qwen3": "aux_loss",
               "gpt_oss": "none"}
MTP_LOSS_SCALE = 0.1  # mtp_loss_scaling_factor (Megatron-Bridge b50da4c7, recipes/deepseek)
AUX_LOSS_COEFF = {"deepseek": 1e-4, "kimi": 1e-3, "qwen3": 1e-3, "gpt_oss": 0.0}


def logged_names(family: str) -> tuple[str, ...]:
    """The figures a real run of the family prints after `lm loss`, in its order."""
    kind = ROUTER_LOSS[family]
    names = [name for key, name in (("aux_loss", "load_balancing_loss"),
                                    ("seq_aux_loss", "seq_load_balancing_loss")) if key in kind]
    depths = MOE_SHAPES[family]["mtp_num_layers"]
    return (*names, *(f"mtp_{i + 1} loss" for i in range(depths)))


def model_flops(shape: Mapping[str, int], seq_length: int) -> float:
    """Model FLOPs per sample of a tiny MoE model, counted as a GPT with a SwiGLU MLP as wide
    as the experts a token uses (top-k and shared); router, latent projections and MTP depth
    not counted: a smoke figure, comparable with nothing."""
    from llmb.recipes import perf

    active = (shape["moe_router_topk"] * shape["moe_ffn_hidden_size"]
              + shape["moe_shared_expert_intermediate_size"])
    keys = {key: shape[key] for key in perf.GPT_KEYS}
    return perf.gpt_flops("llama", {**keys, "ffn_hidden_size": active}, seq_length)


def build(family: str, shape: Mapping[str, int], seq_length: int, layers: SimpleNamespace
          ) -> nn.Module:
    """The family's tiny MoE decoder (layers: llmb.container.smokemodel's dense modules)."""
    from torch import nn

    moe = _moe_layers()
    hidden, heads = shape["hidden_size"], shape["num_attention_heads"]

    def attention() -> nn.Module:
        if "kv_lora_rank" in shape:
            return moe.LatentAttention(shape, seq_length)
        return layers.Attention(hidden, heads, shape["num_query_groups"], hidden // heads,
                                seq_length, True)

    def block(index: int) -> list[nn.Module]:
        mlp = (layers.MLP(hidden, shape["ffn_hidden_size"], True)
               if index < shape["dense_layers"] else moe.MoE(shape, ROUTER_LOSS[family]))
        return [layers.Residual(nn.RMSNorm(hidden), attention()),
                layers.Residual(nn.RMSNorm(hidden), mlp)]

    blocks = [m for i in range(shape["num_layers"]) for m in block(i)]
    mtp = [moe.MTPDepth(hidden, block(shape["num_layers"]))
           for _ in range(shape["mtp_num_layers"])]
    return moe.MoEDecoder(shape["vocab_size"], hidden, blocks, mtp)


def losses(family: str, model: nn.Module, lm_loss: torch.Tensor, labels: torch.Tensor
           ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The loss to train on (lm loss, the MTP losses scaled, the router's loss by its
    coefficient) and the figures logged after `lm loss`, by their Megatron names."""
    import torch
    from torch.nn import functional

    figures: dict[str, torch.Tensor] = {}
    routed = [cast("dict[str, torch.Tensor]", m.recorded) for m in model.modules()
              if type(m).__name__ == "MoE"]
    for name in logged_names(family):
        if name.startswith("mtp_"):
            continue
        found = [r[name] for r in routed if name in r]
        figures[name] = torch.stack(found).sum() / len(routed) if found else torch.zeros(())
    total = lm_loss + AUX_LOSS_COEFF[family] * sum(figures.values(), torch.zeros(()))
    depths = cast("list[torch.Tensor]", model.mtp_logits)
    for depth, logits in enumerate(depths, 1):
        target = labels[:, depth:]
        mtp = functional.cross_entropy(logits.flatten(0, 1), target.flatten())
        figures[f"mtp_{depth} loss"] = mtp
        total = total + MTP_LOSS_SCALE * mtp / len(depths)
    return total, figures


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary positions on the last dimension of x (positions on the one before)."""
    import torch

    s = x.shape[-2]
    x1, x2 = x[..., 0::2], x[..., 1::2]
    cos, sin = cos[:s], sin[:s]
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)


@functools.cache
def _moe_layers() -> SimpleNamespace:
    """The MoE models' torch.nn.Module classes, defined on first use."""
    return SimpleNamespace(LatentAttention=_latent_attention_class(), MoE=_moe_class(),
                           MTPDepth=_mtp_class(), MoEDecoder=_decoder_class())


def _latent_attention_class() -> type:
    """Multi-latent attention: queries, keys and values through low-rank latents, and a rotary
    key part shared by the heads."""
    import torch
    from torch import nn
    from torch.nn import functional

    class LatentAttention(nn.Module):
        def __init__(self, shape: Mapping[str, int], seq_length: int) -> None:
            super().__init__()
            hidden, self.heads = shape["hidden_size"], shape["num_attention_heads"]
            self.dims = (shape["qk_head_dim"], shape["qk_pos_emb_head_dim"], shape["v_head_dim"])
            qk, rope, v = self.dims
            self.kv_rank = shape["kv_lora_rank"]
            self.q_down = nn.Linear(hidden, shape["q_lora_rank"], bias=False)
            self.q_norm = nn.RMSNorm(shape["q_lora_rank"])
            self.q_up = nn.Linear(shape["q_lora_rank"], self.heads * (qk + rope), bias=False)
            self.kv_down = nn.Linear(hidden, self.kv_rank + rope, bias=False)
            self.kv_norm = nn.RMSNorm(self.kv_rank)
            self.kv_up = nn.Linear(self.kv_rank, self.heads * (qk + v), bias=False)
            self.out = nn.Linear(self.heads * v, hidden, bias=False)
            inv_freq = 1.0 / 10000 ** (torch.arange(0, rope, 2).float() / rope)
            angles = torch.outer(torch.arange(seq_length).float(), inv_freq)
            self.cos, self.sin = angles.cos(), angles.sin()  # plain tensors, as Attention's

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, s, _ = x.shape
            (qk, rope, v), h = self.dims, self.heads
            q = self.q_up(self.q_norm(self.q_down(x))).view(b, s, h, qk + rope).transpose(1, 2)
            q_plain, q_rope = q.split([qk, rope], dim=-1)
            latent, k_rope = self.kv_down(x).split([self.kv_rank, rope], dim=-1)
            kv = self.kv_up(self.kv_norm(latent)).view(b, s, h, qk + v).transpose(1, 2)
            k_plain, value = kv.split([qk, v], dim=-1)
            k_rope = _rotate(k_rope, self.cos, self.sin).unsqueeze(1).expand(b, h, s, rope)
            query = torch.cat((q_plain, _rotate(q_rope, self.cos, self.sin)), dim=-1)
            key = torch.cat((k_plain, k_rope), dim=-1)
            y = functional.scaled_dot_product_attention(query, key, value, is_causal=True)
            return self.out(y.transpose(1, 2).reshape(b, s, h * v))

    return LatentAttention


def _moe_class() -> type:
    """Routed SwiGLU experts (top-k of a softmax router, gates renormalised) and a shared
    expert; records the router's load-balancing loss of its type (switch loss: experts x the
    sum over experts of routed share x mean probability; per sequence for seq_aux_loss)."""
    import torch
    from torch import nn
    from torch.nn import functional

    class MoE(nn.Module):
        def __init__(self, shape: Mapping[str, int], router_loss: str) -> None:
            super().__init__()
            hidden, ffn = shape["hidden_size"], shape["moe_ffn_hidden_size"]
            self.experts, self.topk = shape["num_moe_experts"], shape["moe_router_topk"]
            self.router_loss = router_loss
            self.router = nn.Linear(hidden, self.experts, bias=False)
            self.up = nn.Parameter(torch.randn(self.experts, hidden, 2 * ffn) * hidden ** -0.5)
            self.down = nn.Parameter(torch.randn(self.experts, ffn, hidden) * ffn ** -0.5)
            shared = shape["moe_shared_expert_intermediate_size"]
            self.shared = nn.Linear(hidden, 2 * shared, bias=False) if shared else None
            self.shared_down = nn.Linear(shared, hidden, bias=False) if shared else None
            self.recorded: dict[str, torch.Tensor] = {}

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            probs = functional.softmax(self.router(x), dim=-1)
            top_p, top_i = probs.topk(self.topk, dim=-1)
            chosen = torch.zeros_like(probs).scatter(-1, top_i, 1.0)
            gates = torch.zeros_like(probs).scatter(-1, top_i, top_p / top_p.sum(-1, True))
            value, gate = torch.einsum("bsh,ehf->bsef", x, self.up).chunk(2, dim=-1)
            each = torch.einsum("bsef,efh->bseh", functional.silu(gate) * value, self.down)
            y = torch.einsum("bse,bseh->bsh", gates, each)
            if self.shared is not None and self.shared_down is not None:
                value, gate = self.shared(x).chunk(2, dim=-1)
                y = y + self.shared_down(functional.silu(gate) * value)
            share = chosen / self.topk
            if self.router_loss == "aux_loss":
                loss = self.experts * (share.mean((0, 1)) * probs.mean((0, 1))).sum()
                self.recorded = {"load_balancing_loss": loss}
            elif self.router_loss == "seq_aux_loss":
                loss = self.experts * (share.mean(1) * probs.mean(1)).sum(-1).mean()
                self.recorded = {"seq_load_balancing_loss": loss}
            return y

    return MoE


def _mtp_class() -> type:
    """One multi-token-prediction depth: the hidden state at t and the embedding of token
    t + 1, normed, joined and projected, through one more block: a hidden state that predicts
    token t + 2 through the shared output head."""
    import torch
    from torch import nn

    class MTPDepth(nn.Module):
        def __init__(self, hidden: int, blocks: list[nn.Module]) -> None:
            super().__init__()
            self.hidden_norm, self.embed_norm = nn.RMSNorm(hidden), nn.RMSNorm(hidden)
            self.proj = nn.Linear(2 * hidden, hidden, bias=False)
            self.blocks = nn.ModuleList(blocks)
            self.final_norm = nn.RMSNorm(hidden)

        def forward(self, x: torch.Tensor, embedded: torch.Tensor) -> torch.Tensor:
            x = self.proj(torch.cat((self.hidden_norm(x), self.embed_norm(embedded)), dim=-1))
            for block in self.blocks:
                x = block(x)
            return self.final_norm(x)

    return MTPDepth


def _decoder_class() -> type:
    """The decoder: embedding, blocks, output head, and the MTP depths' logits beside
    (`mtp_logits`, one per depth, for the positions that have a target)."""
    from torch import nn

    class MoEDecoder(nn.Module):
        def __init__(self, vocab: int, hidden: int, blocks: list[nn.Module],
                     mtp: list[nn.Module]) -> None:
            super().__init__()
            self.embedding = nn.Embedding(vocab, hidden)
            self.blocks = nn.ModuleList(blocks)
            self.final_norm = nn.RMSNorm(hidden)
            self.output = nn.Linear(hidden, vocab, bias=False)
            self.mtp = nn.ModuleList(mtp)
            self.mtp_logits: list[torch.Tensor] = []

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            x = self.embedding(tokens)
            for block in self.blocks:
                x = block(x)
            self.mtp_logits = []
            hidden = x
            for depth, module in enumerate(self.mtp, 1):
                hidden = module(hidden[:, :-1], self.embedding(tokens[:, depth:]))
                self.mtp_logits.append(self.output(hidden))
            return self.output(self.final_norm(x))

    return MoEDecoder
