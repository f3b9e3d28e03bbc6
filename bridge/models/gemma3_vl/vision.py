"""Gemma 3's image side: transformers' SigLIP vision tower and Gemma3MultiModalProjector (average pool
to mm_tokens_per_image, RMSNorm, projection), built from the checkpoint's config; the features as
Gemma3Model.get_image_features computes them, and the attention mask of its language model.

Attention among image tokens (transformers 5.25, Gemma3Model.forward): with `token_type_ids` (which
Gemma3Processor returns) every token of one image attends to every token of the same image, later ones
included, on top of the causal mask (`create_masks_for_vision_model`: global layers causal OR same image,
sliding layers that within the window); without them the mask is causal. The image tokens of one image
are one contiguous run of `image_token_id` (the processor wraps each in begin/end-of-image tokens), so
the runs of that id in the input ids are the processor's token_type_ids blocks; `attention_mask` builds
Megatron's explicit mask from them (the sliding layers add their window to it:
bridge.models.masked_attention).
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import AutoModel, Gemma3Config
from transformers.models.gemma3.modeling_gemma3 import Gemma3MultiModalProjector


def hf_config(vlm_config: dict[str, Any], text_hidden_size: int) -> Gemma3Config:
    """transformers' Gemma3Config of the image side (the text part: only its hidden size matters here)."""
    values = {k: v for k, v in vlm_config.items() if k not in ("text_config", "architectures")}
    return Gemma3Config(**values, text_config={"model_type": "gemma3_text", "hidden_size": text_hidden_size})


def image_blocks(input_ids: torch.Tensor, image_token_id: int) -> torch.Tensor:
    """[b, s] block index of each image token (its run of `image_token_id`, counted per row), -1 elsewhere:
    transformers' get_block_sequence_ids_for_mask of the processor's token_type_ids."""
    is_image = input_ids == image_token_id
    starts = is_image & ~torch.nn.functional.pad(is_image, (1, 0))[:, :-1]
    return torch.where(is_image, torch.cumsum(starts.int(), dim=1) - 1, -1)


class Gemma3Vision(torch.nn.Module):
    """The vision tower and projector of Gemma3Model and its get_image_features."""

    def __init__(self, config: Gemma3Config) -> None:
        super().__init__()
        self.vision_tower = AutoModel.from_config(config.vision_config)
        self.multi_modal_projector = Gemma3MultiModalProjector(config)
        self.image_token_id = config.image_token_id

    def encoder(self) -> torch.nn.Module:
        return self.vision_tower

    def projector(self) -> torch.nn.Module:
        return self.multi_modal_projector

    def image_features(self, pixel_values: torch.Tensor) -> torch.Tensor:
        """[images * mm_tokens_per_image, text hidden]: Gemma3Model.get_image_features, concatenated."""
        dtype = self.multi_modal_projector.mm_input_projection_weight.dtype
        states = self.vision_tower(pixel_values=pixel_values.to(dtype)).last_hidden_state
        features = self.multi_modal_projector(states)
        return features.reshape(-1, features.shape[-1])


class ImageBlockMask:
    """The language model's attention mask on every pipeline stage (each reads the batch's input ids)."""

    def __init__(self, image_token_id: int) -> None:
        self.image_token_id = image_token_id

    def __call__(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor | None:
        """Megatron's [b, 1, s, s] mask (True = masked): causal, except that the tokens of one image see
        each other; a given `attention_mask` (True = masked) stays applied outside the image blocks.
        Unchanged (None: the plain causal mask) when the input has no image token."""
        blocks = image_blocks(input_ids, self.image_token_id)
        if not bool((blocks >= 0).any()):
            return attention_mask
        s = input_ids.shape[1]
        same_image = (blocks[:, :, None] == blocks[:, None, :]) & (blocks[:, :, None] >= 0)  # [b, q, k]
        if attention_mask is None:
            causal = torch.ones(s, s, dtype=torch.bool, device=input_ids.device).tril()
            return ~(causal | same_image).unsqueeze(1)
        return attention_mask & ~same_image.unsqueeze(1)


def build(vlm_config: dict[str, Any], text_hidden_size: int) -> Gemma3Vision:
    return Gemma3Vision(hf_config(vlm_config, text_hidden_size))


def attention_mask_of(vlm_config: dict[str, Any]) -> ImageBlockMask:
    """The mask rule VisionLanguageModel applies on every stage (bridge.models.vlm_provider)."""
    return ImageBlockMask(int(vlm_config.get("image_token_index", 262_144)))
