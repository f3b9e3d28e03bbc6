"""Gemma 3's image side sized without building it (pure Python, for the planner): the parameters of
transformers' SigLIP vision tower and Gemma3MultiModalProjector, and the image tokens per image."""

from __future__ import annotations

from typing import Any

from bridge.models.llava.vision_size import activations as siglip_activations
from bridge.models.llava.vision_size import encoder_parameters


def vision_parameters(vlm_config: dict[str, Any], text_hidden_size: int) -> tuple[int, int]:
    """(vision tower, projector) parameters: the projector is an RMSNorm over the vision hidden size and a
    [vision hidden, text hidden] projection matrix, no bias."""
    v = dict(vlm_config["vision_config"])
    v.setdefault("model_type", "siglip_vision_model")
    d = v["hidden_size"]
    return encoder_parameters(v), d + d * text_hidden_size


def image_tokens(vlm_config: dict[str, Any]) -> int:
    """Placeholder tokens per image: the pooled patches (mm_tokens_per_image)."""
    return int(vlm_config.get("mm_tokens_per_image", 256))


def activations(
    vlm_config: dict[str, Any], text_hidden_size: int, patches: int | None = None
) -> tuple[int, int]:
    """(encoder, projector) values one image keeps for the backward pass, as transformers' SigLIP layers
    save them (LLaVA's SigLIP case: 8 x hidden + 2 x intermediate per patch and layer, the pixels and the
    embeddings per patch); the projector's pooling input per patch, its norm and projection inputs per
    pooled token."""
    v = dict(vlm_config["vision_config"])
    v.setdefault("model_type", "siglip_vision_model")
    patches = (v["image_size"] // v["patch_size"]) ** 2 if patches is None else patches
    encoder, _ = siglip_activations({"vision_config": v}, text_hidden_size, patches)
    return encoder, patches * v["hidden_size"] + image_tokens(vlm_config) * 2 * v["hidden_size"]
