"""Gemma 3 vision-language presets: the published google/gemma-3-{4b,12b,27b}-it checkpoints' config values
(config.json of each repository; the -pt checkpoints have the same architecture).

The language model is the gemma3 text preset of the same size (its text_config); the image side is the
checkpoint's SigLIP-So400m vision config at 896 px and its projector / image-token keys
(VLMModelProvider.vlm_config).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from bridge.models.gemma3.presets import gemma3_4b, gemma3_12b, gemma3_27b
from bridge.models.gpt_provider import GPTModelProvider
from bridge.models.vlm_provider import VLMModelProvider

# SigLIP So400m/14 at 896 px without its pooling head: 64 x 64 patches average-pooled to 16 x 16 = 256.
SIGLIP_SO400M_896 = dict(
    model_type="siglip_vision_model",
    hidden_size=1152,
    intermediate_size=4304,
    num_hidden_layers=27,
    num_attention_heads=16,
    image_size=896,
    patch_size=14,
    vision_use_head=False,
)


def _gemma3_vl(text: GPTModelProvider) -> VLMModelProvider:
    vlm_config: dict[str, Any] = dict(
        architectures=["Gemma3ForConditionalGeneration"],
        model_type="gemma3",
        boi_token_index=255_999,
        eoi_token_index=256_000,
        image_token_index=262_144,
        mm_tokens_per_image=256,
        tie_word_embeddings=True,
        vision_config=dict(SIGLIP_SO400M_896),
        text_config={"model_type": "gemma3_text"},
    )
    return VLMModelProvider(**dataclasses.asdict(text), vlm_config=vlm_config)


def gemma3_4b_it() -> VLMModelProvider:
    """google/gemma-3-4b-it: the Gemma 3 4B language model + SigLIP So400m at 896 px."""
    return _gemma3_vl(gemma3_4b())


def gemma3_12b_it() -> VLMModelProvider:
    """google/gemma-3-12b-it: the Gemma 3 12B language model + SigLIP So400m at 896 px."""
    return _gemma3_vl(gemma3_12b())


def gemma3_27b_it() -> VLMModelProvider:
    """google/gemma-3-27b-it: the Gemma 3 27B language model + SigLIP So400m at 896 px."""
    return _gemma3_vl(gemma3_27b())
