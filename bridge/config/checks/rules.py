"""The two shapes most rules share: a value among choices, a number above a bound."""

from __future__ import annotations

from bridge.errors import config_error


def one_of(field: str, value, choices) -> None:
    if value not in choices:
        raise config_error(
            field, value, f"must be one of {', '.join(map(str, choices))}", "pick one of those"
        )


def positive(field: str, value, *, zero_ok: bool = False, none_ok: bool = False) -> None:
    if value is None and none_ok:
        return
    low = 0 if zero_ok else 1
    if value is None or value < low:
        raise config_error(
            field, value, f"must be >= {low}" + (" or null" if none_ok else ""), f"give a number >= {low}"
        )
