"""The seeds' sizing rules as a ranking: layouts that keep them first, the fastest of those wins. Pure Python.

The rules (docs/parallelism.md, "How `bridge plan` chooses a layout"), each waived for a size the user
fixed:
- large models (LARGE_MODEL_PP parameters and more) on more than one node put pipeline stages across
  nodes; smaller models use pipeline stages only when no layout without them fits (without recompute);
- tensor parallelism is sized by the active parameters (candidates.tp_start), larger only when no layout
  at that size that keeps the pipeline rule fits without recomputation;
- sequences of LONG_SEQUENCE tokens and more use context parallelism;
- expert parallelism is the main MoE dimension (ep > tp, pp and cp).
A layout that breaks fewer rules ranks first; among equals the step-time estimate decides, and ties
keep the candidates' order of preference.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from bridge.parallel.layout import ParallelLayout
from bridge.parallel.planner.request import LONG_SEQUENCE, Choice, PlanRequest, wants_pipeline


@dataclass(frozen=True)
class _Context:
    """What the rules need to know about all fitting layouts."""

    total: int
    tp_start: int
    flat_fits_plainly: bool  # a layout with pp = 1 fits without recomputation
    start_tp_fits_plainly: bool  # a layout with tp <= tp_start fits without recomputation


def rules_broken(req: PlanRequest, ctx: _Context, layout: ParallelLayout) -> tuple[str, ...]:
    broken = []
    if "pp" not in req.fixed:
        if wants_pipeline(req, ctx.total) and layout.pp == 1:
            broken.append("large models put pipeline stages across nodes")
        if not wants_pipeline(req, ctx.total) and layout.pp > 1 and ctx.flat_fits_plainly:
            broken.append("pipeline stages only where memory needs them (a layout without fits)")
    if "tp" not in req.fixed and layout.tp > ctx.tp_start and ctx.start_tp_fits_plainly:
        broken.append(f"tensor parallelism is sized by the active parameters (tp {ctx.tp_start} fits)")
    if req.seq >= LONG_SEQUENCE and "cp" not in req.fixed and layout.cp == 1:
        broken.append(f"sequences of {LONG_SEQUENCE} tokens and more use context parallelism")
    if req.model.is_moe and "ep" not in req.fixed and req.gpus > 1:
        if layout.ep <= max(layout.tp, layout.pp, layout.cp):
            broken.append("expert parallelism is the main MoE dimension (ep > tp, pp, cp)")
    return tuple(broken)


def rank(req: PlanRequest, total: int, tp_start: int, fitting: list[Choice]) -> list[Choice]:
    """`fitting` with each choice's broken rules filled in, fewest broken first, then fastest."""
    plain = [c for c in fitting if c.recompute == "none"]
    flat = any(c.layout.pp == 1 for c in plain)
    # the tp rule looks at layouts that keep the pipeline rule: more TP is how those fit
    pipeline_ok = [c for c in plain if (c.layout.pp > 1) == wants_pipeline(req, total) or not flat]
    ctx = _Context(total, tp_start, flat, any(c.layout.tp <= tp_start for c in pipeline_ok))
    judged = [replace(c, broken=rules_broken(req, ctx, c.layout)) for c in fitting]
    return sorted(judged, key=lambda c: (len(c.broken), -c.estimate.tokens_per_s_per_gpu))
