"""Qwen3-MoE config.json rules: Qwen3MoeConfig defaults; use_sliding_window written as false. Its
experts (num_experts, decoder_sparse_step, mlp_only_layers) are the generic expert keys."""

from __future__ import annotations

from typing import Any

from bridge.models.hf_translation.common import BASE_DEFAULTS, MOE_DEFAULTS
from bridge.models.qwen2.hf_config import hf_fields  # noqa: F401  (use_sliding_window=false)

CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "qwen3_moe": dict(
        BASE_DEFAULTS | MOE_DEFAULTS,
        hidden_size=2048,
        num_hidden_layers=24,
        intermediate_size=6144,
        num_attention_heads=32,
        num_key_value_heads=4,
        max_position_embeddings=32768,
        vocab_size=151936,
        use_sliding_window=False,
        sliding_window=None,
        attention_bias=False,
        num_experts=128,
        num_experts_per_tok=8,
        moe_intermediate_size=768,
        norm_topk_prob=False,
        decoder_sparse_step=1,
        mlp_only_layers=[],
    ),
}
