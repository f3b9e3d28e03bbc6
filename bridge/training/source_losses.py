"""Per-source validation losses of blended finetuning data (`dataset.data_paths` with weights).

The validation split's samples carry their source as a one-hot vector (bridge.training.data.blend). A
loss function given that [rows, sources] matrix reports, beside its objective's [sum, count], the
objective's [sum, count] of each source under `by_source(objective)`: a [sources, 2] tensor that the loop
sums over micro batches and data-parallel ranks like the other reports. A source's loss is then its sum
over its count: the objective's mean over that source's validation tokens (pairs, for DPO), which is what
the same model gives on that source's samples evaluated alone. The blend's loss is unchanged.
"""

from __future__ import annotations

import torch

SUFFIX = " by source"


def by_source(objective: str) -> str:
    """The report key of an objective's per-source [sum, count] rows."""
    return objective + SUFFIX


def source_report(sums: torch.Tensor, counts: torch.Tensor, source: torch.Tensor) -> torch.Tensor:
    """[sources, 2]: per source, the sum of the rows' `sums` [rows] and of their `counts` [rows] over the
    rows of that source (`source`: [rows, sources] one-hot)."""
    one_hot = source.to(device=sums.device, dtype=torch.float32)
    rows = torch.stack([sums.detach().float(), counts.detach().float()], dim=-1)  # [rows, 2]
    return one_hot.t() @ rows


def source_means(totals: dict, objective: str, names: tuple[str, ...]) -> dict[str, float]:
    """Each source's mean (name -> sum / count) from the reduced totals; {} when none were reported (an
    unblended run). A source with no token in the evaluated batches is left out (its mean is undefined)."""
    rows = totals.get(by_source(objective))
    if rows is None:
        return {}
    out = {}
    for name, (s, n) in zip(names, rows.tolist(), strict=True):
        if n > 0:
            out[name] = s / n
    return out
