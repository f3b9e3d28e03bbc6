"""Qwen2.5-VL presets: the published Qwen/Qwen2.5-VL-{3B,7B,32B,72B}-Instruct config values.

The language model is Qwen2.5 (q/k/v biases, RMSNorm eps 1e-6, RoPE base 1e6) with M-RoPE sections
[16, 24, 24] of its 128-wide heads; the image side is the checkpoint's vision config (a 32-block,
1280-wide window-attention ViT whose merger projects to the language model's width) and token ids.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from bridge.models.qwen2.presets import _qwen2
from bridge.models.vlm_provider import VLMModelProvider


def _vision(out_hidden_size: int) -> dict[str, Any]:
    return dict(
        model_type="qwen2_5_vl_vision", depth=32, hidden_size=1280, intermediate_size=3420, num_heads=16,
        hidden_act="silu", in_channels=3, patch_size=14, spatial_merge_size=2, temporal_patch_size=2,
        tokens_per_second=2, window_size=112, fullatt_block_indexes=[7, 15, 23, 31],
        out_hidden_size=out_hidden_size,
    )  # fmt: skip


def _qwen25_vl(tied: bool = False, **text: Any) -> VLMModelProvider:
    fields = dataclasses.asdict(_qwen2(seq_length=128000, share_embeddings_and_output_weights=tied, **text))
    vlm_config = dict(
        architectures=["Qwen2_5_VLForConditionalGeneration"],
        model_type="qwen2_5_vl",
        image_token_id=151655,
        video_token_id=151656,
        vision_start_token_id=151652,
        vision_end_token_id=151653,
        tie_word_embeddings=tied,
        vision_config=_vision(text["hidden_size"]),
        text_config={"model_type": "qwen2_5_vl_text"},
    )
    fields.update(position_embedding_type="mrope", mrope_section=[16, 24, 24])
    return VLMModelProvider(**fields, vlm_config=vlm_config)


def qwen25_vl_3b() -> VLMModelProvider:
    """Qwen/Qwen2.5-VL-3B-Instruct (tied embeddings)."""
    return _qwen25_vl(
        tied=True, num_layers=36, hidden_size=2048, ffn_hidden_size=11008, num_attention_heads=16,
        num_query_groups=2, vocab_size=151936,
    )  # fmt: skip


def qwen25_vl_7b() -> VLMModelProvider:
    """Qwen/Qwen2.5-VL-7B-Instruct."""
    return _qwen25_vl(
        num_layers=28, hidden_size=3584, ffn_hidden_size=18944, num_attention_heads=28, num_query_groups=4,
        vocab_size=152064,
    )  # fmt: skip


def qwen25_vl_32b() -> VLMModelProvider:
    """Qwen/Qwen2.5-VL-32B-Instruct."""
    return _qwen25_vl(
        num_layers=64, hidden_size=5120, ffn_hidden_size=27648, num_attention_heads=40, num_query_groups=8,
        vocab_size=152064,
    )  # fmt: skip


def qwen25_vl_72b() -> VLMModelProvider:
    """Qwen/Qwen2.5-VL-72B-Instruct."""
    return _qwen25_vl(
        num_layers=80, hidden_size=8192, ffn_hidden_size=29568, num_attention_heads=64, num_query_groups=8,
        vocab_size=152064,
    )  # fmt: skip
