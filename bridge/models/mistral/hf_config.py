"""Mistral config.json rules: MistralConfig defaults; every layer windowed by `sliding_window`."""

from __future__ import annotations

from typing import Any

from bridge.models.hf_translation.common import BASE_DEFAULTS
from bridge.models.hf_translation.write import sliding_window_hf_fields as hf_fields  # noqa: F401

CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "mistral": dict(
        BASE_DEFAULTS,
        hidden_size=4096,
        num_hidden_layers=32,
        intermediate_size=14336,
        num_attention_heads=32,
        num_key_value_heads=8,
        max_position_embeddings=131072,
        vocab_size=32000,
        sliding_window=4096,
    ),
}
