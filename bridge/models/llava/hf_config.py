"""LLaVA config.json rules: transformers' LlavaConfig defaults of the keys the image side reads (the text
part is read by its own family's rules, from `text_config`)."""

from __future__ import annotations

from typing import Any

CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "llava": dict(
        image_token_index=32000,
        image_seq_length=576,
        projector_hidden_act="gelu",
        vision_feature_select_strategy="default",
        vision_feature_layer=-2,
        multimodal_projector_bias=True,
        tie_word_embeddings=False,
    ),
}
