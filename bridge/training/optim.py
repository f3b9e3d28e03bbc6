"""Megatron-Core optimizer and LR scheduler from the `optimizer` / `scheduler` config sections.

Like Megatron-LM, the scheduler counts samples (iterations * global batch), so its state in a
checkpoint stays valid when the batch size changes.
"""

from __future__ import annotations

from typing import Any

from bridge.errors import ConfigError
from bridge.training.precision import Precision


def megatron_optimizer_config(
    opt_cfg: Any, precision: Precision, mp_cfg: Any = None, use_distributed_optimizer: bool | None = None
):
    from megatron.core.optimizer import OptimizerConfig

    if opt_cfg.optimizer not in ("adam", "sgd"):
        raise ConfigError(f"optimizer.optimizer={opt_cfg.optimizer!r} is not supported: use adam or sgd")
    return OptimizerConfig(
        optimizer=opt_cfg.optimizer,
        lr=float(opt_cfg.lr),
        min_lr=float(opt_cfg.min_lr),
        weight_decay=float(opt_cfg.weight_decay),
        adam_beta1=float(opt_cfg.adam_beta1),
        adam_beta2=float(opt_cfg.adam_beta2),
        adam_eps=float(opt_cfg.adam_eps),
        sgd_momentum=float(getattr(opt_cfg, "sgd_momentum", 0.9)),
        clip_grad=float(opt_cfg.clip_grad or 0.0),
        bf16=precision.bf16,
        fp16=precision.fp16,
        params_dtype=precision.torch_dtype,
        loss_scale=getattr(mp_cfg, "loss_scale", None),
        initial_loss_scale=float(getattr(mp_cfg, "initial_loss_scale", 2**32)),
        min_loss_scale=float(getattr(mp_cfg, "min_loss_scale", 1.0)),
        loss_scale_window=float(getattr(mp_cfg, "loss_scale_window", 1000)),
        hysteresis=int(getattr(mp_cfg, "hysteresis", 2)),
        use_distributed_optimizer=bool(
            opt_cfg.use_distributed_optimizer
            if use_distributed_optimizer is None
            else use_distributed_optimizer
        ),
    )


def build_optimizer(
    opt_cfg: Any,
    model_chunks: list,
    precision: Precision,
    mp_cfg: Any = None,
    use_distributed_optimizer: bool | None = None,
):
    from megatron.core.optimizer import get_megatron_optimizer

    config = megatron_optimizer_config(opt_cfg, precision, mp_cfg, use_distributed_optimizer)
    return get_megatron_optimizer(config, model_chunks)


def scheduler_steps(sched_cfg: Any, train_iters: int, global_batch_size: int) -> tuple[int, int]:
    """(warmup, decay) lengths in samples; checks what Megatron-Core would only assert."""
    decay_iters = sched_cfg.lr_decay_iters or train_iters
    warmup_iters = int(sched_cfg.lr_warmup_iters or 0)
    if decay_iters <= 0:
        raise ConfigError(
            f"scheduler.lr_decay_iters={decay_iters}: must be > 0 (None follows train.train_iters)"
        )
    if warmup_iters >= decay_iters and sched_cfg.lr_decay_style != "constant":
        raise ConfigError(
            f"scheduler.lr_warmup_iters={warmup_iters} must be smaller than the decay length "
            f"{decay_iters} (scheduler.lr_decay_iters, or train.train_iters when unset); lower "
            f"scheduler.lr_warmup_iters or raise scheduler.lr_decay_iters"
        )
    if warmup_iters >= decay_iters:  # constant: Megatron-Core still asserts warmup < decay
        decay_iters = warmup_iters + 1
    return warmup_iters * global_batch_size, decay_iters * global_batch_size


def build_scheduler(optimizer, opt_cfg: Any, sched_cfg: Any, train_iters: int, global_batch_size: int):
    from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler

    if sched_cfg.lr_decay_style not in ("cosine", "linear", "constant"):
        raise ConfigError(
            f"scheduler.lr_decay_style={sched_cfg.lr_decay_style!r} is not supported: use cosine, linear or constant"
        )
    warmup, decay = scheduler_steps(sched_cfg, train_iters, global_batch_size)
    override = bool(getattr(sched_cfg, "override_opt_param_scheduler", True))
    wd = float(opt_cfg.weight_decay)
    return OptimizerParamScheduler(
        optimizer,
        init_lr=float(getattr(sched_cfg, "lr_warmup_init", 0.0)),
        max_lr=float(opt_cfg.lr),
        min_lr=float(opt_cfg.min_lr),
        lr_warmup_steps=warmup,
        lr_decay_steps=decay,
        lr_decay_style=sched_cfg.lr_decay_style,
        start_wd=wd,
        end_wd=wd,
        wd_incr_steps=max(train_iters * global_batch_size, 1),
        wd_incr_style="constant",
        use_checkpoint_opt_param_scheduler=not override,
        override_opt_param_scheduler=override,
    )
