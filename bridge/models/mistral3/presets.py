"""Mistral 3 vision-language presets: the published checkpoints' config values.

Mistral Small 3.1 (mistralai/Mistral-Small-3.1-24B-Instruct-2503, transformers' Mistral3Config defaults,
which its docstring names as that checkpoint's): a Mistral language model (40 layers, 5120 wide, RoPE base
1e9) and a 24-layer Pixtral tower at up to 1540 px whose 14 px patches the projector merges 2 x 2.

Ministral 3 (mistralai/Ministral-3-{3B,8B,14B}-{Base,Instruct,Reasoning}-2512; the presets are named after
the Instruct checkpoints Megatron-Bridge's recipes start from, the text family having the plain size names):
the language model is the ministral3 text preset of the same size (its sources are listed there), the image
side Mistral Small 3.1's. Sources: the Ministral 3 paper (arXiv 2601.08584) takes its vision encoder frozen
from Mistral Small 3.1, and the model cards and Megatron-Bridge's docs give it as a 0.4B encoder (the
24-layer tower above holds 0.41B); the image token 10 is the 14B's config.json (as a public repository's
README lists it) and Megatron-Bridge's Ministral3ModelProvider default; the 3B ties its embeddings
(Megatron-Bridge's Ministral3ModelProvider3B, the paper), the 8B and 14B do not. The projector keys
(gelu, no bias, 2 x 2 patch merge) and the tower's image size are Mistral Small 3.1's, transformers'
Mistral3Config defaults: no copy of a Ministral 3 vision_config was found to state them separately.
"""

from __future__ import annotations

import dataclasses

from bridge.models.gpt_provider import GPTModelProvider
from bridge.models.llama.presets import llama_style_provider
from bridge.models.ministral3.presets import ministral3_3b, ministral3_8b, ministral3_14b
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


def _mistral3(text: GPTModelProvider, text_model_type: str) -> VLMModelProvider:
    vlm_config = dict(
        architectures=["Mistral3ForConditionalGeneration"],
        model_type="mistral3",
        tie_word_embeddings=text.share_embeddings_and_output_weights,
        image_token_index=10,
        projector_hidden_act="gelu",
        vision_feature_layer=-1,
        multimodal_projector_bias=False,
        spatial_merge_size=2,
        vision_config=dict(PIXTRAL_24_LAYERS),
        text_config={"model_type": text_model_type, "rms_norm_eps": text.layernorm_epsilon},
    )
    return VLMModelProvider(**dataclasses.asdict(text), vlm_config=vlm_config)


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
    return _mistral3(text, "mistral")


def ministral3_3b_instruct() -> VLMModelProvider:
    """mistralai/Ministral-3-3B-Instruct-2512 (Base and Reasoning: the same architecture)."""
    return _mistral3(ministral3_3b(), "ministral3")


def ministral3_8b_instruct() -> VLMModelProvider:
    """mistralai/Ministral-3-8B-Instruct-2512 (Base and Reasoning: the same architecture)."""
    return _mistral3(ministral3_8b(), "ministral3")


def ministral3_14b_instruct() -> VLMModelProvider:
    """mistralai/Ministral-3-14B-Instruct-2512 (Base and Reasoning: the same architecture)."""
    return _mistral3(ministral3_14b(), "ministral3")
