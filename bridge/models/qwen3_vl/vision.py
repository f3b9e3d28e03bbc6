"""Qwen3-VL's image side: transformers' Qwen3-VL vision model (learned position embeddings interpolated
to the grid, 2D RoPE; `merger` projects to the language model's width; DeepStack: `deepstack_merger_list`
projects the outputs of the blocks `deepstack_visual_indexes`), and the interleaved M-RoPE position ids
transformers' Qwen3VLModel.get_rope_index computes from the tokens and the images' grids.

The DeepStack features are returned beside the image features (`deepstack_layers(vlm_config)` of them), and
bridge.models.vlm_model adds feature i to the image tokens' hidden states after decoder layer i, as
transformers' Qwen3VLTextModel does. Children are named as in the checkpoint (`visual`).
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any

import torch
from transformers import Qwen3VLConfig
from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLModel, Qwen3VLVisionModel

from bridge.models.mrope_positions import RopeIndex, image_positions


@dataclass(frozen=True)
class Classes:
    """transformers' classes of a Qwen3-VL model kind (Qwen3-VL-MoE has its own, of the same image side)."""

    config: type
    vision_model: type
    model: type  # its get_rope_index
    text_model_type: str


QWEN3_VL = Classes(Qwen3VLConfig, Qwen3VLVisionModel, Qwen3VLModel, "qwen3_vl_text")


def hf_config(vlm_config: dict[str, Any], text_hidden_size: int | None = None, classes: Classes = QWEN3_VL):
    """transformers' config of the image side (of the text part only the model type matters)."""
    values = {k: v for k, v in vlm_config.items() if k not in ("text_config", "architectures")}
    text = {"model_type": classes.text_model_type}
    if text_hidden_size is not None:
        text["hidden_size"] = text_hidden_size
    return classes.config(**values, text_config=text)


class Qwen3VLVision(torch.nn.Module):
    """The vision model of Qwen3VLModel, and its get_image_features with the DeepStack features."""

    def __init__(self, config: Any, classes: Classes = QWEN3_VL) -> None:
        super().__init__()
        self.visual = classes.vision_model._from_config(config.vision_config)
        self.image_token_id = config.image_token_id
        self.video_token_id = config.video_token_id

    def encoder(self) -> torch.nn.Module:
        """The patch and position embeddings and the blocks (the rotary embedding holds no parameters)."""
        return torch.nn.ModuleList([self.visual.patch_embed, self.visual.pos_embed, self.visual.blocks])

    def projector(self) -> torch.nn.Module:
        return torch.nn.ModuleList([self.visual.merger, self.visual.deepstack_merger_list])

    def image_features(
        self, pixel_values: torch.Tensor, image_grid_thw: torch.Tensor
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """([image tokens of all images, text hidden], the DeepStack features of the same shape, one per
        hooked decoder layer): Qwen3VLModel.get_image_features, concatenated over the images."""
        dtype = self.visual.patch_embed.proj.weight.dtype
        out = self.visual(pixel_values.to(dtype), grid_thw=image_grid_thw, return_dict=True)
        return out.pooler_output, list(out.deepstack_features)

    def video_features(
        self, pixel_values_videos: torch.Tensor, video_grid_thw: torch.Tensor
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """The videos' features and DeepStack features at their video tokens: Qwen3VLModel.get_video_features,
        the same vision model over the frames' patches."""
        return self.image_features(pixel_values_videos, video_grid_thw)


def deepstack_layers(vlm_config: dict[str, Any]) -> int:
    """The decoder layers (the first ones) that receive DeepStack features."""
    return len(vlm_config.get("vision_config", {}).get("deepstack_visual_indexes", (8, 16, 24)))


def build(vlm_config: dict[str, Any], text_hidden_size: int) -> Qwen3VLVision:
    return Qwen3VLVision(hf_config(vlm_config, text_hidden_size))


@functools.lru_cache(maxsize=8)
def _rope_index(vlm_json: str, classes: Classes = QWEN3_VL) -> RopeIndex:
    return RopeIndex(classes.model, hf_config(json.loads(vlm_json), classes=classes))


def position_ids(
    vlm_config: dict[str, Any],
    input_ids: torch.Tensor,
    images: dict[str, torch.Tensor],
    cu_seqlens: torch.Tensor | None = None,
    classes: Classes = QWEN3_VL,
) -> torch.Tensor:
    """[3, b, s] M-RoPE position ids as Qwen3VLForConditionalGeneration computes them with no padding mask
    (bridge pads on the right and attends causally): transformers' get_rope_index over the image tokens'
    grids; without images 0, 1, 2, ... on all three axes. Video tokens are refused (no video grids).
    `cu_seqlens`: a packed row's segments, each counted on its own."""
    return image_positions(
        _rope_index(json.dumps(vlm_config, sort_keys=True), classes),
        input_ids,
        images,
        "Qwen3-VL",
        cu_seqlens,
    )
