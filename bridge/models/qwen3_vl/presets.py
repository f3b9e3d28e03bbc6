"""Qwen3-VL presets: Qwen/Qwen3-VL-8B-Instruct. Sources: its token ids, M-RoPE sections and RoPE base as
Megatron-Bridge's Qwen3-VL provider records them from that checkpoint's config.json; the language model is
Qwen3-8B's shape (bridge.models.qwen3's preset); the vision side transformers' Qwen3VLVisionConfig
defaults. The parameter count is checked against transformers' meta-device model of this config.

The language model is Qwen3 (q/k RMSNorms, eps 1e-6) with RoPE base 5e6 and interleaved M-RoPE sections
[24, 20, 20] of its 128-wide heads; the image side is a 27-block, 1152-wide ViT (transformers'
Qwen3VLVisionConfig defaults) whose merger projects to the language model's width and whose blocks 8, 16
and 24 feed DeepStack.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from bridge.models.qwen3.presets import _qwen3
from bridge.models.vlm_provider import VLMModelProvider


def _vision(out_hidden_size: int, **values: Any) -> dict[str, Any]:
    return dict(
        model_type="qwen3_vl_vision", depth=27, hidden_size=1152, intermediate_size=4304, num_heads=16,
        hidden_act="gelu_pytorch_tanh", in_channels=3, patch_size=16, spatial_merge_size=2,
        temporal_patch_size=2, num_position_embeddings=2304, deepstack_visual_indexes=[8, 16, 24],
        out_hidden_size=out_hidden_size,
    ) | values  # fmt: skip


def _qwen3_vl(tied: bool = False, **text: Any) -> VLMModelProvider:
    fields = dataclasses.asdict(
        _qwen3(seq_length=262144, rotary_base=5000000, share_embeddings_and_output_weights=tied, **text)
    )
    vlm_config = dict(
        architectures=["Qwen3VLForConditionalGeneration"],
        model_type="qwen3_vl",
        image_token_id=151655,
        video_token_id=151656,
        vision_start_token_id=151652,
        vision_end_token_id=151653,
        tie_word_embeddings=tied,
        vision_config=_vision(text["hidden_size"]),
        text_config={"model_type": "qwen3_vl_text"},
    )
    fields.update(position_embedding_type="mrope", mrope_section=[24, 20, 20], mrope_interleaved=True)
    return VLMModelProvider(**fields, vlm_config=vlm_config)


def qwen3_vl_8b() -> VLMModelProvider:
    """Qwen/Qwen3-VL-8B-Instruct."""
    return _qwen3_vl(
        num_layers=36, hidden_size=4096, ffn_hidden_size=12288, num_attention_heads=32, num_query_groups=8,
    )  # fmt: skip
