"""Which layout changes a checkpoint's distributed-optimizer state survives (bridge.training.pretrain),
by Megatron-Core's format rules: fully_reshardable over any TP / PP / DP, dp_reshardable over DP only."""

from __future__ import annotations

import pytest

from bridge.parallel.layout import ParallelLayout
from bridge.training.resume import optimizer_reshards


def line(world: int, **sizes: int) -> str:
    return ParallelLayout(world_size=world, **sizes).sizes_line()


@pytest.mark.parametrize(
    "saved, current, fmt, expected",
    [
        (line(2, tp=2), line(2), "fully_reshardable", True),
        (line(4, pp=2), line(2), "fully_reshardable", True),
        (line(2), line(1), "dp_reshardable", True),  # DP2 -> DP1
        (line(4, tp=2), line(2, tp=2), "dp_reshardable", True),
        (line(2, tp=2), line(2), "dp_reshardable", False),  # TP changes
        (line(4, pp=2), line(4, tp=2), "dp_reshardable", False),
        (line(2), line(1), None, False),  # no distributed-optimizer state saved
        (None, line(1), "fully_reshardable", False),  # no layout recorded
    ],
)
def test_optimizer_reshards(saved, current, fmt, expected):
    assert optimizer_reshards(saved, current, fmt) is expected
