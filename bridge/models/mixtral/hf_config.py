"""Mixtral config.json rules: MixtralConfig defaults; its experts are num_local_experts of
intermediate_size (no moe_intermediate_size), always renormalised, with router_jitter_noise; every
layer windowed by `sliding_window`."""

from __future__ import annotations

from typing import Any

from bridge.models.hf_translation.common import BASE_DEFAULTS, MOE_DEFAULTS
from bridge.models.hf_translation.write import sliding_window_hf_fields as hf_fields  # noqa: F401

CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "mixtral": dict(
        BASE_DEFAULTS | MOE_DEFAULTS,
        hidden_size=4096,
        num_hidden_layers=32,
        intermediate_size=14336,
        num_attention_heads=32,
        num_key_value_heads=8,
        max_position_embeddings=131072,
        vocab_size=32000,
        rms_norm_eps=1e-05,
        rope_theta=1000000.0,
        sliding_window=None,
        num_local_experts=8,
        num_experts_per_tok=2,
        router_jitter_noise=0.0,
    ),
}


def moe_hf_fields(p: Any) -> dict[str, Any]:
    """Mixtral's names of the expert keys (the generic reading accepts both namings)."""
    return {
        "num_local_experts": p.num_moe_experts,
        "intermediate_size": p.moe_ffn_hidden_size,
        "router_jitter_noise": p.moe_input_jitter_eps or 0.0,
    }
