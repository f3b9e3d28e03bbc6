"""How the planner splits the layers over pipeline stages, uneven when pp does not divide them. Pure Python.

Megatron-Core places uneven stages with `num_layers_in_first_pipeline_stage` and
`num_layers_in_last_pipeline_stage`: the middle stages share the rest evenly. The planner gives the middle
stages the most layers and the first (embedding) and last (output layer and loss) stages the remainder,
as Megatron-Bridge's DeepSeek-V3 layout does (61 layers on 16 stages: 3, 4 x 14, 2). Memory and speed are
sized on the heaviest stage: the planner checks the layout as an even split of `heaviest` layers per
stage (`sizing_shape`), which no real stage exceeds.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

from bridge.parallel.layout import ModelShape


@dataclass(frozen=True)
class StageSplit:
    """Layers per pipeline stage: first, each middle one, last (all equal when even)."""

    pp: int
    first: int
    middle: int
    last: int

    @property
    def even(self) -> bool:
        return self.first == self.middle == self.last

    @property
    def heaviest(self) -> int:
        return max(self.first, self.middle, self.last)

    def describe(self) -> str:
        if self.even:
            return f"{self.middle} layers per stage"
        if self.pp == 2:
            return f"uneven stages: first {self.first}, last {self.last} layers"
        return f"uneven stages: first {self.first}, {self.pp - 2} x {self.middle}, last {self.last} layers"


def stage_split(num_layers: int, pp: int) -> StageSplit | None:
    """The split of `num_layers` over `pp` stages (None: fewer layers than stages)."""
    if pp < 1 or num_layers < pp:
        return None
    if num_layers % pp == 0:
        per = num_layers // pp
        return StageSplit(pp, per, per, per)
    if pp == 2:
        return StageSplit(2, num_layers - num_layers // 2, 0, num_layers // 2)
    middle = -(-num_layers // pp)
    while middle > 1 and num_layers - middle * (pp - 2) < 2:
        middle -= 1
    rest = num_layers - middle * (pp - 2)
    if rest < 2:
        return None
    last = rest // 2
    first = rest - last
    if max(first, last) > middle:  # the ends may not outweigh the middle: spread the excess
        return None
    return StageSplit(pp, first, middle, last)


@functools.lru_cache(maxsize=1024)
def sizing_shape(shape: ModelShape, split: StageSplit) -> ModelShape:
    """`shape` with `split.heaviest` layers on every stage: what the layout rules and memory check."""
    layers = split.heaviest * split.pp
    if layers == shape.num_layers:
        return shape
    freq = shape.moe_layer_freq
    if isinstance(freq, (list, tuple)):
        # the extra layers are the heavier kind (MoE when the model has any): conservative
        pad = 1 if any(freq) else 0
        freq = tuple(freq[:layers]) + (pad,) * max(0, layers - len(freq))
    return replace(shape, num_layers=layers, moe_layer_freq=freq)
