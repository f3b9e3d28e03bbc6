"""M-RoPE position ids of an image-text batch through transformers' own `get_rope_index` (Qwen-VL models).

A family's vision.py binds its transformers model class and config; the rule is transformers': text tokens
count on all three axes (temporal, height, width), an image's tokens take its merged patch grid's (t, h, w)
coordinates after the preceding text. Computed with no padding mask: bridge pads on the right and attends
causally, so the padding's positions reach no kept row.

A packed row (one row of several conversations, segments given by cu_seqlens) takes get_rope_index per
segment, each with its own images' grid rows: every conversation's positions start at 0 as they do alone.
Over the whole row instead, a later conversation's text and images would continue the first one's count.
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
    index: RopeIndex,
    input_ids: torch.Tensor,
    images: dict[str, torch.Tensor],
    name: str,
    cu_seqlens: torch.Tensor | None = None,
) -> torch.Tensor:
    """[3, b, s] M-RoPE ids of the batch; without images or videos 0, 1, 2, ... on all three axes (as
    transformers, whatever its tokens). Video tokens need the videos' grids (video_grid_thw; Qwen2.5-VL's
    second_per_grid_ts spaces their temporal ids). `name`: the family's name in the error. `cu_seqlens` (a
    packed row, b = 1): the ids of each segment on its own."""
    config = index.config
    videos = images.get("video_grid_thw")
    has_video_tokens = bool((input_ids == config.video_token_id).any())
    if has_video_tokens and videos is None:
        raise ConfigError(
            f"the batch holds {name} video tokens (id {config.video_token_id}) without video inputs "
            "(pixel_values_videos, video_grid_thw). Fix: give the videos with their tokens"
        )
    if cu_seqlens is not None:
        if videos is not None:
            raise ConfigError(
                f"a packed {name} row holds video inputs; packed rows carry images only. Fix: set "
                "dataset.packed_sequence_size=0 for video data"
            )
        return _packed_positions(index, input_ids, images, name, cu_seqlens)
    grid = images.get("image_grid_thw")
    if grid is None and videos is None:
        b, s = input_ids.shape
        return torch.arange(s, device=input_ids.device).view(1, 1, s).expand(3, b, s)
    # the processor's mm_token_type_ids: 1 on image tokens, 2 on video tokens
    kinds = (input_ids == config.image_token_id).to(torch.int32)
    kinds = kinds + 2 * (input_ids == config.video_token_id).to(torch.int32)
    extra = {}
    if images.get("second_per_grid_ts") is not None:
        extra["second_per_grid_ts"] = images["second_per_grid_ts"]
    positions, _ = index.model_cls.get_rope_index(
        index, input_ids, kinds, image_grid_thw=grid, video_grid_thw=videos, **extra
    )
    return positions


def _packed_positions(
    index: RopeIndex,
    input_ids: torch.Tensor,
    images: dict[str, torch.Tensor],
    name: str,
    cu_seqlens: torch.Tensor,
) -> torch.Tensor:
    """[3, 1, s] ids of a packed row: each segment's own, with the next grid rows whose merged tokens
    (t * h * w / merge^2 each) make up the segment's image tokens (images are in member order)."""
    bounds = cu_seqlens.reshape(-1).tolist()
    grid = images.get("image_grid_thw")
    merge = index.config.vision_config.spatial_merge_size
    tokens = [] if grid is None else (grid.prod(-1) // merge**2).tolist()
    used, parts = 0, []
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        ids = input_ids[:, a:b]
        want, take = int((ids == index.config.image_token_id).sum()), 0
        while want > 0 and used + take < len(tokens):
            want -= tokens[used + take]
            take += 1
        if want:
            raise ConfigError(
                f"a packed {name} row's segment [{a}, {b}) holds image tokens that its images' grids "
                f"(image_grid_thw rows {used}..{used + take}) do not add up to; each conversation's "
                "images must come whole and in member order"
            )
        own = {} if not take else {"image_grid_thw": grid[used : used + take]}
        parts.append(image_positions(index, ids, own, name))
        used += take
    return torch.cat(parts, dim=-1)
