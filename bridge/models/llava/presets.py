"""LLaVA presets: the published llava-hf checkpoints' config values (config.json of each repository).

The language model is its Llama / Vicuna preset's provider with the checkpoint's vocabulary; the image
side is the checkpoint's vision config and projector keys (VLMModelProvider.vlm_config).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from bridge.models.llama.presets import llama2_7b
from bridge.models.vlm_provider import VLMModelProvider

# CLIP ViT-L/14 at 336 px (openai/clip-vit-large-patch14-336), as llava-hf's config.json gives it.
CLIP_VIT_L_336 = dict(
    model_type="clip_vision_model",
    hidden_size=1024,
    intermediate_size=4096,
    num_hidden_layers=24,
    num_attention_heads=16,
    image_size=336,
    patch_size=14,
    projection_dim=768,
    vocab_size=32000,
)


def _llava15(text: dict[str, Any]) -> dict[str, Any]:
    return dict(
        architectures=["LlavaForConditionalGeneration"],
        model_type="llava",
        image_token_index=32000,
        image_seq_length=576,
        pad_token_id=32001,
        projector_hidden_act="gelu",
        vision_feature_layer=-2,
        vision_feature_select_strategy="default",
        multimodal_projector_bias=True,
        tie_word_embeddings=False,
        vocab_size=32064,
        vision_config=dict(CLIP_VIT_L_336),
        text_config=text,
    )


def llava15_7b() -> VLMModelProvider:
    """llava-hf/llava-1.5-7b-hf: Vicuna-7B v1.5 (Llama 2 7B shape) + CLIP ViT-L/14-336, MLP projector."""
    text = dataclasses.asdict(llama2_7b())
    text.update(vocab_size=32064, seq_length=4096, layernorm_epsilon=1e-5)
    return VLMModelProvider(**text, vlm_config=_llava15({"model_type": "llama"}))


def llava15_13b() -> VLMModelProvider:
    """llava-hf/llava-1.5-13b-hf: Vicuna-13B v1.5 (Llama 2 13B shape) + CLIP ViT-L/14-336."""
    text = dataclasses.asdict(llama2_7b())
    text.update(
        vocab_size=32064,
        seq_length=4096,
        layernorm_epsilon=1e-5,
        hidden_size=5120,
        ffn_hidden_size=13824,
        num_layers=40,
        num_attention_heads=40,
        num_query_groups=40,
    )
    return VLMModelProvider(**text, vlm_config=_llava15({"model_type": "llama"}))
