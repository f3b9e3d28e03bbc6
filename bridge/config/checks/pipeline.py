"""distributed.pp_schedule and distributed.scale_grads_in_schedule against the layout and the batch
(docs/parallelism.md, "Pipeline schedules"). Each rule is one small check; `check_pipeline` runs them in
order and returns the notes (warnings) of settings that have no effect or cost time."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bridge.errors import config_error
from bridge.parallel import schedules

if TYPE_CHECKING:
    from bridge.config.container import ConfigContainer
    from bridge.config.sections import DistributedConfig
    from bridge.parallel.layout import ParallelLayout


def check_pipeline(cfg: ConfigContainer, layout: ParallelLayout, running: frozenset[str]) -> list[str]:
    """Normalises the schedule's spelling (interleaved1f1b) in `cfg`; raises on the first broken rule.
    `running`: the GPU performance settings this machine runs (bridge.config.performance)."""
    d = cfg.distributed
    given = d.pp_schedule
    normalize_schedule_name(d)
    check_scale_grads_flag(d)
    if layout.pp == 1:
        return no_pipeline_notes(d, given)
    vpp = layout.vpp  # model.virtual_pipeline_model_parallel_size, as the layout holds it
    name = schedules.effective(d.pp_schedule, vpp)
    check_interleaving(name, vpp)
    if schedules.SCHEDULES[name].engine == "megatron":
        if name == "interleaved_1f1b":
            check_interleaved_microbatches(cfg, layout, microbatches_per_step(cfg, layout))
        return megatron_schedule_notes(d, name)
    check_torch_schedule_stages(name, vpp)
    micro = microbatches_per_step(cfg, layout)
    check_microbatch_rule(cfg, layout, name, micro)
    if name == "zero_bubble":
        check_zero_bubble(cfg, running)
    check_per_token_loss(cfg)
    check_mtp_schedule(cfg, name)
    return gpipe_bubble_notes(layout, name, micro)


def normalize_schedule_name(d: DistributedConfig) -> None:
    """A known schedule name, written the canonical way (in place)."""
    if d.pp_schedule is None:
        return
    name = schedules.normalize(d.pp_schedule)
    if name not in schedules.NAMES:
        raise config_error(
            "distributed.pp_schedule",
            d.pp_schedule,
            f"must be one of {', '.join(schedules.NAMES)}",
            "pick one of those",
        )
    d.pp_schedule = name


def check_scale_grads_flag(d: DistributedConfig) -> None:
    if not isinstance(d.scale_grads_in_schedule, bool):
        raise config_error(
            "distributed.scale_grads_in_schedule",
            d.scale_grads_in_schedule,
            "must be true or false",
            "use false",
        )


def no_pipeline_notes(d: DistributedConfig, given: str | None) -> list[str]:
    """The schedule settings that have no effect with pipeline size 1."""
    notes = []
    if given is not None:
        notes.append(f"distributed.pp_schedule={d.pp_schedule} has no effect with pipeline size 1.")
    if d.scale_grads_in_schedule:
        notes.append("distributed.scale_grads_in_schedule=true has no effect with pipeline size 1.")
    return notes


def check_interleaving(name: str, vpp: int | None) -> None:
    """Megatron-Core picks the interleaved schedule exactly when virtual stages are set."""
    if name == "interleaved_1f1b" and vpp is None:
        raise config_error(
            "distributed.pp_schedule",
            name,
            "interleaving needs virtual pipeline stages",
            "set model.virtual_pipeline_model_parallel_size (>= 2), or use pp_schedule 1f1b",
        )
    if name == "1f1b" and vpp is not None:
        raise config_error(
            "distributed.pp_schedule",
            name,
            f"model.virtual_pipeline_model_parallel_size = {vpp} makes Megatron-Core run the interleaved schedule",
            "use pp_schedule interleaved_1f1b (or null), or unset model.virtual_pipeline_model_parallel_size",
        )


def megatron_schedule_notes(d: DistributedConfig, name: str) -> list[str]:
    if d.scale_grads_in_schedule:
        return [
            f"distributed.scale_grads_in_schedule=true has no effect with pp_schedule {name}: Megatron-Core's "
            "schedules divide each micro batch's loss by the number of micro batches themselves."
        ]
    return []


def check_torch_schedule_stages(name: str, vpp: int | None) -> None:
    """torch.distributed.pipelining's schedules: v_schedule is refused; multi-stage schedules need several
    virtual stages per rank, single-stage ones exactly one."""
    if name == "v_schedule":
        raise config_error(
            "distributed.pp_schedule", name, schedules.V_SCHEDULE_REFUSAL, schedules.V_SCHEDULE_FIX
        )
    schedule = schedules.SCHEDULES[name]
    several = vpp is not None and vpp > 1
    if schedule.multi_stage and not several:
        raise config_error(
            "distributed.pp_schedule",
            name,
            f"{schedule.torch_class} is a multi-stage schedule: it needs several virtual stages per pipeline "
            f"rank, and model.virtual_pipeline_model_parallel_size = {vpp}",
            "set model.virtual_pipeline_model_parallel_size >= 2 (num_layers % (pp*vpp) == 0), or use gpipe",
        )
    if not schedule.multi_stage and several:
        raise config_error(
            "distributed.pp_schedule",
            name,
            f"{schedule.torch_class} runs one stage per pipeline rank, and "
            f"model.virtual_pipeline_model_parallel_size = {vpp} builds {vpp}",
            "unset model.virtual_pipeline_model_parallel_size, or use looped_bfs, dfs or zero_bubble",
        )


def microbatches_per_step(cfg: ConfigContainer, layout: ParallelLayout) -> int:
    t = cfg.train
    return t.global_batch_size // (t.micro_batch_size * layout.dp)


def check_microbatch_rule(cfg: ConfigContainer, layout: ParallelLayout, name: str, micro: int) -> None:
    """The schedule's rule on the number of micro batches per step (bridge.parallel.schedules)."""
    rule = schedules.microbatch_rule(name, layout.pp, micro)
    if rule:
        t = cfg.train
        raise config_error(
            "train.global_batch_size",
            t.global_batch_size,
            f"pp_schedule {name} with {micro} micro batches per step (global_batch_size / (micro_batch_size "
            f"{t.micro_batch_size} x dp {layout.dp})): {rule}",
            f"use a multiple of pp={layout.pp} micro batches per step, or another schedule",
        )


