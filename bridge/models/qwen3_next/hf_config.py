"""Qwen3-Next config.json rules: Qwen3NextConfig defaults; Gated DeltaNet layers by layer_types and the
linear_* sizes (bridge.models.hf_translation.linear_attention); RoPE over a quarter of each head
(partial_rotary_factor 0.25, the class default); Qwen2-MoE's gated shared expert. The multi-token
prediction tensors of the published checkpoints (`mtp.*`) do not convert yet: the unmapped-tensor error
(bridge.conversion.unmapped), or left out and listed with omit_unmapped."""

from __future__ import annotations

from typing import Any

from bridge.models.hf_translation.common import BASE_DEFAULTS, MOE_DEFAULTS, get, refuse
from bridge.models.hf_translation.linear_attention import gated_delta_net_fields, gated_delta_net_hf_fields
from bridge.models.qwen2_moe.hf_config import provider_fields as shared_expert_fields

PARTIAL_ROTARY_DEFAULT = 0.25

CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "qwen3_next": dict(
        BASE_DEFAULTS | MOE_DEFAULTS,
        vocab_size=151936,
        hidden_size=2048,
        intermediate_size=5632,
        num_hidden_layers=48,
        num_attention_heads=16,
        num_key_value_heads=2,
        max_position_embeddings=32768,
        head_dim=256,
        attention_bias=False,
        linear_conv_kernel_dim=4,
        linear_key_head_dim=128,
        linear_value_head_dim=128,
        linear_num_key_heads=16,
        linear_num_value_heads=32,
        decoder_sparse_step=1,
        moe_intermediate_size=512,
        shared_expert_intermediate_size=512,
        num_experts_per_tok=10,
        num_experts=512,
        norm_topk_prob=True,
        mlp_only_layers=[],
    ),
}


def check(cfg: Any) -> None:
    if not get(cfg, "num_experts"):
        raise refuse(
            "num_experts",
            get(cfg, "num_experts"),
            "the qwen3_next mapping converts its MoE blocks (every published Qwen3-Next is a MoE)",
            "use the published config.json",
        )


def provider_fields(cfg: Any) -> dict[str, Any]:
    return gated_delta_net_fields(cfg) | shared_expert_fields(cfg)


def hf_fields(p: Any) -> dict[str, Any]:
    return gated_delta_net_hf_fields(p)
