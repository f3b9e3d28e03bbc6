"""Qwen2.5-VL's image side sized without building it (pure Python, for the planner): the parameters of
transformers' Qwen2_5_VisionTransformerPretrainedModel (encoder) and its merger (projector)."""

from __future__ import annotations

from typing import Any

# Qwen2-VL's image processor caps an image at 28 * 28 * 1280 pixels by default: 1280 image tokens.
DEFAULT_MAX_IMAGE_TOKENS = 1280


def vision_parameters(vlm_config: dict[str, Any], text_hidden_size: int) -> tuple[int, int]:
    """(encoder, projector): a Conv3d patch embedding without bias, `depth` blocks (two RMSNorms, qkv and
    proj with biases, a gated MLP with biases); the merger: an RMSNorm and two biased linears of the
    merged patches (hidden * merge^2) to `out_hidden_size`."""
    v = vlm_config["vision_config"]
    d, i = v["hidden_size"], v["intermediate_size"]
    patch = v.get("in_channels", v.get("in_chans", 3)) * d * v["temporal_patch_size"] * v["patch_size"] ** 2
    block = 2 * d + (3 * d * d + 3 * d) + (d * d + d) + 2 * (d * i + i) + (i * d + d)
    merged = d * v["spatial_merge_size"] ** 2
    projector = d + (merged * merged + merged) + (merged * v["out_hidden_size"] + v["out_hidden_size"])
    return patch + v["depth"] * block, projector


def image_tokens(vlm_config: dict[str, Any]) -> int:
    """Image tokens vary with the image's size (dynamic resolution): the most the processor's default
    size cap gives."""
    return DEFAULT_MAX_IMAGE_TOKENS


def activations(
    vlm_config: dict[str, Any], text_hidden_size: int, patches: int | None = None
) -> tuple[int, int]:
    """(encoder, projector) values an image (default: the planner's 1280-token one) keeps for the backward
    pass, as transformers' Qwen2.5-VL blocks save them (tests/unit/test_vlm_activation_size.py): per patch
    the pixels and the embeddings; per patch and block the norms' inputs and outputs, q / k / v and the
    rotated q and k, the attention output and its projection's input (13 x hidden) and the gated MLP's four
    (4 x intermediate); the merger's norm and first linear inputs per patch and its GELU's and second
    linear's per merged token (hidden x merge^2 each)."""
    v = vlm_config["vision_config"]
    d, i = v["hidden_size"], v["intermediate_size"]
    if patches is None:
        patches = image_tokens(vlm_config) * v["spatial_merge_size"] ** 2
    channels = v.get("in_channels", v.get("in_chans", 3))
    pixels = channels * v["temporal_patch_size"] * v["patch_size"] ** 2 * patches
    return pixels + patches * d + v["depth"] * patches * (13 * d + 4 * i), patches * 4 * d
