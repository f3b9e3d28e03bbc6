"""QK-clip (model.qk_clip): the per-head max attention logits bridge's sdpa attention records, against a
plain torch computation of the scores; the clip after a step (bridge.training.qk_clip, calling
Megatron-Core's MLASelfAttention.clip_qk) against Kimi K2's published rule (MuonClip, Kimi K2 technical
report, section 2.1): for every head h whose max logit S_h exceeds tau, gamma_h = tau / S_h and
q^C_h, k^C_h (the head's own query / key components) are scaled by sqrt(gamma_h), the head's rotary
query q^R_h by gamma_h, the shared rotary key k^R not at all; heads at or below tau are untouched.
In MLA's weights: W_q's rows of head h (nope rows, then rope rows), W_kv_up's key rows of head h
(the value rows untouched), W_kv_down (which makes the shared rotary key) untouched. And the plan's
refusals."""

from __future__ import annotations

import math

import pytest
import torch

from bridge.config.checks.muon import check_qk_clip
from bridge.config.environment import Environment
from bridge.config.overrides import apply_overrides
from bridge.errors import ConfigError

pytestmark = pytest.mark.usefixtures("single_process_groups")
TAU = 1.0
HEADS, NOPE, ROPE, V, LORA, HIDDEN = 4, 16, 8, 16, 16, 64


def _groups() -> None:
    from bridge.parallel import runtime
    from bridge.parallel.layout import ParallelLayout

    runtime.initialize_distributed(ParallelLayout(world_size=1))


def _mla_model(**extra):
    from bridge.models.gpt_provider import GPTModelProvider

    _groups()
    provider = GPTModelProvider(
        num_layers=1, hidden_size=HIDDEN, ffn_hidden_size=128, num_attention_heads=HEADS, vocab_size=64,
        seq_length=16, multi_latent_attention=True, q_lora_rank=None, kv_lora_rank=LORA, qk_head_dim=NOPE,
        qk_pos_emb_head_dim=ROPE, v_head_dim=V, kv_channels=NOPE + ROPE, position_embedding_type="rope",
        rope_type="rope", qk_clip=True, qk_clip_threshold=TAU, qk_clip_alpha=0.5, **extra,
    )  # fmt: skip
    return provider.provide_distributed_model(wrap_with_ddp=False)


def test_sdpa_attention_records_each_heads_max_logit():
    from megatron.core.transformer.enums import AttnMaskType
    from megatron.core.transformer.transformer_config import TransformerConfig

    from bridge.models.attention import SDPAttention

    _groups()
    config = TransformerConfig(
        num_layers=1, hidden_size=64, num_attention_heads=4, num_query_groups=2, qk_clip=True
    )
    core = SDPAttention(config, layer_number=1, attn_mask_type=AttnMaskType.causal, attention_type="self")
    gen = torch.Generator().manual_seed(0)
    maxima = []
    for scale in (3.0, 1.0):  # the second batch's logits are smaller: the running max keeps the first
        q = scale * torch.randn(8, 2, 4, 16, generator=gen)  # [s, b, heads, d]
        k, v = (scale * torch.randn(8, 2, 2, 16, generator=gen) for _ in range(2))
        core(q, k, v, attention_mask=None)
        # plain torch: head h uses key group h // 2; query i sees keys j <= i; scale 1/sqrt(16)
        scores = torch.einsum("ibhd,jbhd->bhij", q, k.repeat_interleave(2, dim=2)) / math.sqrt(16)
        causal = torch.ones(8, 8, dtype=torch.bool).tril()
        maxima.append(scores.masked_fill(~causal, float("-inf")).amax(dim=(0, 2, 3)))
    # fp32 dot products of 16 terms of magnitude <= ~30 (3 sigma * 3 sigma * 3^2): rounding <= 16 * 2^-24 * 16 * 30
    torch.testing.assert_close(core.current_max_attn_logits, torch.maximum(*maxima), rtol=0, atol=5e-4)