def check_interleaved_microbatches(cfg: ConfigContainer, layout: ParallelLayout, micro: int) -> None:
    """Megatron-Core's interleaved schedule (forward_backward_pipelining_with_interleaving, 0.16.1 and
    0.19.2) runs the micro batches in groups of N = model.microbatch_group_size_per_vp_stage (default pp)
    and raises on every rank unless pp <= N <= m and m % N is 0 or >= pp."""
    group = getattr(cfg.model, "microbatch_group_size_per_vp_stage", None)
    n = layout.pp if group is None else group
    t = cfg.train
    per_step = f"global_batch_size / (micro_batch_size {t.micro_batch_size} x dp {layout.dp})"
    fix_batch = (
        f"`train.global_batch_size={max(n, layout.pp) * t.micro_batch_size * layout.dp}` "
        f"(or any multiple of {n} micro batches per step)"
    )
    if group is not None and group < layout.pp:
        raise config_error(
            "model.microbatch_group_size_per_vp_stage",
            group,
            f"Megatron-Core's interleaved schedule needs at least pp = {layout.pp} micro batches per group",
            f"`~model.microbatch_group_size_per_vp_stage` (defaults to pp) or a value >= {layout.pp}",
        )
    remainder = micro % n
    if schedules.interleaved_microbatch_rule(layout.pp, group, micro) is not None:
        raise config_error(
            "train.global_batch_size",
            t.global_batch_size,
            f"the interleaved schedule (virtual stages) runs micro batches in groups of {n} "
            f"(model.microbatch_group_size_per_vp_stage, default pp = {layout.pp}); {micro} micro batches per "
            f"step ({per_step}) {'are fewer' if n > micro else f'leave a last group of {remainder} < pp'}, "
            "which Megatron-Core refuses on every rank",
            f"{fix_batch}, or `~model.virtual_pipeline_model_parallel_size` for the plain 1F1B schedule",
        )


