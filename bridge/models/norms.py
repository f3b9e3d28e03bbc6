"""A LayerNorm / RMSNorm for Megatron-Core's local (non-Transformer-Engine) layer spec that supports
sequence parallelism.

Megatron-Core's torch-norm wrapper refuses `sequence_parallel`. Under sequence parallelism each tensor-
parallel rank normalises a different slice of the sequence, so the norm weights get different gradients
on each rank; Megatron-Core all-reduces them over the TP group for parameters marked
`sequence_parallel=True` (finalize_model_grads). Marking them is all this module adds.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F


class SequenceParallelNorm(torch.nn.Module):
    """`config.normalization` ("LayerNorm" or "RMSNorm") over the last dimension, Megatron-Core signature."""

    def __init__(
        self,
        config,
        hidden_size: int,
        eps: float = 1e-5,
        persist_layer_norm: bool = False,  # accepted for Megatron-Core's call signature; no fused kernel here
        zero_centered_gamma: bool = False,
        normalization: str | None = None,
    ) -> None:
        super().__init__()
        self.normalization = normalization or config.normalization
        if self.normalization not in ("LayerNorm", "RMSNorm"):
            raise ValueError(
                f"normalization={self.normalization!r}: only LayerNorm and RMSNorm are supported"
            )
        self.eps = eps
        # Zero-centred gamma stores (weight - 1) so that weight decay pulls the scale towards 1.
        self.zero_centered_gamma = zero_centered_gamma or config.layernorm_zero_centered_gamma
        # Like Megatron-Core's layers: the default device (CPU, or meta inside `torch.device("meta")`)
        # with CPU initialization, else the current CUDA device.
        device = None if config.use_cpu_initialization else torch.cuda.current_device()
        factory = dict(device=device, dtype=config.params_dtype)
        init = torch.zeros if self.zero_centered_gamma else torch.ones
        self.weight = torch.nn.Parameter(init(hidden_size, **factory))
        self.bias = (
            torch.nn.Parameter(torch.zeros(hidden_size, **factory))
            if self.normalization == "LayerNorm"
            else None
        )
        for param in self.parameters():
            # Read by Megatron-Core: all-reduce these grads over TP when config.sequence_parallel.
            param.sequence_parallel = config.sequence_parallel

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = self.weight + 1 if self.zero_centered_gamma else self.weight
        if self.normalization == "RMSNorm":
            return F.rms_norm(x, (x.shape[-1],), weight, self.eps)
        return F.layer_norm(x, (x.shape[-1],), weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.normalization}, {self.weight.shape[0]}, eps={self.eps}"


@functools.cache
def fixed_eps_norm(eps: float) -> type:
    """SequenceParallelNorm whose epsilon is `eps` whatever its builder passes. Megatron-Core builds
    multi-latent attention's q / kv latent norms with layernorm_epsilon (0.16.1, 0.19.2); transformers'
    DeepSeek-style attention (GLM-4.7-Flash) gives them a fixed 1e-6 while its other norms use rms_norm_eps."""

    class FixedEpsNorm(SequenceParallelNorm):
        def __init__(self, config, hidden_size: int, eps: float | None = None, **kwargs) -> None:
            super().__init__(config, hidden_size, eps=fixed, **kwargs)

    fixed = float(eps)
    FixedEpsNorm.__qualname__ = f"FixedEpsNorm[{fixed}]"
    return FixedEpsNorm
