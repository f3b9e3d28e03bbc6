"""GLM-4.5 / 4.6 / Air config.json rules (transformers' Glm4Moe, checked against Megatron-Core 0.16.1 and
0.19.2).

- Attention: q/k/v biases when attention_bias (never on o_proj); per-head q/k RMSNorms when use_qk_norm;
  RoPE over the first partial_rotary_factor of each head (rotate-half, Megatron's rotary_percent).
- Experts (n_routed_experts, moe_intermediate_size): sigmoid routing with e_score_correction_bias,
  group-limited top-k, renormalised, times routed_scaling_factor (hf_translation.sigmoid_routing);
  a shared expert of n_shared_experts * moe_intermediate_size in every MoE layer, ungated.
- The first first_k_dense_replace layers are dense MLPs of intermediate_size (moe_layer_freq list).
- Multi-token prediction (num_nextn_predict_layers): Megatron-Core's mtp_num_layers, its layers held as
  model.layers.<num_hidden_layers + k>.* (DeepSeek-V3's layout; transformers builds none).
"""

from __future__ import annotations

import logging
from typing import Any

from bridge.models.hf_translation.common import BASE_DEFAULTS, get, mtp_layer_tensors, refuse
from bridge.models.hf_translation.read import rope_fields as generic_rope_fields
from bridge.models.hf_translation.sigmoid_routing import sigmoid_routing_fields, sigmoid_routing_hf_fields

logger = logging.getLogger(__name__)

OWN_ATTENTION_BIAS = True  # attention_bias switches the q/k/v biases (provider_fields below)

CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "glm4_moe": dict(
        BASE_DEFAULTS,
        vocab_size=151552,
        hidden_size=4096,
        intermediate_size=10944,
        num_hidden_layers=46,
        num_attention_heads=96,
        num_key_value_heads=8,
        max_position_embeddings=131072,
        rms_norm_eps=1e-5,
        attention_bias=False,
        moe_intermediate_size=1408,
        num_experts_per_tok=8,
        n_shared_experts=1,
        n_routed_experts=128,
        routed_scaling_factor=1.0,
        n_group=1,
        topk_group=1,
        first_k_dense_replace=1,
        num_nextn_predict_layers=1,
        norm_topk_prob=True,
        use_qk_norm=False,
    ),
}


# Glm4MoeConfig sets partial_rotary_factor=0.5 (inside rope_parameters) when a config leaves it out.
DEFAULT_PARTIAL_ROTARY_FACTOR = 0.5


def _rope_fields(cfg: Any) -> dict[str, Any]:
    """The generic RoPE translation, with GLM's default partial rotary factor."""
    params = get(cfg, "rope_parameters") or {}
    given = "partial_rotary_factor" in params or get(cfg, "partial_rotary_factor") is not None
    out = generic_rope_fields(cfg)
    if not given:
        out["rotary_percent"] = DEFAULT_PARTIAL_ROTARY_FACTOR
    return out


def translate(cfg: Any, base: dict[str, Any]) -> dict[str, Any]:
    """`base` (the generic sizes, norms, dtype) with RoPE, attention switches and experts: the whole
    translation here, as transformers' attribute_map would otherwise show the generic expert rules a
    num_local_experts that a config.json does not hold."""
    return base | _rope_fields(cfg) | _moe_fields(cfg)


def _moe_fields(cfg: Any) -> dict[str, Any]:
    layers = int(get(cfg, "num_hidden_layers"))
    experts = int(get(cfg, "n_routed_experts") or 0)
    if experts < 1:
        raise refuse(
            "n_routed_experts",
            experts,
            "GLM-4.5's layers past the dense ones are MoE layers",
            "use the published config.json",
        )
    shared = int(get(cfg, "n_shared_experts") or 0)
    if shared < 1:
        raise refuse(
            "n_shared_experts",
            shared,
            "transformers builds a shared expert of n_shared_experts * moe_intermediate_size in every MoE layer",
            "use the published config.json (1)",
        )
    dense = int(get(cfg, "first_k_dense_replace") or 0)
    if not 0 <= dense < layers:
        raise refuse(
            "first_k_dense_replace",
            dense,
            f"must leave at least one MoE layer of the {layers}",
            "use the published value",
        )
    size = int(get(cfg, "moe_intermediate_size"))
    out: dict[str, Any] = dict(
        add_qkv_bias=bool(get(cfg, "attention_bias", False)),
        qk_layernorm=bool(get(cfg, "use_qk_norm", False)),
        moe_ffn_hidden_size=size,
        moe_shared_expert_intermediate_size=shared * size,
        moe_shared_expert_gate=False,
        moe_router_load_balancing_type="seq_aux_loss",
        moe_aux_loss_coeff=0.001,
        moe_token_dispatcher_type="alltoall",
        moe_grouped_gemm=False,
    )
    out |= sigmoid_routing_fields(
        experts,
        int(get(cfg, "num_experts_per_tok") or 0),
        bool(get(cfg, "norm_topk_prob", True)),
        float(get(cfg, "routed_scaling_factor", 1.0)),
        int(get(cfg, "n_group") or 1),
        get(cfg, "topk_group"),
    )
    if dense:
        out["moe_layer_freq"] = [0] * dense + [1] * (layers - dense)
    out["mtp_num_layers"] = int(get(cfg, "num_nextn_predict_layers", 0) or 0) or None
    return out


mtp_hf_tensors = mtp_layer_tensors  # the family hook: MTP layers at model.layers.<num_hidden_layers + k>


def moe_hf_fields(p: Any) -> dict[str, Any]:
    freq = p.moe_layer_freq
    pattern = [int(i % freq == 0) for i in range(p.num_layers)] if isinstance(freq, int) else list(freq)
    dense = pattern.index(1) if 1 in pattern else p.num_layers
    size = p.moe_ffn_hidden_size
    shared = p.moe_shared_expert_intermediate_size or 0
    return sigmoid_routing_hf_fields(p) | {
        "n_routed_experts": p.num_moe_experts,
        "moe_intermediate_size": size,
        # a size that is not a multiple of the expert size reads back differently (refused on export)
        "n_shared_experts": shared // size if size else 0,
        "first_k_dense_replace": dense,
        "num_nextn_predict_layers": p.mtp_num_layers or 0,
    }


def hf_fields(p: Any) -> dict[str, Any]:
    # partial_rotary_factor always: a config.json without it reads as GLM's default 0.5
    return {
        "attention_bias": p.add_qkv_bias,
        "use_qk_norm": p.qk_layernorm,
        "partial_rotary_factor": p.rotary_percent,
    }
