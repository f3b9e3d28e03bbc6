"""The `distributed` section: the data-parallel strategy, its knobs and what it needs from the machine."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bridge.config.checks.pipeline import check_pipeline
from bridge.config.checks.rules import positive
from bridge.errors import config_error

if TYPE_CHECKING:
    from bridge.config.container import ConfigContainer
    from bridge.parallel.layout import ParallelLayout


def check_distributed(cfg: ConfigContainer, layout: ParallelLayout, running: frozenset[str]) -> list[str]:
    d, m = cfg.distributed, cfg.model
    warnings: list[str] = []
    positive("distributed.timeout_minutes", d.timeout_minutes)
    if d.dp_size is not None and d.dp_size != layout.dp:
        raise config_error(
            "distributed.dp_size",
            d.dp_size,
            f"the data-parallel size is derived as world / (tp * pp * cp) = {layout.world_size} / "
            f"({layout.tp} * {layout.pp} * {layout.cp}) = {layout.dp}",
            "leave distributed.dp_size unset (null), or change the world size or the model-parallel sizes",
        )
    warnings += check_pipeline(cfg, layout, running)
    # activation_checkpointing is full, uniform, one layer at a time: model fields saying the same agree
    same = (m.recompute_granularity, m.recompute_method, m.recompute_num_layers) == ("full", "uniform", 1)
    if d.activation_checkpointing and m.recompute_granularity is not None and not same:
        raise config_error(
            "distributed.activation_checkpointing",
            True,
            f"model.recompute_granularity = {m.recompute_granularity!r} already chooses what to recompute",
            "set one of them: distributed.activation_checkpointing (full recompute) or model.recompute_*",
        )
    megatron_ddp = d.strategy in ("megatron", "megatron_fsdp")
    if m.calculate_per_token_loss and d.strategy == "megatron" and d.average_in_collective:
        raise config_error(
            "distributed.average_in_collective",
            True,
            "with model.calculate_per_token_loss the gradients are summed across data-parallel ranks and divided "
            "by the step's token count; averaging in the collective would divide them by the data-parallel size "
            "as well (Megatron-Core's DistributedDataParallel refuses the pair)",
            "set distributed.average_in_collective=false",
        )
    if (
        d.strategy == "megatron_fsdp"
        and d.average_in_collective
        and not averages_in_collective(d.strategy, d.average_in_collective, m.num_moe_experts)
    ):
        warnings.append(MEGATRON_FSDP_DENSE_AVERAGE)
    if d.strategy == "megatron" and d.overlap_param_gather and not cfg.optimizer.use_distributed_optimizer:
        raise config_error(
            "distributed.overlap_param_gather",
            True,
            "overlapping the parameter all-gather needs the "
            "distributed optimizer (there is no gather without it)",
            "set distributed.overlap_param_gather=false, or optimizer.use_distributed_optimizer=true",
        )
    if not megatron_ddp and (unused := unused_ddp_settings_warning(d)):
        warnings.append(unused)
    return warnings


# Megatron-Core 0.16.1 and 0.19.2 (mcore_fsdp_adapter._init_dist_index) build Megatron-FSDP's expert
# data-parallel mesh only for a MoE model, then divide by that group's size whenever gradients are averaged
# in the collective (megatron_fsdp._init_fsdp_param_and_grad_buffer): on a dense model
# `get_dp_group(is_expert_parallel=True)` is None and the wrapper fails while being built.
MEGATRON_FSDP_DENSE_AVERAGE = (
    "distributed.average_in_collective=true: Megatron-FSDP cannot average in the collective for a dense "
    "model (Megatron-Core asks for the expert data-parallel group, which it builds only for MoE models); "
    "the gradients are divided by the data-parallel size before the reduce-scatter instead (the same "
    "average). Set distributed.average_in_collective=false to silence this."
)


def averages_in_collective(strategy: str, average_in_collective: bool, num_moe_experts: int | None) -> bool:
    """The average_in_collective Megatron-Core's DDP config gets: as set, except False for Megatron-FSDP
    on a dense model (MEGATRON_FSDP_DENSE_AVERAGE)."""
    if strategy == "megatron_fsdp" and not num_moe_experts:
        return False
    return average_in_collective


def unused_ddp_settings_warning(d) -> str | None:
    """The warning for Megatron-Core DDP settings left on under a strategy that does not use them (the
    recipes set them on for strategy megatron: the run's log shows it with logger.verbose only)."""
    if d.strategy in ("megatron", "megatron_fsdp"):
        return None
    knobs = [
        k
        for k in (
            "overlap_grad_reduce",
            "overlap_param_gather",
            "grad_reduce_in_fp32",
            "average_in_collective",
            "check_for_nan_in_grad",
        )
        if getattr(d, k)
    ]
    if not knobs:
        return None
    return (
        f"distributed.{', distributed.'.join(knobs)} are Megatron-Core DDP settings that strategy "
        f"{d.strategy} does not use."
    )


# Strategies whose engine needs CUDA, and why (measured: each fails on a CPU-only machine).
# (fsdp2 runs on PyTorch's own fully_shard over a DeviceMesh of this machine's device: CPU too.)
CUDA_ONLY_STRATEGIES = {
    "megatron_fsdp": (
        "Megatron-FSDP allocates its parameter and gradient buffers on torch.device('cuda', "
        "current_device()) and uses CUDA streams for its all-gathers, so it needs CUDA"
    ),
}


def check_strategy_available(strategy: str, cuda: bool) -> None:
    if not cuda and strategy in CUDA_ONLY_STRATEGIES:
        raise config_error(
            "distributed.strategy",
            strategy,
            f"cannot run on this machine (no CUDA): {CUDA_ONLY_STRATEGIES[strategy]}",
            "use distributed.strategy=megatron (sharded optimizer state through the distributed "
            "optimizer) or ddp on CPU",
        )


def check_fsdp2(cfg: ConfigContainer, layout: ParallelLayout) -> None:
    """The fsdp2 knobs (only with fsdp2), and what strategy fsdp2 (PyTorch fully_shard,
    bridge/training/strategies.py) does not do yet."""
    d = cfg.distributed
    if d.strategy != "fsdp2":
        for field, default in (("defer_fsdp_grad_sync", True), ("moe_reshard_after_forward", False)):
            if getattr(d, field) != default:
                raise config_error(
                    f"distributed.{field}",
                    getattr(d, field),
                    f"an FSDP2 setting, and strategy is {d.strategy!r} (Megatron-Core's DDP reduces "
                    "gradients after the last micro batch, overlapped with the backward)",
                    f"remove distributed.{field}, or set distributed.strategy=fsdp2",
                )
        return
    if d.moe_reshard_after_forward and layout.ep == 1:
        raise config_error(
            "distributed.moe_reshard_after_forward",
            True,
            "applies to the MoE mesh, which exists only with expert parallelism "
            f"(model.expert_model_parallel_size is {layout.ep})",
            "remove it, or set model.expert_model_parallel_size > 1",
        )
    if cfg.mixed_precision.precision == "fp16_mixed":
        raise config_error(
            "mixed_precision.precision",
            "fp16_mixed",
            "strategy fsdp2 has no fp16 loss scaler (as in Megatron-LM's and AutoModel's FSDP2)",
            "use bf16_mixed, or distributed.strategy=megatron for fp16",
        )
