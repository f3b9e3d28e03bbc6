"""Qwen3 config.json rules: Qwen3Config defaults; use_sliding_window written as false (as Qwen2)."""

from __future__ import annotations

from typing import Any

from bridge.models.hf_translation.common import BASE_DEFAULTS
from bridge.models.qwen2.hf_config import hf_fields  # noqa: F401  (use_sliding_window=false)

CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "qwen3": dict(
        BASE_DEFAULTS,
        hidden_size=4096,
        num_hidden_layers=32,
        intermediate_size=22016,
        num_attention_heads=32,
        head_dim=128,
        max_position_embeddings=32768,
        vocab_size=151936,
        use_sliding_window=False,
        sliding_window=None,
        attention_bias=False,
    ),
}
