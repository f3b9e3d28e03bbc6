"""Overrides the rest of the configuration makes ineffective (issue 43): one table of (field, when it is
dead, what wins instead, what to set). Megatron-Bridge's recipe values are kept; the user who edits a dead
field is told once (a warning of the dry run and of the run start), never silently ignored.

The rules follow Megatron-Core's OptimizerParamScheduler (0.16.1 and 0.19.2), which bridge builds from
these fields (bridge.training.optim.build_scheduler): get_wd returns start_wd/end_wd whenever they are set,
get_lr returns max_lr for the constant style (min_lr unused) and lr_warmup_init only during warmup."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class DeadField:
    field: str  # the dotted key whose override has no effect
    dead: Callable[[Any], bool]  # cfg -> True when the rest of the config makes it ineffective
    winner: Callable[[Any], str]  # cfg -> what decides instead (with its values)
    instead: Callable[[Any], str]  # cfg -> the override(s) that do what the user asked


def _wd_scheduled(cfg: Any) -> bool:
    s = cfg.scheduler
    return s.start_weight_decay is not None and s.end_weight_decay is not None


def _wd_constant(cfg: Any) -> bool:
    s, wd = cfg.scheduler, cfg.optimizer.weight_decay
    start = wd if s.start_weight_decay is None else s.start_weight_decay
    end = wd if s.end_weight_decay is None else s.end_weight_decay
    return start == end


TABLE: tuple[DeadField, ...] = (
    DeadField(
        "optimizer.weight_decay",
        _wd_scheduled,
        lambda c: (
            f"scheduler.start_weight_decay={c.scheduler.start_weight_decay} / "
            f"end_weight_decay={c.scheduler.end_weight_decay} (Megatron-Core's scheduler sets the decay every step)"
        ),
        lambda c: (
            f"scheduler.start_weight_decay={c.optimizer.weight_decay} "
            f"scheduler.end_weight_decay={c.optimizer.weight_decay}"
        ),
    ),
    DeadField(
        "optimizer.min_lr",
        lambda c: c.scheduler.lr_decay_style == "constant",
        lambda c: "scheduler.lr_decay_style=constant (the lr stays optimizer.lr after warmup)",
        lambda c: "scheduler.lr_decay_style=cosine (or linear) to decay towards optimizer.min_lr",
    ),
    DeadField(
        "scheduler.lr_decay_iters",
        lambda c: c.scheduler.lr_decay_style == "constant",
        lambda c: "scheduler.lr_decay_style=constant (no decay)",
        lambda c: "scheduler.lr_decay_style=cosine (or linear) as well",
    ),
    DeadField(
        "scheduler.lr_warmup_init",
        lambda c: c.scheduler.lr_warmup_iters == 0,
        lambda c: "scheduler.lr_warmup_iters=0 (no warmup: training starts at optimizer.lr)",
        lambda c: "scheduler.lr_warmup_iters=<N> as well",
    ),
    DeadField(
        "scheduler.weight_decay_incr_style",
        _wd_constant,
        lambda c: "the start and end weight decay are equal (nothing to increase)",
        lambda c: "scheduler.start_weight_decay and scheduler.end_weight_decay to different values as well",
    ),
)


def ineffective_overrides(cfg: Any, explicit: frozenset[str]) -> list[str]:
    """One warning per field in `explicit` (the keys the user set) that the configuration makes dead."""
    out = []
    for rule in TABLE:
        if rule.field in explicit and rule.dead(cfg):
            out.append(
                f"{rule.field}={_value(cfg, rule.field)} has no effect: {rule.winner(cfg)} wins. "
                f"Set {rule.instead(cfg)} instead."
            )
    return out


def _value(cfg: Any, dotted: str) -> Any:
    node = cfg
    for part in dotted.split("."):
        node = getattr(node, part)
    return node
