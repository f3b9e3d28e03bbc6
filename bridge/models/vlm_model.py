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
A family whose vision side also returns per-layer visual residuals (DeepStack: `image_features` gives
(features, [r_0, ..., r_{k-1}]) and the vision module gives `deepstack_layers(vlm_config)` = k) has r_i added to the
hidden states at the image token positions after decoder layer i (0-based), through a forward hook on
those layers; they must all be on the first stage, which holds the images (refused at build otherwise).
A packed row (`packed_seq_params`, THD) hands its segment boundaries to `positions` as `cu_seqlens`, so
each conversation's ids are its own (a family whose rule cannot split refuses packing: its folder's
`PACKING_REFUSED`).
A family whose image tokens attend otherwise than causally (Gemma 3: each image's tokens see each other)
gives `attention_mask_of`, which every stage applies to its input ids (each stage reads the batch).
Sequence parallelism: the embedding layer is built not to scatter (the provider's
`scatter_embedding_sequence_parallel=False`), the first stage merges the image features into the whole
sequence and then scatters it (and DeepStack's residuals) over the tensor-parallel ranks; the scatter's
backward gathers the gradient, so the replicated image side gets the whole sequence's on every rank.
Context parallelism: each rank's batch holds its 2 of the 2*cp sequence chunks (bridge.training.forward_step)
and, in `whole_input_ids`, the whole sequence's token ids: the first stage embeds and merges the whole
sequence, then keeps this rank's chunks (as Megatron-Core's get_batch_on_this_cp_rank cuts the batch);
M-RoPE ids are computed over the whole sequence on every stage (Megatron-Core's rotary embedding cuts its
table to the rank's chunks itself).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from megatron.core import tensor_parallel
from megatron.core.models.common.embeddings.rope_utils import get_pos_emb_on_this_cp_rank
from megatron.core.models.gpt import GPTModel

from bridge.errors import ConfigError

# a batch's video inputs (Qwen-VL families): the frames' patches, their grids and (Qwen2.5-VL's M-RoPE) the
# seconds per temporal grid step
VIDEO_KEYS = ("pixel_values_videos", "video_grid_thw", "second_per_grid_ts")


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

    # forward_step hands it the whole sequence's ids under context parallelism (`whole_input_ids`)
    merges_whole_sequence = True

    def __init__(
        self,
        *args: Any,
        vision: torch.nn.Module | None,
        positions: Callable[[torch.Tensor, dict[str, torch.Tensor]], torch.Tensor] | None = None,
        attention_mask_of: Callable[[torch.Tensor, torch.Tensor | None], torch.Tensor | None] | None = None,
        deepstack_layers: int = 0,
        freeze_language_model: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        if freeze_language_model:  # before `vision` is registered: its own freeze flags hold for it
            self.requires_grad_(False)
        self.vision = vision
        self.positions = positions
        self.attention_mask_of = attention_mask_of  # (input ids, mask) -> the language model's mask
        self._visual_residuals: list[torch.Tensor] | None = None  # DeepStack: [s, b, h] per hooked layer
        self._deepstack_hooked = False
        if deepstack_layers:
            self._hook_deepstack_layers(deepstack_layers)

    def _hook_deepstack_layers(self, count: int) -> None:
        """Add the visual residual i after decoder layer i (0-based global index) for i < count; every
        stage checks that those layers are on the first one (a later stage holding one refuses too)."""
        here = {layer.layer_number - 1: layer for layer in self.decoder.layers}
        missing = (
            [i for i in range(count) if i not in here]
            if self.vision is not None
            else sorted(i for i in here if i < count)
        )
        if missing:
            raise ConfigError(
                f"model pipeline split: decoder layers {missing} receive DeepStack visual features but are not "
                f"on the first pipeline stage (this stage holds layers {sorted(here)}); the rule: the first "
                f"{count} decoder layers must be on the first stage, which encodes the images. Fix: set "
                f"model.num_layers_in_first_pipeline_stage >= {count} or pipeline_model_parallel_size=1"
            )
        if self.vision is not None:
            for i in range(count):
                here[i].register_forward_hook(self._deepstack_hook(i))
            self._deepstack_hooked = True

    def _deepstack_hook(self, index: int) -> Callable:
        def add_residual(module: torch.nn.Module, args: Any, output: Any) -> Any:
            if self._visual_residuals is None:
                return output
            hidden = output[0] if isinstance(output, tuple) else output
            hidden = hidden + self._visual_residuals[index].to(hidden.dtype)
            return (hidden, *output[1:]) if isinstance(output, tuple) else hidden

        return add_residual

    def _merge_visual(
        self, embeddings: torch.Tensor, input_ids: torch.Tensor, inputs: dict[str, torch.Tensor]
    ) -> torch.Tensor:
        """The token embeddings with the images' features at the image tokens and, for a family whose
        vision side encodes videos (`video_features`), the videos' at the video tokens; DeepStack's
        per-layer residuals gathered the same way."""
        images = {k: v for k, v in inputs.items() if k not in VIDEO_KEYS}
        videos = {k: v for k, v in inputs.items() if k in VIDEO_KEYS}
        parts = []  # (inputs, encoder, placeholder token)
        if "pixel_values" in images:
            parts.append((images, self.vision.image_features, self.vision.image_token_id))
        if videos:
            if getattr(self.vision, "video_features", None) is None:
                raise ConfigError(
                    f"the batch holds video inputs ({', '.join(sorted(videos))}) and this model's vision side "
                    "encodes images only. Fix: give images"
                )
            parts.append((videos, self.vision.video_features, self.vision.video_token_id))
        residual_sum: list[torch.Tensor] | None = None
        for given, encode, token in parts:
            features = encode(**given)
            if isinstance(features, tuple):  # DeepStack: (features, the per-layer visual residuals)
                features, residuals = features
                if self._deepstack_hooked:
                    if residual_sum is None:
                        residual_sum = [torch.zeros_like(embeddings) for _ in residuals]
                    residual_sum = [
                        merge_image_features(acc, input_ids, r, token)
                        for acc, r in zip(residual_sum, residuals, strict=True)
                    ]
            embeddings = merge_image_features(embeddings, input_ids, features, token)
        self._visual_residuals = residual_sum
        return embeddings

    def forward(
        self,
        input_ids: torch.Tensor,
        position_ids: torch.Tensor,
        attention_mask: torch.Tensor | None,
        decoder_input: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        *args: Any,
        images: dict[str, torch.Tensor] | None = None,
        whole_input_ids: torch.Tensor | None = None,
        **kwargs: Any,
    ):
        """GPTModel.forward; `images` (the processor's image tensors, e.g. pixel_values) are encoded by
        the vision side and merged into the token embeddings on the first stage. With the family's
        `positions`, the position ids are computed from the tokens and images (given [b, s] ones ignored).
        `whole_input_ids`: with context parallelism, the whole sequence's ids (`input_ids` is this rank's
        chunks)."""
        cp_group = self.pg_collection.cp if self.config.context_parallel_size > 1 else None
        if cp_group is not None and whole_input_ids is None:
            raise ValueError("context parallelism: a vision-language model needs the whole sequence's ids")
        ids = whole_input_ids if cp_group is not None else input_ids  # what images and M-RoPE are read from
        if self.positions is not None and (position_ids is None or position_ids.dim() != 3):
            # (given [3, b, s] ids: generation's); a packed row (THD): each segment's ids on its own
            packed = kwargs.get("packed_seq_params")
            segments = {} if packed is None else {"cu_seqlens": packed.cu_seqlens_q}
            position_ids = self.positions(ids, images or {}, **segments)
        if self.attention_mask_of is not None and input_ids is not None:
            attention_mask = self.attention_mask_of(input_ids, attention_mask)
        if self.pre_process and decoder_input is None:
            self._visual_residuals = None  # this batch's, if it has images
        scatter = self.config.sequence_parallel and self.pre_process and decoder_input is None
        whole = (images or scatter or cp_group is not None) and self.pre_process and decoder_input is None
        if whole:
            decoder_input = self.embedding(input_ids=ids, position_ids=None)
            if images:
                decoder_input = self._merge_visual(decoder_input, ids, images)
            if cp_group is not None:  # this rank's chunks r and 2*cp-1-r of the whole sequence
                decoder_input = get_pos_emb_on_this_cp_rank(decoder_input, 0, cp_group)
                if self._visual_residuals is not None:
                    self._visual_residuals = [
                        get_pos_emb_on_this_cp_rank(r, 0, cp_group) for r in self._visual_residuals
                    ]
            if scatter:  # this rank's part of the sequence, as the embedding layer would have scattered it
                decoder_input = tensor_parallel.scatter_to_sequence_parallel_region(decoder_input)
                if self._visual_residuals is not None:
                    self._visual_residuals = [
                        tensor_parallel.scatter_to_sequence_parallel_region(r) for r in self._visual_residuals
                    ]
        return super().forward(
            input_ids, position_ids, attention_mask, decoder_input, labels, *args, **kwargs
        )
