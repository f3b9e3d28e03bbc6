"""Qwen3.5 text / Qwen3.5-MoE text config.json rules: Qwen3_5TextConfig / Qwen3_5MoeTextConfig defaults;
Gated DeltaNet layers by layer_types and the linear_* sizes (bridge.models.hf_translation.linear_attention);
RoPE over a quarter of each head (partial_rotary_factor 0.25). Text positions only: the multimodal RoPE
sections (mrope_section) rotate text tokens as plain RoPE, since a text token's three position ids are
equal. The MoE class has every layer sparse (no decoder_sparse_step / mlp_only_layers), always
renormalises its top-k weights, and has a gated shared expert; it names no dense intermediate_size."""

from __future__ import annotations

from typing import Any

from bridge.models.hf_translation.common import BASE_DEFAULTS, MOE_DEFAULTS, get, refuse
from bridge.models.hf_translation.linear_attention import gated_delta_net_fields, gated_delta_net_hf_fields
from bridge.models.qwen2_moe.hf_config import provider_fields as shared_expert_fields

PARTIAL_ROTARY_DEFAULT = 0.25

_COMMON = dict(
    BASE_DEFAULTS,
    num_attention_heads=16,
    max_position_embeddings=32768,
    head_dim=256,
    attention_bias=False,
    linear_conv_kernel_dim=4,
    linear_key_head_dim=128,
    linear_value_head_dim=128,
    linear_num_key_heads=16,
    linear_num_value_heads=32,
    vocab_size=248320,
)
CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "qwen3_5_text": dict(
        _COMMON,
        hidden_size=4096,
        intermediate_size=12288,
        num_hidden_layers=32,
        num_key_value_heads=4,
    ),
    "qwen3_5_moe_text": dict(
        _COMMON | MOE_DEFAULTS,
        hidden_size=2048,
        num_hidden_layers=40,
        num_key_value_heads=2,
        moe_intermediate_size=512,
        shared_expert_intermediate_size=512,
        num_experts_per_tok=8,
        num_experts=256,
    ),
}


def check(cfg: Any) -> None:
    for key in ("decoder_sparse_step", "mlp_only_layers", "norm_topk_prob"):
        if get(cfg, "num_experts") and get(cfg, key) not in (None, 1, [], True):
            raise refuse(
                key,
                get(cfg, key),
                "Qwen3.5-MoE's class makes every layer sparse and renormalises the top-k weights; "
                "transformers ignores this key",
                f"remove {key} from config.json",
            )


def provider_fields(cfg: Any) -> dict[str, Any]:
    out = gated_delta_net_fields(cfg)
    if get(cfg, "num_experts"):
        out |= shared_expert_fields(cfg)
    return out


def hf_fields(p: Any) -> dict[str, Any]:
    return gated_delta_net_hf_fields(p)


def moe_hf_fields(p: Any) -> dict[str, Any]:
    """Qwen3_5MoeTextConfig's expert keys (no decoder_sparse_step, mlp_only_layers or norm_topk_prob)."""
    return {
        "num_experts": p.num_moe_experts,
        "moe_intermediate_size": p.moe_ffn_hidden_size,
        "shared_expert_intermediate_size": p.moe_shared_expert_intermediate_size,
    }
