"""M-RoPE position ids of an image-text batch through transformers' own `get_rope_index` (Qwen-VL models).

A family's vision.py binds its transformers model class and config; the rule is transformers': text tokens
count on all three axes (temporal, height, width), an image's tokens take its merged patch grid's (t, h, w)
coordinates after the preceding text. Computed with no padding mask: bridge pads on the right and attends
causally, so the padding's positions reach no kept row.
"""

from __future__ import annotations

import types
from typing import Any

import torch

from bridge.errors import ConfigError


class RopeIndex:
    """What a transformers Qwen-VL model's get_rope_index reads of `self`: its config and its
    get_vision_position_ids (bound from `model_cls`), without building the model."""

    def __init__(self, model_cls: type, config: Any) -> None:
        self.model_cls = model_cls
        self.config = config
        self.get_vision_position_ids = types.MethodType(model_cls.get_vision_position_ids, self)


def image_positions(
    index: RopeIndex, input_ids: torch.Tensor, images: dict[str, torch.Tensor], name: str
) -> torch.Tensor:
    """[3, b, s] M-RoPE ids of the batch; without images 0, 1, 2, ... on all three axes (as transformers,
    whatever its tokens). Video tokens are refused (the data carries no video grids). `name`: the family's
    name in the error."""
    config = index.config
    grid = images.get("image_grid_thw")
    if grid is None:
        b, s = input_ids.shape
        return torch.arange(s, device=input_ids.device).view(1, 1, s).expand(3, b, s)
    if bool((input_ids == config.video_token_id).any()):
        raise ConfigError(
            f"the batch holds {name} video tokens (id {config.video_token_id}): video inputs are not "
            "supported (only images). Fix: give images, not videos"
        )
    kinds = (input_ids == config.image_token_id).to(torch.int32)  # the processor's mm_token_type_ids
    positions, _ = index.model_cls.get_rope_index(index, input_ids, kinds, image_grid_thw=grid)
    return positions
