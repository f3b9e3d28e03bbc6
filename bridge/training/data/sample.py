"""One training sample as every dataset returns it: input tokens, shifted labels, loss mask, positions
(and the attention mask when documents must not see each other)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


@dataclass(frozen=True)
class DocumentMasking:
    """The dataset section's options for document boundaries (eod tokens) inside a sample."""

    reset_position_ids: bool = False
    reset_attention_mask: bool = False
    eod_mask_loss: bool = False


NO_MASKING = DocumentMasking()


def sample_from_text(text: np.ndarray, eod: int, masking: DocumentMasking = NO_MASKING) -> dict:
    """`text` holds seq_length + 1 ids; labels are the next ids (Megatron-Core takes shifted labels).

    Masks and positions come from Megatron-Core's own helper, the one its GPTDataset uses, so mock,
    JSONL and indexed data treat document boundaries identically.
    """
    text = torch.from_numpy(np.asarray(text, dtype=np.int64))
    tokens = text[:-1].contiguous()
    labels = text[1:].contiguous()
    if masking == NO_MASKING:
        loss_mask = torch.ones(tokens.shape, dtype=torch.float32)
        position_ids = torch.arange(tokens.numel(), dtype=torch.int64)
        return {"tokens": tokens, "labels": labels, "loss_mask": loss_mask, "position_ids": position_ids}
    from megatron.core.datasets.gpt_dataset import _get_ltor_masks_and_position_ids

    attention_mask, loss_mask, position_ids = _get_ltor_masks_and_position_ids(
        tokens, eod, masking.reset_position_ids, masking.reset_attention_mask, masking.eod_mask_loss,
        create_attention_mask=masking.reset_attention_mask,
    )  # fmt: skip
    sample = {"tokens": tokens, "labels": labels, "loss_mask": loss_mask, "position_ids": position_ids}
    if attention_mask is not None:
        sample["attention_mask"] = attention_mask
    return sample
