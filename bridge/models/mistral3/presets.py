"""Mistral 3 vision-language presets: the published checkpoints' config values.

Mistral Small 3.1 (mistralai/Mistral-Small-3.1-24B-Instruct-2503, transformers' Mistral3Config defaults,
which its docstring names as that checkpoint's): a Mistral language model (40 layers, 5120 wide, RoPE base
1e9) and a 24-layer Pixtral tower at up to 1540 px whose 14 px patches the projector merges 2 x 2.
"""

from __future__ import annotations

import dataclasses

from bridge.models.llama.presets import llama_style_provider
from bridge.models.vlm_provider import VLMModelProvider

PIXTRAL_24_LAYERS = dict(
    model_type="pixtral",
    hidden_size=1024,
    intermediate_size=4096,
    num_hidden_layers=24,
    num_attention_heads=16,
    num_channels=3,
    image_size=1540,
    patch_size=14,
    hidden_act="gelu",
    head_dim=64,
    rope_parameters={"rope_theta": 10000.0, "rope_type": "axial"},
)


def mistral_small_31_24b() -> VLMModelProvider:
    """mistralai/Mistral-Small-3.1-24B-Instruct-2503."""
    text = llama_style_provider(
        num_layers=40,
        hidden_size=5120,
        ffn_hidden_size=32768,
        num_attention_heads=32,
        num_query_groups=8,
        kv_channels=128,
        vocab_size=131072,
        seq_length=131072,
        layernorm_epsilon=1e-5,
        rotary_base=1_000_000_000,
    )
    vlm_config = dict(
        architectures=["Mistral3ForConditionalGeneration"],
        model_type="mistral3",
        tie_word_embeddings=False,
        image_token_index=10,
        projector_hidden_act="gelu",
        vision_feature_layer=-1,
        multimodal_projector_bias=False,
        spatial_merge_size=2,
        vision_config=dict(PIXTRAL_24_LAYERS),
        text_config={"model_type": "mistral", "rms_norm_eps": 1e-5},
    )
    return VLMModelProvider(**dataclasses.asdict(text), vlm_config=vlm_config)
