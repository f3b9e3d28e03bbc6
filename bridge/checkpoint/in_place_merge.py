"""Loading a model's factory-built tensors without merging copies of what is already in place.

Megatron-Core saves some parameters as several checkpoint tensors through a ShardedTensorFactory: a gated
MLP's `linear_fc1.weight` as its gate and up halves, grouped experts one tensor per expert. At load,
`build_fn` cuts the parameter into those tensors, torch DCP reads the checkpoint into them, and `merge_fn`
(its inverse, Megatron-Core's contract) makes the parameter's tensor out of them again, for the caller to
copy into the parameter. When `build_fn` cut *views* of the parameter, DCP has already written into the
parameter itself, and the merge (a `torch.cat` of a new tensor) and the copy back are two passes over the
weights for nothing: Llama-3.2-1B's gated MLPs are 1 GB of its 2.47 GB in bf16.

`merge_in_place(sharded_state_dict)` wraps each factory's merge: when the loaded pieces are contiguous,
non-overlapping views of the parameter's own memory that together cover it exactly (so `build_fn` was
pure slicing of it), the parameter is returned as it is, which is what `merge_fn(build_fn(x))` gives by
Megatron-Core's contract; any other pieces go through the factory's own merge.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


def _span(t: torch.Tensor) -> tuple[int, int]:
    start = t.data_ptr()
    return start, start + t.numel() * t.element_size()


def tiles(whole: torch.Tensor, parts: list[Any]) -> bool:
    """Whether `parts` are contiguous views of `whole`'s memory that cover it exactly, without overlap."""
    if not parts or not whole.is_contiguous():
        return False
    storage = whole.untyped_storage().data_ptr()
    spans = []
    for p in parts:
        if not isinstance(p, torch.Tensor) or p.dtype != whole.dtype or not p.is_contiguous():
            return False
        if p.untyped_storage().data_ptr() != storage:
            return False
        spans.append(_span(p))
    spans.sort()
    start, end = _span(whole)
    if spans[0][0] != start or spans[-1][1] != end:
        return False
    return all(a[1] == b[0] for a, b in zip(spans, spans[1:], strict=False))


def _leaves(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [x for v in value.values() for x in _leaves(v)]
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in _leaves(v)]
    return [value]


def _in_place(whole: torch.Tensor, merge: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def merged(loaded: Any) -> Any:
        return whole if tiles(whole, _leaves(loaded)) else merge(loaded)

    return merged


def merge_in_place(sharded_state_dict: dict) -> None:
    """Wrap the merge of every ShardedTensorFactory in `sharded_state_dict` (in place; see the module)."""
    from megatron.core.dist_checkpointing.dict_utils import nested_values
    from megatron.core.dist_checkpointing.mapping import ShardedTensorFactory

    for value in nested_values(sharded_state_dict):
        if isinstance(value, ShardedTensorFactory) and isinstance(value.data, torch.Tensor):
            value.merge_fn = _in_place(value.data, value.merge_fn)
