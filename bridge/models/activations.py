"""Activations the provider names that Megatron-Core does not export as functions."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    """GELU with the tanh approximation: transformers' "gelu_pytorch_tanh" (Gemma's GeGLU)."""
    return F.gelu(x, approximate="tanh")