def test_clip_follows_kimi_k2_rule_on_mla():
    from bridge.training.qk_clip import clip_qk

    chunks = _mla_model()
    attention = chunks[0].decoder.layers[0].self_attention
    logits = torch.tensor([0.5, 3.0, TAU, 8.0])  # heads 1 and 3 over tau; head 2 exactly at it
    attention.core_attention.current_max_attn_logits = logits.clone()
    wq = attention.linear_q_proj.weight.detach().clone().view(HEADS, NOPE + ROPE, HIDDEN)
    wkv_up = attention.linear_kv_up_proj.weight.detach().clone().view(HEADS, NOPE + V, LORA)
    wkv_down = attention.linear_kv_down_proj.weight.detach().clone()

    assert clip_qk(chunks, clip=True) == 8.0
    gamma = torch.clamp(TAU / logits, max=1.0)  # 1 for the heads at or below tau
    want_q, want_kv = wq.clone(), wkv_up.clone()
    for h in range(HEADS):
        want_q[h, :NOPE] *= math.sqrt(gamma[h])  # q^C
        want_q[h, NOPE:] *= gamma[h]  # q^R
        want_kv[h, :NOPE] *= math.sqrt(gamma[h])  # k^C; the value rows stay
    # torch.pow(gamma, 0.5) against math.sqrt: one fp32 rounding apart
    got_q = attention.linear_q_proj.weight.detach().view(HEADS, NOPE + ROPE, HIDDEN)
    got_kv = attention.linear_kv_up_proj.weight.detach().view(HEADS, NOPE + V, LORA)
    torch.testing.assert_close(got_q, want_q, rtol=2**-22, atol=0)
    torch.testing.assert_close(got_kv, want_kv, rtol=2**-22, atol=0)
    assert torch.equal(got_q[0], wq[0]) and torch.equal(got_q[2], wq[2])  # untouched heads: bit for bit
    assert torch.equal(attention.linear_kv_down_proj.weight, wkv_down)  # the shared rotary key's weights
    assert attention.core_attention.current_max_attn_logits is None  # reset for the next step

    # logging only (log_max_attention_logit without qk_clip): the max comes back, the weights stay
    attention.core_attention.current_max_attn_logits = logits.clone()
    before = attention.linear_q_proj.weight.detach().clone()
    assert clip_qk(chunks, clip=False) == 8.0
    assert torch.equal(attention.linear_q_proj.weight, before)
    assert attention.core_attention.current_max_attn_logits is None


def test_forward_records_through_mla():
    chunks = _mla_model()
    attention = chunks[0].decoder.layers[0].self_attention
    tokens = torch.randint(0, 64, (2, 16), generator=torch.Generator().manual_seed(0))
    chunks[0](tokens, torch.arange(16)[None].expand(2, -1), None)
    recorded = attention.core_attention.current_max_attn_logits
    assert recorded is not None and recorded.shape == (HEADS,) and torch.isfinite(recorded).all()


def test_plan_refusals():
    from tests.functional.workers.train_common import tiny_config

    cpu = Environment.cpu()
    cfg = tiny_config("model.qk_clip=true", "optimizer.use_distributed_optimizer=false",
                      "distributed.overlap_param_gather=false")  # fmt: skip
    check_qk_clip(cfg, cpu)  # sdpa attention records the logits on CPU
    for extra, start in [
        (["model.attention_backend=unfused"], "model.qk_clip = True: model.attention_backend=unfused"),
        (["optimizer.use_distributed_optimizer=true"], "model.qk_clip = True: Megatron-Core's clip_qk"),
        (["distributed.strategy=fsdp2"], "model.qk_clip = True: strategy fsdp2"),
    ]:
        with pytest.raises(ConfigError) as err:
            check_qk_clip(apply_overrides(cfg.copy(), extra), cpu)
        assert str(err.value).startswith(start) and "Fix:" in str(err.value), str(err.value)
    old_te = Environment(cuda=True, packages={"transformer_engine": "2.8.0"})
    with pytest.raises(ConfigError, match="Transformer Engine >= 2.9"):
        check_qk_clip(cfg, old_te)
