"""Which parameters of a built model are adapters trained on a frozen base: the model says so itself.

Whoever attaches adapters (bridge.peft.apply_peft) marks each model chunk with a predicate on parameter
and state-dict key names. The checkpoint layer reads the mark to save the adapters alone and to load a
base under them, so it needs no knowledge of how adapters are made or named.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

# the attribute of an (unwrapped) model chunk holding the predicate; absent: the chunk has no adapters
_MARK = "adapter_param_predicate"


def mark_adapters(model: Any, is_adapter: Callable[[str], bool]) -> None:
    """Record on `model` which of its names (parameters, state-dict keys) belong to adapters."""
    setattr(model, _MARK, is_adapter)


def adapter_predicate(model: Any) -> Callable[[str], bool] | None:
    """The predicate `mark_adapters` recorded on `model`, or None for a model without adapters."""
    return getattr(model, _MARK, None)


def is_adapter_name(model: Any, name: str) -> bool:
    """True when `name` (a parameter or state-dict key of `model`) belongs to one of its adapters."""
    predicate = adapter_predicate(model)
    return predicate is not None and predicate(name)


def has_adapters(models: Iterable[Any]) -> bool:
    """True when any of these (unwrapped) models holds an adapter parameter."""
    return any(is_adapter_name(m, name) for m in models for name, _ in m.named_parameters())
