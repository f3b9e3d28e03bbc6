"""Qwen3-VL-MoE presets: Qwen/Qwen3-VL-30B-A3B-Instruct and Qwen/Qwen3-VL-235B-A22B-Instruct. Sources: their
language models are the shapes of Qwen3-30B-A3B and Qwen3-235B-A22B (bridge.models.qwen3_moe's presets:
layers, widths, heads, 128 experts with 8 per token) with Qwen3-VL's RoPE base 5e6, 262,144 positions and
interleaved M-RoPE sections [24, 20, 20] (as bridge.models.qwen3_vl's 8B preset records them); the image
side is Qwen3-VL's 27-block, 1152-wide tower whose merger projects to the language model's width. The
parameter counts are checked against transformers' meta-device model of these configs."""

from __future__ import annotations

import dataclasses

from bridge.models.gpt_provider import GPTModelProvider
from bridge.models.qwen3_moe.presets import qwen3_30b_a3b, qwen3_235b_a22b
from bridge.models.qwen3_vl.presets import _vision
from bridge.models.vlm_provider import VLMModelProvider


def _qwen3_vl_moe(text: GPTModelProvider) -> VLMModelProvider:
    fields = dataclasses.asdict(text)
    fields.update(
        seq_length=262144, rotary_base=5000000, share_embeddings_and_output_weights=False,
        position_embedding_type="mrope", mrope_section=[24, 20, 20], mrope_interleaved=True,
    )  # fmt: skip
    vlm_config = dict(
        architectures=["Qwen3VLMoeForConditionalGeneration"],
        model_type="qwen3_vl_moe",
        image_token_id=151655,
        video_token_id=151656,
        vision_start_token_id=151652,
        vision_end_token_id=151653,
        tie_word_embeddings=False,
        vision_config=_vision(text.hidden_size, model_type="qwen3_vl_moe_vision"),
        text_config={"model_type": "qwen3_vl_moe_text"},
    )
    return VLMModelProvider(**fields, vlm_config=vlm_config)


def qwen3_vl_30b_a3b() -> VLMModelProvider:
    """Qwen/Qwen3-VL-30B-A3B-Instruct."""
    return _qwen3_vl_moe(qwen3_30b_a3b())


def qwen3_vl_235b_a22b() -> VLMModelProvider:
    """Qwen/Qwen3-VL-235B-A22B-Instruct."""
    return _qwen3_vl_moe(qwen3_235b_a22b())
