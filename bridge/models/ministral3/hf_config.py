"""Ministral 3 config.json rules: Ministral3Config defaults, its RoPE and Llama 4's query scale.

rope_parameters (one dict; transformers' default: yarn, rope_theta 1e6, factor 16 over 16384 original
positions, beta_fast 32, beta_slow 1, mscale = mscale_all_dim = 1, llama_4_scaling_beta 0.1): default or
YaRN RoPE (the provider's yarn_rope_* fields, bridge.models.yarn_rope; the attention factor from mscale /
mscale_all_dim as transformers infers it), and llama_4_scaling_beta -> llama4_attn_scale_beta with
original_max_position_embeddings (the query at position p times 1 + beta * log(1 + floor(p / original)),
transformers' get_llama_4_attn_scale). sliding_window (None by default) windows every layer.
"""

from __future__ import annotations

from typing import Any

from bridge.models.hf_translation.common import BASE_DEFAULTS, get, refuse
from bridge.models.hf_translation.write import sliding_window_hf_fields, yarn_rope_parameters
from bridge.models.hf_translation.yarn import yarn_rope_fields

YARN_DEFAULTS: dict[str, Any] = dict(
    rope_type="yarn",
    rope_theta=1_000_000.0,
    factor=16.0,
    original_max_position_embeddings=16384,
    beta_fast=32.0,
    beta_slow=1.0,
    mscale=1.0,
    mscale_all_dim=1.0,
    llama_4_scaling_beta=0.1,
)

CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "ministral3": dict(
        {k: v for k, v in BASE_DEFAULTS.items() if k != "rope_theta"},
        vocab_size=131072,
        hidden_size=4096,
        intermediate_size=14336,
        num_hidden_layers=34,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=128,
        max_position_embeddings=262144,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        sliding_window=None,
        # as transformers' class default writes it (its legacy `type` key and max positions beside)
        rope_parameters=dict(YARN_DEFAULTS, type="yarn", max_position_embeddings=262144),
    ),
}


def rope_fields(cfg: Any) -> dict[str, Any]:
    """Replaces the generic RoPE translation: default or YaRN, and the Llama 4 query scale."""
    params = dict(get(cfg, "rope_parameters") or YARN_DEFAULTS)
    rope_type = params.get("rope_type", params.get("type", "default")) or "default"
    if rope_type not in ("default", "yarn"):
        raise refuse(
            "rope_parameters.rope_type",
            rope_type,
            "Ministral 3 is built with default or yarn RoPE",
            "convert a model with those (the published Ministral 3 configs: yarn)",
        )
    if float(params.get("partial_rotary_factor", 1.0)) != 1.0:
        raise refuse(
            "rope_parameters.partial_rotary_factor",
            params["partial_rotary_factor"],
            "Ministral 3's RoPE rotates whole heads",
            "convert a model without partial_rotary_factor",
        )
    out: dict[str, Any] = dict(
        position_embedding_type="rope",
        rotary_percent=1.0,
        rotary_base=params.get("rope_theta", 1_000_000.0),
        yarn_rope_factor=None,
        llama4_attn_scale_beta=None,
    )
    original = params.get("original_max_position_embeddings")
    if rope_type == "yarn":
        out.update(yarn_rope_fields(params, cfg))
    beta = params.get("llama_4_scaling_beta")
    if beta:
        if original is None:
            raise refuse(
                "rope_parameters.llama_4_scaling_beta",
                beta,
                "Llama 4's query scale counts positions in units of original_max_position_embeddings",
                "set rope_parameters.original_max_position_embeddings",
            )
        out.update(
            llama4_attn_scale_beta=float(beta),
            llama4_attn_scale_original_max_position_embeddings=int(original),
        )
    return out


def hf_fields(p: Any) -> dict[str, Any]:
    """The Ministral 3 keys of config.json for provider `p` (hf_config_dict checks they read back)."""
    rope = yarn_rope_parameters(p)
    if p.llama4_attn_scale_beta:
        rope["llama_4_scaling_beta"] = p.llama4_attn_scale_beta
        rope["original_max_position_embeddings"] = p.llama4_attn_scale_original_max_position_embeddings
    return {**sliding_window_hf_fields(p), "rope_parameters": rope}
