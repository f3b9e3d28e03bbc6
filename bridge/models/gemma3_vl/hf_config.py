"""Gemma 3 vision-language config.json rules: transformers' Gemma3Config defaults of the keys the image
side reads (the text part is read by the gemma3 text family's rules, from `text_config`)."""

from __future__ import annotations

from typing import Any

CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "gemma3": dict(
        mm_tokens_per_image=256,
        boi_token_index=255_999,
        eoi_token_index=256_000,
        image_token_index=262_144,
        tie_word_embeddings=True,
    ),
}
