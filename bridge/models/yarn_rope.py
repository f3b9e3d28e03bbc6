"""YaRN's inverse RoPE frequencies (Peng et al. 2023, "YaRN: Efficient Context Window Extension"), for
GPTModel's rotary embedding when the provider sets yarn_rope_factor (bridge.models.provider_build).

Frequency i of a `dim`-channel rotation is interpolated (divided by `factor`) when it turns fewer than
beta_slow times over the original context, kept when it turns more than beta_fast times, and blended
linearly in between; the bounds are the (floored / ceiled) channel indices of those rotation counts.
"""

from __future__ import annotations

import math

import torch


def _channel_of_rotations(rotations: float, dim: int, base: float, original_context: int) -> float:
    """The channel index whose frequency turns `rotations` times over `original_context` positions."""
    return dim * math.log(original_context / (rotations * 2 * math.pi)) / (2 * math.log(base))


def yarn_inv_freq(
    dim: int,
    base: float,
    factor: float,
    original_context: int,
    beta_fast: float,
    beta_slow: float,
    device: torch.device | None = None,
) -> torch.Tensor:
    """The dim // 2 inverse frequencies (fp32) of YaRN-scaled RoPE."""
    low = max(math.floor(_channel_of_rotations(beta_fast, dim, base, original_context)), 0)
    high = min(math.ceil(_channel_of_rotations(beta_slow, dim, base, original_context)), dim - 1)
    if low == high:
        high += 0.001  # a ramp of zero width
    original = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32, device=device) / dim))
    ramp = torch.clamp(
        (torch.arange(dim // 2, dtype=torch.float32, device=device) - low) / (high - low), 0, 1
    )
    kept = 1 - ramp  # 1: the original frequency (fast rotations), 0: interpolated
    return (original / factor) * (1 - kept) + original * kept
