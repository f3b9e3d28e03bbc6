"""ERNIE 4.5 MoE config.json rules (transformers' Ernie4_5_Moe, checked against Megatron-Core 0.16.1 and
0.19.2).

- Attention: Llama's, no biases (use_bias=true, biases on every projection and the LM head, is refused);
  RoPE rotates interleaved pairs (Megatron's rotary_interleaved).
- Experts (moe_num_experts of moe_intermediate_size, moe_k per token): softmax probabilities, experts
  chosen by probability + moe_statics.e_score_correction_bias, weighted by the chosen probabilities
  renormalised (divided by max(sum, moe_norm_min)). Megatron-Core adds its expert bias to sigmoid scores
  only: bridge's softmax-score router (moe_router_softmax_scores) makes those scores the probabilities.
  With one expert per token transformers' weight is 1 and the sigmoid router's the probability: refused;
  a moe_norm_min the sum of the chosen probabilities can fall below (>= moe_k / moe_num_experts) too.
- moe_num_shared_experts * moe_intermediate_size: an ungated shared expert in every MoE layer.
- MoE layers: (i + 1) % moe_layer_interval == 0 and moe_layer_start_index <= i <= moe_layer_end_index
  (-1: the last); the others dense MLPs of intermediate_size (moe_layer_freq list).
- Multi-token prediction (model.mtp_*): not Megatron-Core's MTP layer (a dense layer reusing model.norm,
  mapping.UNMAPPED_WHY): importing a checkpoint holding it is an error naming the tensors and that reason
  unless the user omits them on purpose (omit_unmapped, listed; an export carries them back).
"""

from __future__ import annotations

import logging
from typing import Any

from bridge.errors import ConfigError
from bridge.models.hf_translation.common import BASE_DEFAULTS, MOE_DEFAULTS, get, refuse
from bridge.models.hf_translation.read import rope_fields

logger = logging.getLogger(__name__)

CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "ernie4_5_moe": dict(
        {k: v for k, v in (BASE_DEFAULTS | MOE_DEFAULTS).items() if k != "attention_dropout"},
        vocab_size=103424,
        hidden_size=2560,
        intermediate_size=12288,
        num_hidden_layers=28,
        num_attention_heads=20,
        num_key_value_heads=4,
        max_position_embeddings=131072,
        rms_norm_eps=1e-5,
        tie_word_embeddings=True,
        rope_theta=500000.0,
        use_bias=False,
        moe_intermediate_size=1536,
        moe_k=6,
        moe_num_experts=64,
        moe_num_shared_experts=2,
        moe_layer_start_index=1,
        moe_layer_interval=1,
        moe_norm_min=1e-12,
    ),
}


def check(cfg: Any) -> None:
    if get(cfg, "use_bias", False):
        raise refuse(
            "use_bias",
            True,
            "biases on every projection and on the LM head are not part of this mapping",
            "convert a model with use_bias=false (as published)",
        )
    for key in ("moe_num_experts", "moe_intermediate_size", "moe_k"):
        if isinstance(get(cfg, key), (list, tuple)):
            raise refuse(
                key, get(cfg, key), "one expert pool (the text model) is converted", "use an integer"
            )


def moe_layer_pattern(cfg: Any) -> list[int]:
    """Per layer 1 (MoE block) or 0 (dense MLP), as transformers decides it."""
    layers = int(get(cfg, "num_hidden_layers"))
    start = int(get(cfg, "moe_layer_start_index") or 0)
    end = get(cfg, "moe_layer_end_index")
    end = layers - 1 if end is None or int(end) == -1 else int(end)
    interval = int(get(cfg, "moe_layer_interval") or 1)
    if interval < 1:
        raise refuse("moe_layer_interval", interval, "must be a positive integer", "use 1 (as published)")
    return [int((i + 1) % interval == 0 and start <= i <= end) for i in range(layers)]


