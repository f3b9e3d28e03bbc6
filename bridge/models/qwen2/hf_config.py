"""Qwen2 config.json rules: Qwen2Config defaults; its window acts only with use_sliding_window
(refused when set), which config.json states as false."""

from __future__ import annotations

from typing import Any

from bridge.models.hf_translation.common import BASE_DEFAULTS

CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "qwen2": dict(
        BASE_DEFAULTS,
        hidden_size=4096,
        num_hidden_layers=32,
        intermediate_size=22016,
        num_attention_heads=32,
        max_position_embeddings=32768,
        vocab_size=151936,
        use_sliding_window=False,
        sliding_window=None,
    ),
}


def hf_fields(p: Any) -> dict[str, Any]:
    return {"use_sliding_window": False}
