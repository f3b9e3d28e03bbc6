"""MiniMax-M2 config.json rules (transformers' MiniMaxM2, checked against Megatron-Core 0.16.1 and 0.19.2).

- Attention: q/k RMSNorms over whole projections (as OLMo 2: the mapping's qk_layernorm_scope), RoPE over
  the first rotary_dim of each head (the released configs' legacy key; transformers turns it into
  partial_rotary_factor = rotary_dim / head_dim).
- Experts: num_local_experts of intermediate_size in every layer (Mixtral's keys), routed by sigmoid
  scores + e_score_correction_bias, the chosen scores always renormalised (no scaling, no groups):
  hf_translation.sigmoid_routing. With one expert per token transformers' weight is 1, Megatron-Core's
  the sigmoid score: refused.
"""

from __future__ import annotations

from typing import Any

from bridge.models.hf_translation.common import BASE_DEFAULTS, MOE_DEFAULTS, get, refuse
from bridge.models.hf_translation.read import rope_fields as generic_rope_fields
from bridge.models.hf_translation.sigmoid_routing import sigmoid_routing_fields

CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "minimax_m2": dict(
        BASE_DEFAULTS | MOE_DEFAULTS,
        vocab_size=200064,
        hidden_size=3072,
        intermediate_size=1536,
        num_hidden_layers=62,
        num_attention_heads=48,
        num_key_value_heads=8,
        head_dim=128,
        max_position_embeddings=196608,
        rms_norm_eps=1e-6,
        rope_theta=5000000.0,
        num_experts_per_tok=8,
        num_local_experts=256,
        router_jitter_noise=0.0,
    ),
}


def check(cfg: Any) -> None:
    for key, value in (("scoring_func", "sigmoid"), ("use_routing_bias", True)):
        given = get(cfg, key)
        if given is not None and given != value:
            raise refuse(
                key,
                given,
                f"transformers' MiniMaxM2 always routes with {key}={value!r} whatever the field says",
                f"convert a checkpoint made with {key}={value!r} (as published)",
            )


def rope_fields(cfg: Any) -> dict[str, Any]:
    """The generic RoPE translation; the released configs give the rotated part as rotary_dim."""
    out = generic_rope_fields(cfg)
    params = get(cfg, "rope_parameters") or {}
    rotary_dim = get(cfg, "rotary_dim")
    if (
        rotary_dim is not None
        and "partial_rotary_factor" not in params
        and get(cfg, "partial_rotary_factor") is None
    ):
        out["rotary_percent"] = int(rotary_dim) / int(get(cfg, "head_dim"))
    return out


def provider_fields(cfg: Any) -> dict[str, Any]:
    """The sigmoid + bias routing over the generic experts (always renormalised)."""
    topk = int(get(cfg, "num_experts_per_tok"))
    if topk < 2:
        raise refuse(
            "num_experts_per_tok",
            topk,
            "transformers' MiniMaxM2 renormalises the chosen weight to 1; Megatron-Core's sigmoid router "
            "renormalises only from two experts on",
            "convert a model routing to at least 2 experts (8 as published)",
        )
    return sigmoid_routing_fields(int(get(cfg, "num_local_experts")), topk, True)


def moe_hf_fields(p: Any) -> dict[str, Any]:
    """Mixtral's names of the expert keys, and the routing the released configs spell out."""
    return {
        "num_local_experts": p.num_moe_experts,
        "intermediate_size": p.moe_ffn_hidden_size,
        "router_jitter_noise": p.moe_input_jitter_eps or 0.0,
        "scoring_func": "sigmoid",
        "use_routing_bias": True,
    }
