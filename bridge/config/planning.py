"""What a recipe's config decides for memory and for `bridge plan`, read once for both. Pure data.

The dry run's memory estimate (run_plan.RunPlan.memory) and `bridge plan --model <recipe>` take the
recomputation, the trainable (PEFT) parameters, the precision that runs, the optimizer (and whether it is
distributed), the pipeline schedule, sequence parallelism and the pipeline split fields from here, so the
plan of a recipe at the recipe's layout and data-parallel strategy (the sizes and --strategy the planner
otherwise chooses) is the dry run's (tests/unit/test_plan_agrees_with_dry_run.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bridge.config.sections import FP8_PRECISIONS, PRECISION_DTYPES
from bridge.models.provider_layout import stage_split
from bridge.parallel.param_count import adapter_parameters

if TYPE_CHECKING:
    from bridge.config.container import ConfigContainer
    from bridge.parallel.layout import ModelShape


def memory_recompute(cfg: ConfigContainer) -> str:
    """The memory model's recomputation: full when any recomputation is set. The estimate has no selective
    kind: a selective recipe's activations are sized as full recomputation's, a lower bound."""
    return "full" if cfg.distributed.activation_checkpointing or cfg.model.recompute_granularity else "none"


def trainable_parameters(cfg: ConfigContainer, shape: ModelShape) -> int | None:
    """With PEFT only the adapters train (their gradients and optimizer state are what the run holds); with
    a vision-language model's language model frozen, only the image side's unfrozen parts; None: every
    parameter trains."""
    peft = cfg.peft
    if getattr(cfg.model, "freeze_language_model", False) and not peft.scheme:
        return shape.vision_params - shape.frozen_params
    if not peft.scheme:
        return None
    return adapter_parameters(shape, peft.target_modules, peft.dim, magnitude=peft.scheme == "dora")


def _precision(requested: str, cuda: bool) -> str:
    """The planner's precision: what runs (fp32 on CPU), fp8 for the fp8 recipes (their GEMMs' peak; the
    memory model keeps 2-byte weights for fp8 as for bf16, as the dry run's estimate)."""
    if not cuda:
        return "fp32"
    return "fp8" if requested in FP8_PRECISIONS else PRECISION_DTYPES[requested]


def planner_settings(cfg: ConfigContainer, cuda: bool = True) -> dict[str, Any]:
    """PlanRequest keyword arguments of a recipe's config (bridge.parallel.planner.request.PlanRequest):
    the values the dry run plans with on a GPU (`cuda`), or on CPU (fp32)."""
    m, d = cfg.model, cfg.distributed
    shape = m.model_shape()
    return dict(
        seq_length=m.seq_length,
        global_batch_size=cfg.train.global_batch_size,
        micro_batch_size=cfg.train.micro_batch_size,
        precision=_precision(cfg.mixed_precision.precision, cuda),
        optimizer=cfg.optimizer.optimizer,
        recompute=memory_recompute(cfg),
        pp_schedule=d.pp_schedule,
        # a recipe at tp > 1 chose sequence parallelism; at tp = 1 it has no say (SP needs tp > 1)
        sequence_parallel=bool(m.sequence_parallel) if m.tensor_model_parallel_size > 1 else None,
        # the recipe's split, even when it is the even one: the dry run of the recipe tries no other
        split=stage_split(m),
        trainable_params=trainable_parameters(cfg, shape),
        distributed_optimizer=bool(cfg.optimizer.use_distributed_optimizer),
    )
