"""The one error type for user mistakes, and the one helper that words it."""

from __future__ import annotations

from typing import Any


class ConfigError(ValueError):
    """A configuration the user can fix: the message names the field, the value, the rule and the fix."""


def config_error(field: str, value: Any, rule: str, fix: str) -> ConfigError:
    """The one wording of a user mistake: `<field> = <value>: <rule>. Fix: <fix>.`

    `field` is what the user wrote or can set (e.g. `model.num_layers`, `--tp`, `HF config rope_type`)."""
    return ConfigError(f"{field} = {value!r}: {rule}. Fix: {fix}.")
