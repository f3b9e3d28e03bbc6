"""Qwen2.5-VL's image side: transformers' Qwen2.5-VL vision transformer (window attention, 2D RoPE; its
`merger` is the projector to the language model's width), and the M-RoPE position ids transformers'
Qwen2_5_VLModel.get_rope_index computes from the tokens and the images' grids.

Children are named as in the Hugging Face checkpoint (`visual`), so the conversion rows copy them by
name (bridge/models/qwen25_vl/mapping.py).
"""

from __future__ import annotations

import functools
import json
from typing import Any

import torch
from transformers import Qwen2_5_VLConfig
from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import (
    Qwen2_5_VisionTransformerPretrainedModel,
    Qwen2_5_VLModel,
)

from bridge.models.mrope_positions import RopeIndex, image_positions


def hf_config(vlm_config: dict[str, Any], text_hidden_size: int | None = None) -> Qwen2_5_VLConfig:
    """transformers' Qwen2_5_VLConfig of the image side (of the text part only the model type matters)."""
    values = {k: v for k, v in vlm_config.items() if k not in ("text_config", "architectures")}
    text = {"model_type": "qwen2_5_vl_text"}
    if text_hidden_size is not None:
        text["hidden_size"] = text_hidden_size
    return Qwen2_5_VLConfig(**values, text_config=text)


class Qwen25VLVision(torch.nn.Module):
    """The vision transformer of Qwen2_5_VLModel, and its get_image_features."""

    def __init__(self, config: Qwen2_5_VLConfig) -> None:
        super().__init__()
        self.visual = Qwen2_5_VisionTransformerPretrainedModel._from_config(config.vision_config)
        self.image_token_id = config.image_token_id
        self.video_token_id = config.video_token_id

    def encoder(self) -> torch.nn.Module:
        """The patch embedding and the blocks (the rotary embedding holds no parameters)."""
        return torch.nn.ModuleList([self.visual.patch_embed, self.visual.blocks])

    def projector(self) -> torch.nn.Module:
        return self.visual.merger

    def image_features(self, pixel_values: torch.Tensor, image_grid_thw: torch.Tensor) -> torch.Tensor:
        """[image tokens of all images, text hidden]: Qwen2_5_VLModel.get_image_features, concatenated."""
        dtype = self.visual.merger.mlp[0].weight.dtype
        return self.visual(pixel_values.to(dtype), grid_thw=image_grid_thw).pooler_output

    def video_features(
        self,
        pixel_values_videos: torch.Tensor,
        video_grid_thw: torch.Tensor,
        second_per_grid_ts: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """[video tokens of all videos, text hidden]: Qwen2_5_VLModel.get_video_features (the same vision
        transformer over the frames' patches); second_per_grid_ts only spaces the M-RoPE positions."""
        return self.image_features(pixel_values_videos, video_grid_thw)


def build(vlm_config: dict[str, Any], text_hidden_size: int) -> Qwen25VLVision:
    return Qwen25VLVision(hf_config(vlm_config, text_hidden_size))


@functools.lru_cache(maxsize=8)
def _rope_index(vlm_json: str) -> RopeIndex:
    return RopeIndex(Qwen2_5_VLModel, hf_config(json.loads(vlm_json)))


def position_ids(
    vlm_config: dict[str, Any],
    input_ids: torch.Tensor,
    images: dict[str, torch.Tensor],
    cu_seqlens: torch.Tensor | None = None,
) -> torch.Tensor:
    """[3, b, s] M-RoPE position ids as Qwen2_5_VLForConditionalGeneration computes them with no padding
    mask (bridge pads on the right and attends causally, so the padding's positions reach no kept row):
    transformers' get_rope_index over the image tokens' grids; a batch without images counts 0, 1, 2, ...
    on all three axes (as transformers, whatever its tokens). Video tokens beside images are refused (the
    data carries no video grids). `cu_seqlens`: a packed row's segments, each counted on its own."""
    return image_positions(
        _rope_index(json.dumps(vlm_config, sort_keys=True)), input_ids, images, "Qwen2.5-VL", cu_seqlens
    )
