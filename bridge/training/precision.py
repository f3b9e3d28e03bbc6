"""Precision from `mixed_precision.precision`: bf16/fp16 with CUDA; on CPU both fall back to fp32.

Megatron-Core's reduced-precision paths (Float16Module, grad scaler, fused kernels) assume CUDA; on a
CPU run the same loop trains in fp32, and says so once.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from bridge.errors import ConfigError

logger = logging.getLogger(__name__)

_PRECISIONS = {"bf16_mixed": "bf16", "fp16_mixed": "fp16", "fp32": "fp32"}
_warned = False


@dataclass(frozen=True)
class Precision:
    name: str  # "bf16" | "fp16" | "fp32": what actually runs

    @property
    def bf16(self) -> bool:
        return self.name == "bf16"

    @property
    def fp16(self) -> bool:
        return self.name == "fp16"

    @property
    def torch_dtype(self):
        import torch

        return {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[self.name]


def resolve_precision(requested: str, cuda_available: bool) -> Precision:
    global _warned
    if requested not in _PRECISIONS:
        raise ConfigError(
            f"mixed_precision.precision={requested!r} is not known: use one of {', '.join(_PRECISIONS)}"
        )
    name = _PRECISIONS[requested]
    if name != "fp32" and not cuda_available:
        if not _warned:
            logger.warning("mixed_precision.precision=%s needs CUDA; training in fp32 on CPU", requested)
            _warned = True
        name = "fp32"
    return Precision(name)
