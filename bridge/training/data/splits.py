"""Contiguous train / valid / test ranges of a document list, from the plan's split ratios."""

from __future__ import annotations


def split_ranges(n: int, ratios: tuple[float, float, float]) -> list[tuple[int, int]]:
    """Contiguous [begin, end) ranges of n items for train, valid, test (Megatron's rounding)."""
    bounds = [0]
    for r in ratios:
        bounds.append(bounds[-1] + int(round(r * n)))
    bounds = [min(b, n) for b in bounds]
    bounds[-1] = n
    return [(bounds[i], bounds[i + 1]) for i in range(3)]
