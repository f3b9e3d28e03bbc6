"""GLM-4.7-Flash config.json rules (transformers' Glm4MoeLite, checked against Megatron-Core 0.16.1 and
0.19.2).

- Attention: DeepSeek-V3's multi-latent attention (transformers' Glm4MoeLiteAttention is
  DeepseekV3Attention), read by the deepseek family's rules (sizes, interleaved default / YaRN RoPE over
  qk_rope_head_dim). Its q_a_layernorm / kv_a_layernorm have a fixed eps of 1e-6 while every other norm
  uses rms_norm_eps (1e-5 as published): the provider's mla_latent_layernorm_epsilon=1e-6.
- Experts: GLM's router (sigmoid with e_score_correction_bias, group-limited, renormalised, times
  routed_scaling_factor; hf_translation.sigmoid_routing), an ungated shared expert of
  n_shared_experts * moe_intermediate_size.
- Dense / MoE layers: mlp_layer_types ("dense" / "sparse"; transformers' default: layer 0 dense). The
  class has no first_k_dense_replace: a config.json key of that name that disagrees is refused.
- Multi-token prediction (num_nextn_predict_layers): Megatron-Core's mtp_num_layers, its layers held as
  DeepSeek-V3's (model.layers.<num_hidden_layers + k>.*: an MLA + MoE decoder layer, enorm, hnorm,
  eh_proj, shared_head), as Megatron-Bridge's GLM-4.7-Flash bridge maps them.
"""

from __future__ import annotations

import logging
from typing import Any

from bridge.errors import ConfigError
from bridge.models.deepseek import hf_config as deepseek
from bridge.models.hf_translation.common import BASE_DEFAULTS, get, mtp_layer_tensors, refuse
from bridge.models.hf_translation.sigmoid_routing import shared_expert_moe_fields, sigmoid_routing_hf_fields

logger = logging.getLogger(__name__)

LATENT_NORM_EPS = deepseek.HF_RMS_EPS  # Glm4MoeLiteRMSNorm's default, used by q_a / kv_a layernorms

CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "glm4_moe_lite": dict(
        BASE_DEFAULTS,
        vocab_size=154880,
        hidden_size=2048,
        intermediate_size=10240,
        moe_intermediate_size=1536,
        num_hidden_layers=47,
        num_attention_heads=20,
        num_key_value_heads=20,
        n_shared_experts=1,
        n_routed_experts=64,
        routed_scaling_factor=1.8,
        kv_lora_rank=512,
        q_lora_rank=768,
        qk_rope_head_dim=64,
        v_head_dim=256,
        qk_nope_head_dim=192,
        n_group=1,
        topk_group=1,
        num_experts_per_tok=4,
        norm_topk_prob=True,
        max_position_embeddings=202752,
        rms_norm_eps=1e-5,
        rope_interleave=True,
        attention_bias=False,
    ),
}


def _moe_layer_freq(cfg: Any) -> list[int]:
    layers = int(get(cfg, "num_hidden_layers"))
    types = get(cfg, "mlp_layer_types")
    types = list(types) if types else ["dense"] + ["sparse"] * (layers - 1)  # Glm4MoeLiteConfig's default
    if len(types) != layers or set(types) - {"dense", "sparse"}:
        raise refuse(
            "mlp_layer_types",
            types,
            f"one 'dense' or 'sparse' per layer ({layers})",
            "use the published config.json (or leave it out: layer 0 dense)",
        )
    pattern = [int(t == "sparse") for t in types]
    first_dense = get(cfg, "first_k_dense_replace")
    if first_dense is not None:
        k = int(first_dense)
        if pattern != [0] * k + [1] * (layers - k):
            raise refuse(
                "first_k_dense_replace",
                first_dense,
                f"transformers' Glm4MoeLite ignores it and builds the MLPs of mlp_layer_types ({types}), which "
                "disagree with it",
                "drop first_k_dense_replace or give mlp_layer_types that agree",
            )
    if 1 not in pattern:
        raise refuse(
            "mlp_layer_types", types, "GLM-4.7-Flash has MoE layers", "use the published config.json"
        )
    return pattern


def _moe_fields(cfg: Any) -> dict[str, Any]:
    return shared_expert_moe_fields(
        cfg,
        experts_key="n_routed_experts",
        shared_key="n_shared_experts",
        aux_loss_coeff=0.001,
        layer_freq=_moe_layer_freq(cfg),
    )


def translate(cfg: Any, base: dict[str, Any]) -> dict[str, Any]:
    """`base` (the generic sizes, norms, dtype) with multi-latent attention, its RoPE and the experts."""
    fields = deepseek.mla_fields(cfg, base)
    deepseek.check_plain(cfg, latent_eps_fixed=False)
    fields |= deepseek.rope_fields(cfg, has_rope_interleave=True)
    fields["mla_latent_layernorm_epsilon"] = LATENT_NORM_EPS
    fields |= _moe_fields(cfg)
    fields["mtp_num_layers"] = int(get(cfg, "num_nextn_predict_layers", 0) or 0) or None
    return fields


mtp_hf_tensors = mtp_layer_tensors  # the family hook: MTP layers at model.layers.<num_hidden_layers + k>


def config_dict(p: Any, model_type: str, architecture: str) -> dict[str, Any]:
    """config.json for a GLM-4.7-Flash provider (the caller checks that it reads back as the provider)."""
    if not p.num_moe_experts:
        raise ConfigError(
            f"model.num_moe_experts=None: a {architecture} checkpoint has MoE layers. Fix: set the experts"
        )
    freq = p.moe_layer_freq
    pattern = [int(i % freq == 0) for i in range(p.num_layers)] if isinstance(freq, int) else list(freq)
    size = p.moe_ffn_hidden_size
    out: dict[str, Any] = {
        **deepseek.mla_hf_fields(p),
        "n_routed_experts": p.num_moe_experts,
        "moe_intermediate_size": size,
        "n_shared_experts": (p.moe_shared_expert_intermediate_size or 0) // size if size else 0,
        "mlp_layer_types": ["sparse" if moe else "dense" for moe in pattern],
        "rope_interleave": True,
        "num_nextn_predict_layers": p.mtp_num_layers or 0,
    } | sigmoid_routing_hf_fields(p)
    if p.rope_type == "yarn":
        out["rope_scaling"] = {
            "type": "yarn",
            "factor": p.rotary_scaling_factor,
            "original_max_position_embeddings": p.original_max_position_embeddings,
            "beta_fast": p.beta_fast,
            "beta_slow": p.beta_slow,
            "mscale": p.mscale,
            "mscale_all_dim": p.mscale_all_dim,
        }
    return out