def _moe_fields(cfg: Any) -> dict[str, Any]:
    experts, topk = int(get(cfg, "moe_num_experts") or 0), int(get(cfg, "moe_k") or 0)
    pattern = moe_layer_pattern(cfg)
    if not experts or not any(pattern):
        raise refuse(
            "moe_num_experts/moe_layer_start_index",
            (experts, get(cfg, "moe_layer_start_index")),
            "leave no MoE layer",
            "convert an ERNIE 4.5 MoE model with experts (a dense ERNIE 4.5 is another architecture)",
        )
    if not 2 <= topk <= experts:
        raise refuse(
            "moe_k",
            topk,
            f"must be between 2 and {experts}: transformers renormalises one chosen weight to 1, Megatron-Core's "
            "sigmoid router keeps it",
            "convert a model routing to at least 2 experts (as published)",
        )
    norm_min = float(get(cfg, "moe_norm_min", 1e-12))
    if norm_min >= topk / experts:
        raise refuse(
            "moe_norm_min",
            norm_min,
            f"the sum of the {topk} chosen probabilities can fall below it (down to {topk}/{experts}), where "
            "transformers divides by it and Megatron-Core by the sum",
            "convert a model with a small moe_norm_min (1e-12 as published)",
        )
    size = int(get(cfg, "moe_intermediate_size"))
    shared = int(get(cfg, "moe_num_shared_experts") or 0)
    out: dict[str, Any] = dict(
        num_moe_experts=experts,
        moe_router_topk=topk,
        moe_ffn_hidden_size=size,
        moe_shared_expert_intermediate_size=shared * size if shared else None,
        moe_shared_expert_gate=False,
        moe_router_score_function="sigmoid",
        moe_router_softmax_scores=True,
        moe_router_pre_softmax=False,
        moe_router_enable_expert_bias=True,
        moe_router_dtype="fp32",  # transformers routes in fp32
        moe_router_load_balancing_type="aux_loss",
        moe_aux_loss_coeff=float(get(cfg, "router_aux_loss_coef", 0.0) or 0.0),
        moe_token_dispatcher_type="alltoall",
        moe_grouped_gemm=False,
    )
    if not all(pattern):
        out["moe_layer_freq"] = pattern
    return out


def translate(cfg: Any, base: dict[str, Any]) -> dict[str, Any]:
    """`base` (the generic sizes, norms, dtype) with interleaved RoPE and the experts: the whole
    translation here, as transformers' attribute_map would otherwise show the generic expert rules a
    num_experts that a config.json does not hold."""
    return base | rope_fields(cfg) | {"rotary_interleaved": True} | _moe_fields(cfg)


def _layer_rule(p: Any, architecture: str) -> dict[str, int]:
    """moe_layer_start_index / end_index / interval for the provider's MoE layers."""
    freq = p.moe_layer_freq
    pattern = [int(i % freq == 0) for i in range(p.num_layers)] if isinstance(freq, int) else list(freq)
    moe = [i for i, is_moe in enumerate(pattern) if is_moe]
    for interval in range(1, p.num_layers + 1):
        rule = {
            "moe_layer_start_index": moe[0],
            "moe_layer_end_index": moe[-1],
            "moe_layer_interval": interval,
        }
        if moe_layer_pattern(dict(rule, num_hidden_layers=p.num_layers)) == pattern:
            return rule
    raise ConfigError(
        f"model.moe_layer_freq={freq!r}: a {architecture} checkpoint places MoE layers from a start to an end "
        "layer at an interval. Fix: use such a pattern or export as another architecture"
    )


def config_dict(p: Any, model_type: str, architecture: str) -> dict[str, Any]:
    """config.json sizes and experts (the caller checks that they read back as the provider)."""
    if not p.num_moe_experts:
        raise ConfigError(
            f"model.num_moe_experts=None: a {architecture} checkpoint has MoE layers. Fix: set the experts"
        )
    heads = p.num_attention_heads
    size = p.moe_ffn_hidden_size
    out = {
        "hidden_size": p.hidden_size,
        "intermediate_size": p.ffn_hidden_size,
        "num_hidden_layers": p.num_layers,
        "num_attention_heads": heads,
        "num_key_value_heads": p.num_query_groups or heads,
        "head_dim": p.kv_channels or p.hidden_size // heads,
        "use_bias": False,
        "moe_num_experts": p.num_moe_experts,
        "moe_k": p.moe_router_topk,
        "moe_intermediate_size": size,
        "moe_num_shared_experts": (p.moe_shared_expert_intermediate_size or 0) // size,
        "router_aux_loss_coef": p.moe_aux_loss_coeff,
        **_layer_rule(p, architecture),
    }
    if p.rotary_percent != 1.0:
        out["partial_rotary_factor"] = p.rotary_percent
    return out
