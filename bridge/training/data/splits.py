"""Train / valid / test split ratios in Megatron's "969,30,1" form."""

from __future__ import annotations

from bridge.errors import ConfigError


def parse_split(split: str) -> tuple[float, float, float]:
    try:
        parts = [float(x) for x in str(split).replace("/", ",").split(",") if x.strip()]
    except ValueError:
        parts = []
    if not 1 <= len(parts) <= 3 or any(p < 0 for p in parts) or sum(parts) <= 0:
        raise ConfigError(
            f"dataset.split={split!r} is not a split: give up to three non-negative weights for "
            "train,valid,test with a positive sum, e.g. dataset.split='969,30,1'"
        )
    parts += [0.0] * (3 - len(parts))
    total = sum(parts)
    return tuple(p / total for p in parts)  # type: ignore[return-value]


def split_ranges(n: int, split: str) -> list[tuple[int, int]]:
    """Contiguous [begin, end) ranges of n items for train, valid, test (Megatron's rounding)."""
    ratios = parse_split(split)
    bounds = [0]
    for r in ratios:
        bounds.append(bounds[-1] + int(round(r * n)))
    bounds = [min(b, n) for b in bounds]
    bounds[-1] = n
    return [(bounds[i], bounds[i + 1]) for i in range(3)]
