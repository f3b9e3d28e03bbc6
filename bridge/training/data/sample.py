"""One training sample as every dataset returns it: input tokens, shifted labels, loss mask, positions."""

from __future__ import annotations

import numpy as np
import torch


def sample_from_text(text: np.ndarray, eod: int, eod_mask_loss: bool = False) -> dict[str, torch.Tensor]:
    """`text` holds seq_length + 1 ids; labels are the next ids (Megatron-Core takes shifted labels)."""
    text = torch.from_numpy(np.asarray(text, dtype=np.int64))
    tokens = text[:-1].contiguous()
    labels = text[1:].contiguous()
    loss_mask = torch.ones(tokens.shape, dtype=torch.float32)
    if eod_mask_loss:
        loss_mask[tokens == eod] = 0.0
    position_ids = torch.arange(tokens.numel(), dtype=torch.int64)
    return {"tokens": tokens, "labels": labels, "loss_mask": loss_mask, "position_ids": position_ids}
