"""Granite 3 config.json <-> provider fields beyond the generic ones (bridge.models.hf_translation).

attention_multiplier  softmax_scale (the scores' scale itself, not head_dim ** -0.5)
embedding_multiplier  embedding_multiplier (embeddings * m)
residual_multiplier   branch_output_multiplier (attention / MLP output * m before the residual add)
logits_scaling        logits_divisor (logits / s)
A multiplier of 1.0 is off (None) on the provider and written back as 1.0.
"""

from __future__ import annotations

from typing import Any

from bridge.models.hf_translation.common import BASE_DEFAULTS, get

CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "granite": dict(
        BASE_DEFAULTS,
        hidden_size=4096,
        num_hidden_layers=32,
        intermediate_size=11008,
        num_attention_heads=32,
        max_position_embeddings=2048,
        vocab_size=32000,
        attention_bias=False,
        mlp_bias=False,
        embedding_multiplier=1.0,
        logits_scaling=1.0,
        residual_multiplier=1.0,
        attention_multiplier=1.0,
    ),
}

# HF key -> provider field, for the three multipliers that are off at 1.0
_MULTIPLIERS = {
    "embedding_multiplier": "embedding_multiplier",
    "residual_multiplier": "branch_output_multiplier",
    "logits_scaling": "logits_divisor",
}


def provider_fields(cfg: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {"softmax_scale": float(get(cfg, "attention_multiplier"))}
    for key, name in _MULTIPLIERS.items():
        value = float(get(cfg, key))
        fields[name] = None if value == 1.0 else value
    return fields


def hf_fields(p: Any) -> dict[str, Any]:
    """The Granite keys of config.json for provider `p` (hf_config_dict checks they read back)."""
    scale = p.softmax_scale if p.softmax_scale is not None else p.effective_kv_channels() ** -0.5
    out: dict[str, Any] = {"attention_multiplier": scale}
    for key, name in _MULTIPLIERS.items():
        value = getattr(p, name)
        out[key] = 1.0 if value is None else value
    return out
