"""LLaVA's image side sized without building it (pure Python, for the planner): the parameters of
transformers' CLIP / SigLIP vision tower and LlavaMultiModalProjector, and the image tokens per image."""

from __future__ import annotations

from typing import Any

from bridge.errors import ConfigError


def _encoder_layers(v: dict[str, Any]) -> int:
    """The transformer layers: q, k, v, o with biases, two LayerNorms, fc1 / fc2 with biases."""
    d, i = v["hidden_size"], v["intermediate_size"]
    return v["num_hidden_layers"] * (4 * (d * d + d) + 2 * 2 * d + d * i + i + i * d + d)


def encoder_parameters(v: dict[str, Any]) -> int:
    """CLIPVisionModel (patch conv without bias, class token, positions incl. the class token, pre- and
    post-LayerNorm) or SiglipVisionModel (patch conv with bias, positions, post-LayerNorm, the
    attention-pooling head when vision_use_head)."""
    d, patch, channels = v["hidden_size"], v["patch_size"], v.get("num_channels", 3)
    patches = (v["image_size"] // patch) ** 2
    conv = channels * d * patch * patch
    kind = v.get("model_type")
    if kind == "clip_vision_model":
        return conv + d + (patches + 1) * d + 2 * d + _encoder_layers(v) + 2 * d
    if kind == "siglip_vision_model":
        total = conv + d + patches * d + _encoder_layers(v) + 2 * d
        if v.get("vision_use_head", True):  # probe, MultiheadAttention, LayerNorm, MLP
            i = v["intermediate_size"]
            total += d + (3 * d * d + 3 * d) + (d * d + d) + 2 * d + (d * i + i + i * d + d)
        return total
    raise ConfigError(
        f"vlm_config.vision_config.model_type = {kind!r}: the planner sizes CLIP and SigLIP vision towers. "
        "Fix: use a clip_vision_model or siglip_vision_model vision_config."
    )


def vision_parameters(vlm_config: dict[str, Any], text_hidden_size: int) -> tuple[int, int]:
    """(vision tower, projector) parameters: the projector is linear_1 [vision hidden x feature layers ->
    text hidden] and linear_2 [text hidden -> text hidden], biased unless multimodal_projector_bias False."""
    v = vlm_config["vision_config"]
    feature_layer = vlm_config.get("vision_feature_layer", -2)
    layers = 1 if isinstance(feature_layer, int) else len(feature_layer)
    bias = vlm_config.get("multimodal_projector_bias", True)
    h = text_hidden_size
    projector = v["hidden_size"] * layers * h + h * h + (2 * h if bias else 0)
    return encoder_parameters(v), projector


def image_tokens(vlm_config: dict[str, Any]) -> int:
    """Placeholder tokens per image: the patches (less none: the default strategy drops the class token)."""
    v = vlm_config["vision_config"]
    return vlm_config.get("image_seq_length") or (v["image_size"] // v["patch_size"]) ** 2


def activations(
    vlm_config: dict[str, Any], text_hidden_size: int, patches: int | None = None
) -> tuple[int, int]:
    """(encoder, projector) values one image keeps for the backward pass, as transformers' CLIP / SigLIP
    layers save them (tests/unit/test_vlm_activation_size.py counts autograd's saved tensors): per patch
    the pixels and the embeddings; per patch and layer the two norms' inputs and outputs, q / k / v, the
    attention output and its projection's input (8 x hidden) and the MLP's (2 x intermediate; CLIP's quick
    GELU one more); SigLIP's post-norm and pooling head; the projector's linear_1 input per patch, GELU's and linear_2's per token."""
    v = vlm_config["vision_config"]
    d, i = v["hidden_size"], v["intermediate_size"]
    clip = v.get("model_type") == "clip_vision_model"
    patches = (v["image_size"] // v["patch_size"]) ** 2 if patches is None else patches
    seen = patches + (1 if clip else 0)  # the class token
    pixels = v.get("num_channels", 3) * v["patch_size"] ** 2 * patches
    layer = 8 * d + (3 if clip else 2) * i
    encoder = pixels + seen * d * (2 if clip else 1) + v["num_hidden_layers"] * seen * layer
    if not clip:  # SigLIP's post-LayerNorm of every patch, and its attention-pooling head (input, k, v)
        encoder += patches * d * (4 if v.get("vision_use_head", True) else 1)
    return encoder, seen * d + patches * 2 * text_hidden_size