def check_zero_bubble(cfg: ConfigContainer, running: frozenset[str]) -> None:
    """zero_bubble's separate weight-gradient pass (torch.autograd.grad) against FSDP2, activation
    recompute and gradient-accumulation fusion."""
    d, m = cfg.distributed, cfg.model
    if d.strategy == "fsdp2":
        raise config_error(
            "distributed.strategy",
            "fsdp2",
            "pp_schedule zero_bubble computes the weight gradients in a separate pass (torch.autograd.grad), "
            "outside FSDP2's post-backward reduce-scatter; measured on 2 CPU ranks, the step never finishes "
            "(gloo timed out after 60 s)",
            "use distributed.strategy=megatron with zero_bubble, or gpipe, looped_bfs or dfs with fsdp2",
        )
    if d.activation_checkpointing or m.recompute_granularity is not None:
        field = (
            "distributed.activation_checkpointing"
            if d.activation_checkpointing
            else "model.recompute_granularity"
        )
        raise config_error(
            field,
            True if d.activation_checkpointing else m.recompute_granularity,
            "pp_schedule zero_bubble computes input gradients with torch.autograd.grad, and Megatron-Core's "
            'activation recompute (CheckpointFunction) refuses it: "Checkpointing is not compatible '
            'with .grad(), please use .backward() if possible"',
            "turn activation recompute off, or use gpipe, looped_bfs or dfs (full backward)",
        )
    if "gradient_accumulation_fusion" in running:  # asked for, and this machine runs it
        raise config_error(
            "model.gradient_accumulation_fusion",
            True,
            "pp_schedule zero_bubble's weight pass runs the backward of Megatron-Core's linear autograd "
            "function again (the input pass already ran it once), and with fusion that backward adds the "
            "weight gradient into main_grad itself: every weight gradient would be added twice",
            "set model.gradient_accumulation_fusion=false, or use gpipe, looped_bfs or dfs",
        )


def check_per_token_loss(cfg: ConfigContainer) -> None:
    if getattr(cfg.model, "calculate_per_token_loss", False) and cfg.distributed.scale_grads_in_schedule:
        raise config_error(
            "distributed.scale_grads_in_schedule",
            True,
            "with model.calculate_per_token_loss the gradients are divided by the step's token count, and the "
            "schedule would divide them by the number of micro batches again",
            "set distributed.scale_grads_in_schedule=false",
        )


def check_mtp_schedule(cfg: ConfigContainer, name: str) -> None:
    if getattr(cfg.model, "mtp_num_layers", None):
        raise config_error(
            "model.mtp_num_layers",
            cfg.model.mtp_num_layers,
            f"the multi-token-prediction loss is scaled per micro batch by Megatron-Core's own pipeline "
            f"schedules (MTPLossAutoScaler); pp_schedule {name} runs on torch.distributed.pipelining, which "
            "does not scale it",
            "use distributed.pp_schedule=1f1b (or interleaved_1f1b with virtual stages), or train without MTP "
            "(model.mtp_num_layers=0)",
        )


def gpipe_bubble_notes(layout: ParallelLayout, name: str, micro: int) -> list[str]:
    if name == "gpipe" and layout.pp > 2:
        bubble = schedules.bubble_fraction("gpipe", layout.pp, micro)
        return [
            f"pp_schedule gpipe on pp={layout.pp}: {100 * bubble:.1f}% of each step is pipeline bubble "
            f"((p-1)/(m+p-1) with m={micro}) and every micro batch's activations are held until the backward; "
            "more micro batches per step shrink the bubble, looped_bfs / dfs / zero_bubble with "
            "model.virtual_pipeline_model_parallel_size shrink it further."
        ]
    return []
