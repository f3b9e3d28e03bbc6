"""Qwen3-VL-MoE's image side: Qwen3-VL's (bridge.models.qwen3_vl.vision), built from transformers'
Qwen3-VL-MoE classes (the same vision model, merger and DeepStack mergers; M-RoPE from its get_rope_index)."""

from __future__ import annotations

from typing import Any

import torch
from transformers import Qwen3VLMoeConfig
from transformers.models.qwen3_vl_moe.modeling_qwen3_vl_moe import Qwen3VLMoeModel, Qwen3VLMoeVisionModel

from bridge.models.qwen3_vl import vision as qwen3_vl

CLASSES = qwen3_vl.Classes(Qwen3VLMoeConfig, Qwen3VLMoeVisionModel, Qwen3VLMoeModel, "qwen3_vl_moe_text")
deepstack_layers = qwen3_vl.deepstack_layers


def build(vlm_config: dict[str, Any], text_hidden_size: int) -> qwen3_vl.Qwen3VLVision:
    return qwen3_vl.Qwen3VLVision(qwen3_vl.hf_config(vlm_config, text_hidden_size, CLASSES), CLASSES)


def position_ids(
    vlm_config: dict[str, Any],
    input_ids: torch.Tensor,
    images: dict[str, torch.Tensor],
    cu_seqlens: torch.Tensor | None = None,
) -> torch.Tensor:
    """Qwen3-VL's interleaved M-RoPE ids (qwen3_vl.vision.position_ids) by Qwen3VLMoeModel.get_rope_index."""
    return qwen3_vl.position_ids(vlm_config, input_ids, images, cu_seqlens, classes=CLASSES)
