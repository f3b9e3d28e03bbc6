"""Qwen3-VL's image side sized without building it (pure Python, for the planner): the parameters of
transformers' Qwen3VLVisionModel (encoder) and its merger plus DeepStack mergers (projector)."""

from __future__ import annotations

from typing import Any

# Qwen3-VL's image processor caps an image at 16384 * 32 * 32 pixels by default: 16384 image tokens; the
# planner sizes the same 1280-token image as for Qwen2.5-VL (a typical training image), not the cap.
DEFAULT_MAX_IMAGE_TOKENS = 1280


def vision_parameters(vlm_config: dict[str, Any], text_hidden_size: int) -> tuple[int, int]:
    """(encoder, projector): a biased Conv3d patch embedding, learned position embeddings, `depth` blocks
    (two LayerNorms, biased qkv and proj, a biased two-layer MLP); the merger: a LayerNorm of the patch
    width and two biased linears of the merged patches (hidden * merge^2) to `out_hidden_size`; each
    DeepStack merger the same with its LayerNorm over the merged width."""
    v = vlm_config["vision_config"]
    d, i, out = v["hidden_size"], v["intermediate_size"], v["out_hidden_size"]
    patch = v.get("in_channels", 3) * d * v["temporal_patch_size"] * v["patch_size"] ** 2 + d
    block = 2 * 2 * d + (3 * d * d + 3 * d) + (d * d + d) + (d * i + i) + (i * d + d)
    encoder = patch + v["num_position_embeddings"] * d + v["depth"] * block
    merged = d * v["spatial_merge_size"] ** 2
    linears = (merged * merged + merged) + (merged * out + out)
    deepstack = len(v.get("deepstack_visual_indexes", ()))
    return encoder, (2 * d + linears) + deepstack * (2 * merged + linears)


def image_tokens(vlm_config: dict[str, Any]) -> int:
    """Image tokens vary with the image's size (dynamic resolution): the planner's typical image."""
    return DEFAULT_MAX_IMAGE_TOKENS


def activations(
    vlm_config: dict[str, Any], text_hidden_size: int, patches: int | None = None
) -> tuple[int, int]:
    """(encoder, projector) values an image (default: the planner's 1280-token one) keeps for the backward
    pass, as transformers' Qwen3-VL blocks save them (tests/unit/test_vlm_activation_size.py): per patch
    the pixels and the embeddings with their positions; per patch and block the norms' outputs, q / k / v
    and the rotated q and k, the attention output, its projection's input and the residual (10 x hidden)
    and the MLP's (3 x intermediate); the merger's and each DeepStack merger's norm and first linear inputs per patch and its
    GELU's and second linear's per merged token (hidden x merge^2 each)."""
    v = vlm_config["vision_config"]
    d, i = v["hidden_size"], v["intermediate_size"]
    if patches is None:
        patches = image_tokens(vlm_config) * v["spatial_merge_size"] ** 2
    pixels = v.get("in_channels", 3) * v["temporal_patch_size"] * v["patch_size"] ** 2 * patches
    mergers = 1 + len(v.get("deepstack_visual_indexes", ()))
    return pixels + 2 * patches * d + v["depth"] * patches * (10 * d + 3 * i), mergers * patches * 4 * d
