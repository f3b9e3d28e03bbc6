"""Interleaved M-RoPE: multimodal rotary embedding whose frequencies alternate between the temporal,
height and width position axes, for GPTModel when the provider sets mrope_interleaved
(bridge.models.provider_build).

Megatron-Core's MultimodalRotaryEmbedding (0.16.1, 0.19.2) gives each axis one contiguous block of
frequencies (`mrope_section` = [t, h, w] counts). The interleaved layout keeps the same counts but
assigns frequency i to axis i mod 3 while that axis has frequencies left (i < 3 * section[axis]); the
rest follow the temporal axis. Channels are rotated as halves (rotate_half), so the per-frequency
angles are repeated once: emb = [angles, angles].
"""

from __future__ import annotations

import torch
from torch import nn


def interleaved_mrope_axes(section: list[int], half_dim: int) -> torch.Tensor:
    """The position axis (0 temporal, 1 height, 2 width) of each of the half_dim frequencies."""
    axes = torch.zeros(half_dim, dtype=torch.long)
    for axis in (1, 2):
        axes[axis : 3 * section[axis] : 3] = axis
    return axes


def interleaved_mrope_emb(
    inv_freq: torch.Tensor, position_ids: torch.Tensor, section: list[int]
) -> torch.Tensor:
    """Rotation angles [seq, batch, 1, 2 * len(inv_freq)] (fp32) from position_ids [3, batch, seq]."""
    angles = position_ids.to(torch.float32)[..., None] * inv_freq.to(torch.float32)  # [3, b, s, half]
    axes = interleaved_mrope_axes(section, inv_freq.numel()).to(angles.device)
    index = axes.view(1, 1, 1, -1).expand(1, *angles.shape[1:])
    chosen = torch.gather(angles, 0, index)[0]  # [b, s, half]: frequency i from axis axes[i]
    emb = torch.cat((chosen, chosen), dim=-1)
    return emb[:, :, None, :].transpose(0, 1).contiguous()


class InterleavedMultimodalRotaryEmbedding(nn.Module):
    """Replaces GPTModel's MultimodalRotaryEmbedding (same call: position_ids, mrope_section, cp_group),
    keeping its inverse frequencies, interpolation factor and context-parallel group."""

    def __init__(self, contiguous: nn.Module) -> None:
        super().__init__()
        if getattr(contiguous, "rotary_interleaved", False):
            raise ValueError("interleaved M-RoPE rotates channel halves; rotary_interleaved must be False")
        self.inv_freq = contiguous.inv_freq
        self.seq_len_interpolation_factor = contiguous.seq_len_interpolation_factor
        self.cp_group = getattr(contiguous, "cp_group", None)

    def forward(self, position_ids: torch.Tensor, mrope_section: list[int], cp_group=None) -> torch.Tensor:
        seq = position_ids.to(device=self.inv_freq.device, dtype=torch.float32)
        if self.seq_len_interpolation_factor is not None:
            seq = seq / self.seq_len_interpolation_factor
        emb = interleaved_mrope_emb(self.inv_freq, seq, mrope_section)
        cp_group = cp_group if cp_group is not None else self.cp_group
        if cp_group is not None and cp_group.size() > 1:
            from megatron.core.models.common.embeddings.rope_utils import get_pos_emb_on_this_cp_rank

            emb = get_pos_emb_on_this_cp_rank(emb, 0, cp_group)
        return emb
