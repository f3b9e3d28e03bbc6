"""Mistral 3 vision-language config.json rules: transformers' Mistral3Config defaults of the keys the image
side reads (the text part is read by its own family's rules, from `text_config`)."""

from __future__ import annotations

from typing import Any

CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "mistral3": dict(
        image_token_index=10,
        projector_hidden_act="gelu",
        vision_feature_layer=-1,
        multimodal_projector_bias=False,
        spatial_merge_size=2,
        tie_word_embeddings=True,
    ),
}
