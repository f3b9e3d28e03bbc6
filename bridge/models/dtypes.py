"""The training dtypes by name: the one table of bridge's names, torch's and the checkpoint formats'.

Pure data: `torch_dtype()` imports torch only when called.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Dtype:
    name: str  # bridge's name: model.params_dtype, the precision that runs
    torch_name: str  # torch attribute, also HF config.json's "torch_dtype" / "dtype"
    safetensors: str  # safetensors header code


DTYPES: dict[str, Dtype] = {
    d.name: d
    for d in (
        Dtype("fp32", "float32", "F32"),
        Dtype("bf16", "bfloat16", "BF16"),
        Dtype("fp16", "float16", "F16"),
    )
}
BY_TORCH_NAME: dict[str, Dtype] = {d.torch_name: d for d in DTYPES.values()}


def torch_dtype(name: str):
    """torch.float32 / torch.bfloat16 / torch.float16 for "fp32" / "bf16" / "fp16"."""
    import torch

    return getattr(torch, DTYPES[name].torch_name)
