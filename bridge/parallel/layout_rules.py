"""The layout's error wording: the names users type for each layout field, and the one way a layout rule
fails (`fail`). Pure Python; bridge.parallel.layout states the rules."""

from __future__ import annotations

from typing import Any, NoReturn

from bridge.errors import config_error
from bridge.parallel.sizes import SIZE_FIELDS

# The names users type (provider / ConfigContainer fields), shown next to the layout's short names.
USER_FIELD = {
    "world_size": "world_size (torchrun nnodes x nproc_per_node)",
    **{short: f"model.{name}" for name, short in SIZE_FIELDS.items()},
    "sequence_parallel": "model.sequence_parallel",
    "strategy": "distributed.strategy",
    "dp_replicate_size": "distributed.dp_replicate_size",
    "packed_sequence_size": "dataset.packed_sequence_size",
    "gpus_per_node": "distributed.gpus_per_node",
    "model": "the model shape (provider.model_shape())",
}


def fail(field: str, value: Any, rule: str, fix: str) -> NoReturn:
    """Raise the layout's ConfigError, naming both the layout's short name and the field users set."""
    name = USER_FIELD.get(field, field if field.startswith("model.") else f"model.{field}")
    shown = name if name.startswith(field) else f"{field} ({name})"
    raise config_error(shown, value, rule, fix)


def check_positive_int(field: str, value: Any, *, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        fail(field, value, "must be a positive integer", "give an integer >= 1")
