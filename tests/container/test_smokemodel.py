"""llmb.container.smokemodel: each family's tiny decoder builds, maps tokens to logits of the right
shape without looking ahead, and learns the synthetic text (its loss falls within a few steps);
the synthetic text follows its rule. torch on the CPU, a few seconds in all; the smoke workload
that trains these models across ranks is in test_smoke.py."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from llmb.container import smokemodel, smokemoe

FAMILIES = sorted(smokemodel.TINY_SHAPES)
SEQ = smokemodel.TINY_SEQ_LENGTH


@pytest.fixture(scope="module")
def torch() -> Iterator[Any]:
    """torch on one thread, as the smoke workload runs it (llmb.container.smoke): several
    threads on a busy 2-core machine make each step many times slower."""
    torch = pytest.importorskip("torch")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield torch
    torch.set_num_threads(threads)


def build(torch: Any, family: str, seed: int = 0) -> Any:
    torch.manual_seed(seed)
    return smokemodel.build_model(family, smokemodel.TINY_SHAPES[family], SEQ)


def batch(torch: Any, family: str, size: int = 4, seed: int = 1) -> tuple[Any, Any]:
    vocab = smokemodel.TINY_SHAPES[family]["vocab_size"]
    return smokemodel.synthetic_batch(torch.Generator().manual_seed(seed), vocab, SEQ, size)


@pytest.mark.parametrize("family", FAMILIES)
def test_logits_per_position_over_the_vocabulary(torch: Any, family: str) -> None:
    model = build(torch, family)
    tokens, _ = batch(torch, family, size=3)
    logits = model(tokens)
    assert tuple(logits.shape) == (3, SEQ, smokemodel.TINY_SHAPES[family]["vocab_size"])
    assert logits.dtype == torch.float32 and torch.isfinite(logits).all()
    shorter = model(tokens[:, : SEQ // 2])  # any length up to the sequence length
    assert tuple(shorter.shape[:2]) == (3, SEQ // 2)


@pytest.mark.parametrize("family", FAMILIES)
def test_a_position_never_sees_the_tokens_after_it(torch: Any, family: str) -> None:
    """Causal attention and a causal mixer: changing token k changes no logit before k."""
    model = build(torch, family).eval()
    tokens, _ = batch(torch, family, size=2)
    changed = tokens.clone()
    k = SEQ // 2
    changed[:, k:] = (changed[:, k:] + 1) % smokemodel.TINY_SHAPES[family]["vocab_size"]
    with torch.no_grad():
        before, after = model(tokens), model(changed)
    assert torch.allclose(before[:, :k], after[:, :k], atol=1e-5)
    assert not torch.allclose(before[:, k:], after[:, k:], atol=1e-3)


@pytest.mark.parametrize("family", FAMILIES)
def test_the_loss_falls_within_a_few_steps(torch: Any, family: str) -> None:
    model = build(torch, family)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    generator = torch.Generator().manual_seed(1)
    vocab = smokemodel.TINY_SHAPES[family]["vocab_size"]
    losses = []
    for _ in range(20):
        tokens, labels = smokemodel.synthetic_batch(generator, vocab, SEQ, 8)
        loss = torch.nn.functional.cross_entropy(model(tokens).flatten(0, 1), labels.flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    # an untrained model is about uniform over the vocabulary: ln(512) = 6.24
    assert abs(losses[0] - torch.log(torch.tensor(float(vocab))).item()) < 0.5
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert last < first - 1.0, losses


def test_the_families_are_built_in_their_own_style(torch: Any) -> None:
    def parameters(family: str) -> int:
        return sum(p.numel() for p in build(torch, family).parameters())

    # SwiGLU's gate doubles llama's up projection; Nemotron-H mixes Mamba-like layers in
    assert len({parameters(f) for f in FAMILIES}) == len(FAMILIES)
    hybrid = build(torch, "nemotronh")
    kinds = [type(block.mixer).__name__ for block in hybrid.blocks]
    letters = {"MambaLikeMixer": "M", "Attention": "*", "MLP": "-"}
    assert "".join(letters[k] for k in kinds) == smokemodel.NEMOTRONH_PATTERN


def test_synthetic_text_follows_its_rule(torch: Any) -> None:
    vocab, size = 512, 64
    tokens, labels = batch(torch, "llama", size=size)
    assert tuple(tokens.shape) == tuple(labels.shape) == (size, SEQ)
    assert tokens.dtype == labels.dtype == torch.int64
    assert torch.equal(tokens[:, 1:], labels[:, :-1])  # labels are the next tokens
    assert int(tokens.min()) >= 0 and int(tokens.max()) < vocab
    follows = ((labels - tokens) % vocab == smokemodel.TOKEN_STRIDE).float().mean().item()
    assert 0.75 < follows < 0.9  # both ends of a step kept from the 10% noise: about 81%


def test_synthetic_text_is_the_generators(torch: Any) -> None:
    a, b, c = batch(torch, "llama", seed=7), batch(torch, "llama", seed=7), batch(torch, "llama",
                                                                                  seed=8)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[0], c[0])


def test_the_optimizer_is_torch_adamws_update_step_by_step(torch: Any) -> None:
    """smokemodel.AdamW against torch.optim.AdamW on the same model and batches, the learning
    rate changing every step as the smoke loop changes it: the same weights after each step."""
    ours_model, theirs_model = build(torch, "llama"), build(torch, "llama")
    settings = {"lr": 3e-3, "betas": (0.9, 0.95), "weight_decay": 0.1}
    ours = smokemodel.AdamW(ours_model.parameters(), **settings)
    theirs = torch.optim.AdamW(theirs_model.parameters(), **settings)
    generator = torch.Generator().manual_seed(2)
    vocab = smokemodel.TINY_SHAPES["llama"]["vocab_size"]
    for step in range(6):
        tokens, labels = smokemodel.synthetic_batch(generator, vocab, SEQ, 4)
        for model, optimizer in ((ours_model, ours), (theirs_model, theirs)):
            optimizer.param_groups[0]["lr"] = 3e-3 * (step + 1) / 6
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(tokens).flatten(0, 1),
                                                     labels.flatten())
            loss.backward()
            optimizer.step()
        for a, b in zip(ours_model.parameters(), theirs_model.parameters(), strict=True):
            assert torch.allclose(a, b, atol=1e-6, rtol=1e-5), step


def test_the_optimizer_state_round_trips_and_refuses_another_models(torch: Any) -> None:
    model = build(torch, "nemotron4")
    optimizer = smokemodel.AdamW(model.parameters(), lr=1e-3)
    tokens, labels = smokemodel.synthetic_batch(torch.Generator().manual_seed(3), 512, SEQ, 2)
    torch.nn.functional.cross_entropy(model(tokens).flatten(0, 1), labels.flatten()).backward()
    optimizer.step()
    again = smokemodel.AdamW(model.parameters(), lr=5e-4)
    again.load_state_dict(optimizer.state_dict())
    assert (again.steps, again.param_groups[0]["lr"]) == (1, 1e-3)
    assert all(torch.equal(a, b) for a, b in zip(again.exp_avg, optimizer.exp_avg, strict=True))
    other = smokemodel.AdamW(build(torch, "nemotronh").parameters(), lr=1e-3)
    with pytest.raises(ValueError, match="other shapes"):
        other.load_state_dict(optimizer.state_dict())
    with pytest.raises(ValueError, match="not the smoke workload's optimizer state"):
        other.load_state_dict({"state": {}, "param_groups": []})  # a torch optimizer's


def test_the_moe_families_log_what_their_megatron_bridge_runs_log() -> None:
    """Router load-balancing types and MTP depths of Megatron-Bridge b50da4c7's models: the
    figures after `lm loss`, in training_log's order."""
    assert smokemoe.logged_names("deepseek") == (
        "load_balancing_loss", "seq_load_balancing_loss", "mtp_1 loss")
    assert smokemoe.logged_names("kimi") == ("load_balancing_loss", "seq_load_balancing_loss")
    assert smokemoe.logged_names("qwen3") == ("load_balancing_loss",)
    assert smokemoe.logged_names("gpt_oss") == ()


