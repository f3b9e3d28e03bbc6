"""Dotted command-line overrides in Hydra's grammar, applied strictly to a config tree.

    model.tensor_model_parallel_size=2      set (the key must exist; the value is type-checked)
    +section.some_dict.new_key=1            add a key inside a dict-typed field
    ++key=value                             set, or add where adding is allowed
    ~checkpoint.save                        reset a field to its dataclass default / drop a dict key
    dataset.data_paths=[a,b]  key={x:1}     lists and dicts as values
    'dataset.split="969,30,1"'              quote strings that contain commas (else Hydra reads a sweep)

The grammar is hydra-core's own parser (only its override-parser module is imported; hydra's app
machinery is not). Semantics of each edit kind are in bridge/config/tree.py. Unknown keys fail with the
closest existing keys suggested; values of the wrong type name the key, the value and the expected type.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from bridge.config import tree
from bridge.errors import ConfigError

T = TypeVar("T")


def _parse(overrides: Sequence[str]) -> list:
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import OverrideParseException

    parser = OverridesParser.create()
    parsed = []
    for text in overrides:
        try:
            parsed.extend(parser.parse_overrides([text]))
        except OverrideParseException as e:
            reason = e.message.split("\nSee https://", 1)[0].strip().replace("\n", " ")
            raise ConfigError(
                f"override {text!r} is not valid override syntax ({reason}). "
                "Fix: write key=value (+key=value adds, ~key deletes; quote strings with spaces or commas)."
            ) from None
    return parsed


def _value(ov) -> Any:
    if ov.is_sweep_override():
        raise ConfigError(
            f"override {ov.input_line!r}: a comma-separated value is a Hydra sweep, and sweeps are not "
            f"supported. Fix: for a list write {ov.key_or_group}=[a,b]; for a string containing commas quote it: "
            f"'{ov.key_or_group}=\"...\"'."
        )
    return ov.value()


def _reject_repeated_keys(parsed: list) -> None:
    """One edit per key: `k=5 k=7` (or `k=5 ~k`, `+k=1 ++k=2`) is a ConfigError naming both."""
    first: dict[str, str] = {}
    for ov in parsed:
        key = ov.key_or_group
        if key in first:
            raise ConfigError(f"{key} is given twice: {first[key]} and {ov.input_line}. Fix: keep one.")
        first[key] = ov.input_line


def override_keys(overrides: Sequence[str]) -> frozenset[str]:
    """The dotted keys `overrides` edit (in any form: key=, +key=, ++key=, ~key)."""
    return frozenset(ov.key_or_group for ov in _parse(overrides)) if overrides else frozenset()


def apply_overrides(cfg: T, overrides: Sequence[str], *, unique_keys: bool = False) -> T:
    """Return a new config tree with `overrides` applied in order (`cfg` is left unchanged).

    With unique_keys (the command line: bridge.config.compose), a key given twice in `overrides`, in
    any of its forms (key=, +key=, ++key=, ~key), is a ConfigError naming both; without it a later
    edit of a key replaces an earlier one (layered programmatic lists).
    """
    if not overrides:
        return cfg
    from hydra.core.override_parser.types import OverrideType

    parsed = _parse(overrides)
    if unique_keys:
        _reject_repeated_keys(parsed)
    node = tree.structured(cfg)
    known = tree.dotted_keys(cfg)
    for ov in parsed:
        key, source = ov.key_or_group, f"override {ov.input_line!r}"
        if ov.package is not None or "/" in key or not key:
            raise ConfigError(
                f"{source}: config groups and packages (key@pkg, group/option) do not exist here. "
                "Fix: use a dotted key such as model.num_layers=16."
            )
        if ov.type == OverrideType.DEL:
            value = None if ov.value() is None else _value(ov)
            tree.delete_key(node, key, value, known, source)
        elif ov.type == OverrideType.ADD:
            tree.add_key(node, key, _value(ov), known, source, force=False)
        elif ov.type == OverrideType.FORCE_ADD:
            tree.add_key(node, key, _value(ov), known, source, force=True)
        else:
            tree.set_key(node, key, _value(ov), known, source)
    return tree.to_object(node)
