"""Mistral 3's image side sized without building it (pure Python, for the planner): the parameters of
transformers' PixtralVisionModel and Mistral3MultiModalProjector, and the image tokens of a largest image."""

from __future__ import annotations

from typing import Any


def encoder_parameters(v: dict[str, Any]) -> int:
    """PixtralVisionModel: the patch convolution (no bias), ln_pre, and per layer q, k, v, o (no biases),
    two RMSNorms and a gated MLP (gate, up, down; no biases)."""
    d, i, patch = v["hidden_size"], v["intermediate_size"], v["patch_size"]
    conv = v.get("num_channels", 3) * d * patch * patch
    return conv + d + v["num_hidden_layers"] * (4 * d * d + 2 * d + 3 * d * i)


def vision_parameters(vlm_config: dict[str, Any], text_hidden_size: int) -> tuple[int, int]:
    """(vision tower, projector) parameters: the projector is an RMSNorm, the patch merger [d * m^2 -> d],
    linear_1 [d x feature layers -> text hidden] and linear_2 [text hidden -> text hidden], biased when
    multimodal_projector_bias."""
    v = vlm_config["vision_config"]
    d, h = v["hidden_size"], text_hidden_size
    merge = vlm_config.get("spatial_merge_size", 2)
    feature_layer = vlm_config.get("vision_feature_layer", -1)
    layers = 1 if isinstance(feature_layer, int) else len(feature_layer)
    bias = 2 * h if vlm_config.get("multimodal_projector_bias", False) else 0
    return encoder_parameters(v), d + d * merge * merge * d + d * layers * h + h * h + bias


def image_tokens(vlm_config: dict[str, Any]) -> int:
    """Tokens of a largest (image_size square) image: n x n merged patches and one break / end token per row."""
    v = vlm_config["vision_config"]
    n = v["image_size"] // (v["patch_size"] * vlm_config.get("spatial_merge_size", 2))
    return n * n + n


def activations(
    vlm_config: dict[str, Any], text_hidden_size: int, patches: int | None = None
) -> tuple[int, int]:
    """(encoder, projector) values an image (default: a largest one) keeps for the backward pass, as
    transformers' Pixtral layers save them (tests/unit/test_vlm_activation_size.py): per patch the pixels
    and the embeddings; per patch and layer the norms' inputs and outputs, the rotary angles, q / k / v, the
    attention output and its projection's input (12 x hidden) and the gated MLP's four (4 x intermediate);
    the projector's norm and merger inputs per patch, linear_1's input, GELU's and linear_2's per merged
    token."""
    v = vlm_config["vision_config"]
    d, i = v["hidden_size"], v["intermediate_size"]
    merge = vlm_config.get("spatial_merge_size", 2)
    if patches is None:
        patches = (v["image_size"] // (v["patch_size"] * merge) * merge) ** 2
    tokens = patches // (merge * merge)
    pixels = v.get("num_channels", 3) * v["patch_size"] ** 2 * patches
    encoder = pixels + 2 * patches * d + v["num_hidden_layers"] * patches * (12 * d + 4 * i)
    return encoder, patches * 2 * d + tokens * (d + 2 * text_hidden_size)