@pytest.mark.parametrize("family", sorted(smokemoe.MOE_SHAPES))
def test_a_moe_step_routes_top_k_and_trains_on_its_losses(torch: Any, family: str) -> None:
    shape = smokemodel.TINY_SHAPES[family]
    model = build(torch, family)
    tokens, labels = batch(torch, family, size=2)
    logits = model(tokens)
    loss, figures = smokemodel.training_loss(family, model, logits, labels)
    assert tuple(figures) == ("lm loss", *smokemoe.logged_names(family))
    lm = torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten())
    assert torch.allclose(figures["lm loss"], lm)
    depths = shape["mtp_num_layers"]
    assert [tuple(t.shape) for t in model.mtp_logits] == [
        (2, SEQ - d, shape["vocab_size"]) for d in range(1, depths + 1)]
    extra = smokemoe.MTP_LOSS_SCALE * figures["mtp_1 loss"] if depths else 0.0
    routed = [figures[n] for n in figures if n.endswith("load_balancing_loss")]
    aux = smokemoe.AUX_LOSS_COEFF[family] * sum(routed, torch.zeros(()))
    assert torch.allclose(loss, lm + extra + aux)
    loss.backward()
    moe = [m for m in model.modules() if type(m).__name__ == "MoE"]
    # the MTP depth's block is a MoE one too (Megatron counts it among the MoE layers)
    assert len(moe) == shape["num_layers"] - shape["dense_layers"] + depths
    for layer in moe:  # the router learns through the gates of the experts it picked
        assert layer.router.weight.grad is not None and layer.router.weight.grad.abs().sum() > 0
        assert layer.up.grad is not None and (layer.up.grad.abs().sum((1, 2)) > 0).all()
    dense_first = [type(b.mixer).__name__ for b in model.blocks][1::2]
    assert dense_first[: shape["dense_layers"]] == ["MLP"] * shape["dense_layers"]
    latent = any(type(m).__name__ == "LatentAttention" for m in model.modules())
    assert latent == (family in ("deepseek", "kimi"))
