"""LLaVA's image side: transformers' vision tower (CLIP / SigLIP, by `vision_config.model_type`) and
LlavaMultiModalProjector, built from the checkpoint's config; the features as LlavaModel computes them.

Children are named as in the Hugging Face checkpoint (`vision_tower`, `multi_modal_projector`), so the
conversion rows copy them by name (bridge/models/llava/mapping.py).
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import AutoModel, LlavaConfig
from transformers.models.llava.modeling_llava import LlavaMultiModalProjector

from bridge.errors import ConfigError


def hf_config(vlm_config: dict[str, Any], text_hidden_size: int) -> LlavaConfig:
    """transformers' LlavaConfig of the image side (the text part: only its hidden size matters here)."""
    values = {k: v for k, v in vlm_config.items() if k not in ("text_config", "architectures")}
    text = {"model_type": vlm_config.get("text_config", {}).get("model_type", "llama")}
    return LlavaConfig(**values, text_config=dict(text, hidden_size=text_hidden_size))


class LlavaVision(torch.nn.Module):
    """The vision tower and projector of LlavaModel, and its get_image_features."""

    def __init__(self, config: LlavaConfig) -> None:
        super().__init__()
        self.vision_tower = AutoModel.from_config(config.vision_config)
        self.multi_modal_projector = LlavaMultiModalProjector(config)
        self.image_token_id = config.image_token_id
        self.feature_layer = config.vision_feature_layer
        self.select_strategy = config.vision_feature_select_strategy

    def encoder(self) -> torch.nn.Module:
        return self.vision_tower

    def projector(self) -> torch.nn.Module:
        return self.multi_modal_projector

    def image_features(self, pixel_values: torch.Tensor, image_sizes: Any = None) -> torch.Tensor:
        """[images * tokens per image, text hidden]: LlavaModel.get_image_features, concatenated."""
        if image_sizes is not None:
            raise ConfigError("image_sizes (Pixtral-style variable image sizes) are not supported for LLaVA")
        states = self.vision_tower(
            pixel_values.to(self.multi_modal_projector.linear_1.weight.dtype), output_hidden_states=True
        ).hidden_states
        layers = [self.feature_layer] if isinstance(self.feature_layer, int) else list(self.feature_layer)
        selected = [states[i] for i in layers]
        if self.select_strategy == "default":  # drop the CLS token
            selected = [s[:, 1:] for s in selected]
        features = self.multi_modal_projector(torch.cat(selected, dim=-1))
        return features.reshape(-1, features.shape[-1])


def build(vlm_config: dict[str, Any], text_hidden_size: int) -> LlavaVision:
    vision_type = vlm_config.get("vision_config", {}).get("model_type")
    if vision_type == "pixtral":
        raise ConfigError(
            "HF config vision_config.model_type='pixtral': Pixtral's variable image sizes (image_sizes) are "
            "not supported by bridge's LLaVA vision side. Fix: use a CLIP / SigLIP vision tower checkpoint"
        )
    return LlavaVision(hf_config(vlm_config, text_hidden_size))
