"""Megatron-Core optimizer and LR scheduler from the `optimizer` / `scheduler` config sections.

Like Megatron-LM, the scheduler counts samples (iterations * global batch), so its state in a
checkpoint stays valid when the batch size changes.
"""

from __future__ import annotations

from bridge.config.plan import Precision, SchedulePlan
from bridge.config.sections import MixedPrecisionConfig, OptimizerConfig, SchedulerConfig


def megatron_optimizer_config(
    opt_cfg: OptimizerConfig,
    precision: Precision,
    mp_cfg: MixedPrecisionConfig,
    use_distributed_optimizer: bool | None = None,
):
    from megatron.core.optimizer import OptimizerConfig as McoreOptimizerConfig

    return McoreOptimizerConfig(
        optimizer=opt_cfg.optimizer,
        lr=float(opt_cfg.lr),
        min_lr=float(opt_cfg.min_lr),
        weight_decay=float(opt_cfg.weight_decay),
        adam_beta1=float(opt_cfg.adam_beta1),
        adam_beta2=float(opt_cfg.adam_beta2),
        adam_eps=float(opt_cfg.adam_eps),
        sgd_momentum=float(opt_cfg.sgd_momentum),
        clip_grad=float(opt_cfg.clip_grad or 0.0),
        bf16=precision.bf16,
        fp16=precision.fp16,
        params_dtype=precision.torch_dtype,
        loss_scale=mp_cfg.loss_scale,
        initial_loss_scale=float(mp_cfg.initial_loss_scale),
        min_loss_scale=float(mp_cfg.min_loss_scale),
        loss_scale_window=float(mp_cfg.loss_scale_window),
        hysteresis=int(mp_cfg.hysteresis),
        use_distributed_optimizer=bool(
            opt_cfg.use_distributed_optimizer
            if use_distributed_optimizer is None
            else use_distributed_optimizer
        ),
    )


def build_optimizer(
    opt_cfg: OptimizerConfig,
    model_chunks: list,
    precision: Precision,
    mp_cfg: MixedPrecisionConfig,
    use_distributed_optimizer: bool | None = None,
):
    from megatron.core.optimizer import get_megatron_optimizer

    config = megatron_optimizer_config(opt_cfg, precision, mp_cfg, use_distributed_optimizer)
    return get_megatron_optimizer(config, model_chunks)


def build_scheduler(optimizer, opt_cfg: OptimizerConfig, sched_cfg: SchedulerConfig, schedule: SchedulePlan):
    """Megatron-Core's scheduler over the plan's sample counts (validated: warmup < decay)."""
    from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler

    override = sched_cfg.override_opt_param_scheduler
    wd = float(opt_cfg.weight_decay)
    return OptimizerParamScheduler(
        optimizer,
        init_lr=float(sched_cfg.lr_warmup_init),
        max_lr=float(opt_cfg.lr),
        min_lr=float(opt_cfg.min_lr),
        lr_warmup_steps=schedule.warmup_samples,
        lr_decay_steps=schedule.decay_samples,
        lr_decay_style=sched_cfg.lr_decay_style,
        start_wd=wd,
        end_wd=wd,
        wd_incr_steps=schedule.total_samples,
        wd_incr_style="constant",
        use_checkpoint_opt_param_scheduler=not override,
        override_opt_param_scheduler=override,
    )
