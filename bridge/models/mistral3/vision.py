"""Mistral 3's image side: transformers' Pixtral vision tower (images at their own sizes, `image_sizes`)
and Mistral3MultiModalProjector (RMSNorm, the patch merger that folds spatial_merge_size^2 neighbouring
patches into one, and a two-layer MLP), built from the checkpoint's config; the features as
Mistral3Model.get_image_features computes them.

The processor writes each image as rows of `[IMG]` tokens, each row ended by `[IMG_BREAK]` and the last
by `[IMG_END]`: the break and end tokens are ordinary text tokens (embedded by the language model), only
the `[IMG]` rows take the image features, in order. Attention is causal (Mistral3Model passes the mask
through unchanged).
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import Mistral3Config
from transformers.models.mistral3.modeling_mistral3 import Mistral3MultiModalProjector
from transformers.models.pixtral.modeling_pixtral import PixtralVisionModel

from bridge.errors import ConfigError


def hf_config(vlm_config: dict[str, Any], text_hidden_size: int) -> Mistral3Config:
    """transformers' Mistral3Config of the image side (of the text part: its hidden size, and its RMSNorm
    epsilon, which the projector's norm uses: kept in vlm_config by mapping.VISION_TEXT_KEYS)."""
    values = {k: v for k, v in vlm_config.items() if k not in ("text_config", "architectures")}
    eps = vlm_config.get("text_config", {}).get("rms_norm_eps")
    if eps is None:
        raise ConfigError(
            "vlm_config.text_config.rms_norm_eps is missing: Mistral 3's projector norm uses the language "
            "model's epsilon. Fix: build the provider from the checkpoint (AutoBridge) or a mistral3 preset"
        )
    text = {"model_type": "mistral", "hidden_size": text_hidden_size, "rms_norm_eps": eps}
    return Mistral3Config(**values, text_config=text)


class Mistral3Vision(torch.nn.Module):
    """The vision tower and projector of Mistral3Model, and its get_image_features."""

    def __init__(self, config: Mistral3Config) -> None:
        super().__init__()
        self.vision_tower = PixtralVisionModel(config.vision_config)
        self.multi_modal_projector = Mistral3MultiModalProjector(config)
        self.image_token_id = config.image_token_id
        self.feature_layer = config.vision_feature_layer

    def encoder(self) -> torch.nn.Module:
        return self.vision_tower

    def projector(self) -> torch.nn.Module:
        return self.multi_modal_projector

    def image_features(
        self, pixel_values: torch.Tensor, image_sizes: torch.Tensor | None = None
    ) -> torch.Tensor:
        """[sum over images of their merged patches, text hidden]: Mistral3Model.get_image_features,
        concatenated in image order (each image at its own size, `image_sizes` [images, 2] in pixels)."""
        if image_sizes is None:
            raise ConfigError(
                "a Mistral 3 batch has pixel_values but no image_sizes: the Pixtral tower reads each image at "
                "its own size. Fix: pass the processor's image_sizes with the pixel values"
            )
        dtype = self.multi_modal_projector.linear_1.weight.dtype
        states = self.vision_tower(
            pixel_values.to(dtype), image_sizes=image_sizes, output_hidden_states=True
        ).hidden_states
        layers = [self.feature_layer] if isinstance(self.feature_layer, int) else list(self.feature_layer)
        selected = torch.cat([states[i] for i in layers], dim=-1)
        return self.multi_modal_projector(selected.squeeze(0), image_sizes)


def build(vlm_config: dict[str, Any], text_hidden_size: int) -> Mistral3Vision:
    return Mistral3Vision(hf_config(vlm_config, text_hidden_size))
