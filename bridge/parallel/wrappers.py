"""The GPTModel inside a training chunk, whatever wrapped it (Megatron DDP / FSDP, Float16Module,
torch DDP): the one unwrap helper of checkpoints and conversion."""

from __future__ import annotations

from typing import Any


def unwrap(chunk: Any) -> Any:
    """The innermost module of one chunk: wrappers all keep the wrapped module in `.module`."""
    while hasattr(chunk, "module"):
        chunk = chunk.module
    return chunk


def unwrap_all(chunks: Any) -> list:
    """unwrap() of every chunk; a single module counts as one chunk."""
    items = list(chunks) if isinstance(chunks, (list, tuple)) else [chunks]
    return [unwrap(c) for c in items]
