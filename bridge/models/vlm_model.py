"""VisionLanguageModel: Megatron-Core's GPTModel with a family's image side on the first pipeline stage.

The language model is GPTModel itself (every text family's layer spec, layouts, conversion rows, PEFT and
checkpointing apply unchanged); the image side is the family's `vision` module (bridge.models.<family>.vision:
transformers' own vision tower and projector, replicated on every tensor-parallel rank). On the first
stage the token embeddings are computed, the image features replace the embeddings of the image
placeholder tokens in order (batch-major, as transformers' `masked_scatter` does), and GPTModel runs on
the merged embeddings (`decoder_input`). Later stages receive hidden states and ignore the images.

A family whose RoPE positions depend on the images (M-RoPE: [3, b, s] temporal / height / width ids)
supplies `positions(input_ids, images) -> position_ids` (its vision module's `position_ids`, bound to
its config); every stage computes them from the batch, since every stage applies RoPE, unless the caller
passes them already in that [3, b, s] form (generation: a cached decoding step holds only its new token).
A family whose image tokens attend otherwise than causally (Gemma 3: each image's tokens see each other)
gives `attention_mask_of`, which every stage applies to its input ids (each stage reads the batch).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from megatron.core.models.gpt import GPTModel


class ImageTokenMismatch(ValueError):
    """The batch's image placeholder tokens and the image features the vision side produced differ."""


def merge_image_features(
    embeddings: torch.Tensor, input_ids: torch.Tensor, features: torch.Tensor, image_token_id: int
) -> torch.Tensor:
    """`embeddings` [s, b, h] with the rows of token `image_token_id` (in `input_ids` [b, s]) replaced
    by `features` [n, h], filled batch-major; raises ImageTokenMismatch when n is not their count."""
    mask = input_ids == image_token_id  # [b, s]
    count = int(mask.sum())
    if count != features.shape[0]:
        raise ImageTokenMismatch(
            f"the batch holds {count} image tokens (id {image_token_id}) but its images give "
            f"{features.shape[0]} feature rows; each image needs exactly its processor's number of "
            "placeholder tokens in the text (a sample cut by the sequence length loses some)"
        )
    merged = embeddings.transpose(0, 1).masked_scatter(mask.unsqueeze(-1), features.to(embeddings.dtype))
    return merged.transpose(0, 1).contiguous()


class VisionLanguageModel(GPTModel):
    """GPTModel whose first stage also holds the family's `vision` module (None on the other stages)."""

    def __init__(
        self,
        *args: Any,
        vision: torch.nn.Module | None,
        positions: Callable[[torch.Tensor, dict[str, torch.Tensor]], torch.Tensor] | None = None,
        attention_mask_of: Callable[[torch.Tensor, torch.Tensor | None], torch.Tensor | None] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.vision = vision
        self.positions = positions
        self.attention_mask_of = attention_mask_of  # (input ids, mask) -> the language model's mask

    def forward(
        self,
        input_ids: torch.Tensor,
        position_ids: torch.Tensor,
        attention_mask: torch.Tensor | None,
        decoder_input: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        *args: Any,
        images: dict[str, torch.Tensor] | None = None,
        **kwargs: Any,
    ):
        """GPTModel.forward; `images` (the processor's image tensors, e.g. pixel_values) are encoded by
        the vision side and merged into the token embeddings on the first stage. With the family's
        `positions`, the position ids are computed from the tokens and images (given [b, s] ones ignored)."""
        if self.positions is not None and (position_ids is None or position_ids.dim() != 3):
            position_ids = self.positions(input_ids, images or {})  # (given [3, b, s] ids: generation's)
        if self.attention_mask_of is not None and input_ids is not None:
            attention_mask = self.attention_mask_of(input_ids, attention_mask)
        if images and self.pre_process and decoder_input is None:
            embeddings = self.embedding(input_ids=input_ids, position_ids=position_ids)
            features = self.vision.image_features(**images)
            decoder_input = merge_image_features(embeddings, input_ids, features, self.vision.image_token_id)
        return super().forward(
            input_ids, position_ids, attention_mask, decoder_input, labels, *args, **kwargs
        )
