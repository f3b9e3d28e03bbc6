"""Merged weights for export: the base weight with its adapter folded in, per tensor-parallel shard.

LoRA: W' = W + s B A. DoRA: W' = m / ||W + s B A||_row * (W + s B A) (the row norms of a row-parallel
shard are all-reduced over TP). Biases are unchanged by both. The model itself is never modified: each
merged shard is a new tensor, made when the exporter reaches that weight (one alive at a time).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from bridge.conversion.model_params import LocalParam
from bridge.peft.apply import adapted_linears


def merged_local_tensor(chunks: Any) -> Callable[[LocalParam], torch.Tensor]:
    """For Exporter(local_tensor=...): the merged shard of an adapted weight, else the parameter.

    Collective for row-parallel DoRA weights: every TP rank calls it for the same weight at the same
    time (the exporter converts each parameter on all its holders together).
    """
    adapted = {id(item.base.weight): item for item in adapted_linears(chunks)}

    def local_tensor(lp: LocalParam) -> torch.Tensor:
        item = adapted.get(id(lp.param))
        if item is None:
            return lp.param.detach()
        return item.adapter.merged_weight(item.base)

    return local_tensor
