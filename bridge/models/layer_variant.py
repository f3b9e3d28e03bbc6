"""The layer variant bridge's local spec builds on top of Megatron-Core's GPT layer (pure data).

Megatron-Core's TransformerLayer has a norm before attention and before the MLP, and per-head q/k
norms. Some families place their norms elsewhere or score attention differently:
  * layernorm_placement "post" (OLMo 2): no norm before attention / the MLP, a norm on each branch's
    output before the residual add; "sandwich" (Gemma 2/3): both. The output norms live in the
    branch's last linear (bridge.models.post_norm): the output of a row-parallel linear is complete
    after its all-reduce / reduce-scatter, so a norm over hidden is right under TP and SP.
  * qk_layernorm_scope "projection" (OLMo 2): one RMSNorm over all heads of q (and of k), its sum of
    squares all-reduced over the TP group (bridge.models.qk_norm).
  * attn_logit_softcapping (Gemma 2): attention scores soft-capped before the mask
    (bridge.models.softcap_attention).
  * local_rotary_base (Gemma 3): the sliding-window layers rotate q/k with a RoPE of this base, the
    others with GPTModel's (bridge.models.local_rope_attention); their core attention is the explicit
    one of bridge.models.softcap_attention without a cap (per-layer windows, which sdpa has not).
  * moe_router_softmax_scores (ERNIE 4.5): the MoE router's sigmoid scores are softmax probabilities,
    so Megatron-Core's expert bias applies to them (bridge.models.softmax_score_router).
  * linear_attention_freq (Qwen3-Next, Qwen3.5): Gated DeltaNet layers, one softmax-attention layer
    every N (bridge.models.linear_attention), on Megatron-Core's local modules.
  * rope_score_multiplier (YaRN, OLMo 3): the layers rotating with GPTModel's (YaRN-scaled) RoPE
    multiply their scores by YaRN's attention factor squared, in the same explicit attention.
  * query_position_scale (Ministral 3: Llama 4's (beta, original)): each query's scores times
    1 + beta * log(1 + floor(position / original)), as transformers scales the query, in the same
    explicit attention.
  * mla_latent_norm_epsilon (GLM-4.7-Flash): multi-latent attention's q / kv latent norms use this eps,
    not layernorm_epsilon (bridge.models.norms.fixed_eps_norm).
Transformer Engine's spec has none of these, so a non-default variant always gets the local spec
(Megatron-Core's own modules, on CPU or CUDA alike; see bridge.models.specs.uses_te_spec).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LayerVariant:
    layernorm_placement: str = "pre"  # "pre" | "post" | "sandwich"
    qk_layernorm_scope: str = "head"  # "head" | "projection"
    attn_logit_softcapping: float | None = None
    local_rotary_base: float | None = None
    moe_router_softmax_scores: bool = False
    # the scores of the layers rotating with GPTModel's RoPE times this (YaRN's attention factor squared)
    rope_score_multiplier: float | None = None
    mla_latent_norm_epsilon: float | None = None  # None: layernorm_epsilon, as Megatron-Core builds them
    # (beta, original): each query's scores times 1 + beta * log(1 + floor(position / original)); None: off
    query_position_scale: tuple[float, int] | None = None
    # Gated DeltaNet layers (bridge.models.linear_attention): one softmax layer every N, None: none
    linear_attention_freq: int | None = None

    @property
    def explicit_attention(self) -> bool:
        """Core attention is bridge's SoftcapAttention (soft-capping, per-layer windows and RoPE, or a
        score multiplier on some layers or by position)."""
        return (
            self.attn_logit_softcapping is not None
            or self.local_rotary_base is not None
            or self.rope_score_multiplier is not None
            or self.query_position_scale is not None
        )

    @property
    def is_default(self) -> bool:
        return self == LayerVariant()

    @property
    def pre_norms(self) -> bool:
        return self.layernorm_placement in ("pre", "sandwich")

    @property
    def post_norms(self) -> bool:
        return self.layernorm_placement in ("post", "sandwich")
