"""Llama config.json rules: transformers' LlamaConfig defaults; the generic translation does the rest."""

from __future__ import annotations

from typing import Any

from bridge.models.hf_translation.common import BASE_DEFAULTS

CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "llama": dict(
        BASE_DEFAULTS,
        hidden_size=4096,
        num_hidden_layers=32,
        intermediate_size=11008,
        num_attention_heads=32,
        max_position_embeddings=2048,
        vocab_size=32000,
        mlp_bias=False,
        attention_bias=False,
    ),
}
