"""GLM-4 config.json rules: Glm4Config's defaults; RoPE over half of each head unless the config says
otherwise (PARTIAL_ROTARY_DEFAULT); attention_bias (q/k/v biases) is the mapping's, so a config
without it is refused (the checkpoint would lack tensors the model builds)."""

from __future__ import annotations

from typing import Any

from bridge.models.hf_translation.common import BASE_DEFAULTS, get, refuse

# Glm4Config's defaults (THUDM/glm-4-9b-chat-hf's sizes)
CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "glm4": dict(
        BASE_DEFAULTS,
        hidden_size=4096,
        num_hidden_layers=40,
        intermediate_size=13696,
        num_attention_heads=32,
        num_key_value_heads=2,
        head_dim=128,
        max_position_embeddings=131072,
        vocab_size=151552,
        rms_norm_eps=1.5625e-07,
        attention_bias=True,
    ),
}

PARTIAL_ROTARY_DEFAULT = 0.5  # Glm4Config's, when the config names none


def check(cfg: Any) -> None:
    if not get(cfg, "attention_bias", True):
        raise refuse(
            "attention_bias",
            False,
            "the GLM-4 mapping holds q/k/v biases, which a model without them lacks",
            "convert a GLM-4 checkpoint with attention_bias=true (as published)",
        )


# Glm4Config's default padding id, an id of GLM-4's 151552-token vocabulary.
_DEFAULT_PAD_TOKEN_ID = 151329


def hf_fields(p: Any) -> dict[str, Any]:
    """GLM-4's keys: its q/k/v biases and its rotary share (checked to read back); no padding id for a
    vocabulary too small to hold the class default (transformers warns about an id outside it)."""
    out: dict[str, Any] = {"attention_bias": True, "partial_rotary_factor": p.rotary_percent}
    if p.vocab_size is not None and p.vocab_size <= _DEFAULT_PAD_TOKEN_ID:
        out["pad_token_id"] = None
    return out
