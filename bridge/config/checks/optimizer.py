"""The `optimizer` and `scheduler` sections, and the schedule lengths Megatron-Core's scheduler gets."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bridge.config import sections as S
from bridge.config.checks.muon import check_muon
from bridge.config.checks.rules import one_of, positive
from bridge.errors import config_error

if TYPE_CHECKING:
    from bridge.config.container import ConfigContainer


def check_optimizer(cfg: ConfigContainer) -> list[str]:
    o = cfg.optimizer
    one_of("optimizer.optimizer", o.optimizer, S.OPTIMIZERS)
    if not o.lr > 0:
        raise config_error("optimizer.lr", o.lr, "must be > 0", "give a learning rate such as 3e-4")
    if not 0 <= o.min_lr <= o.lr:
        raise config_error(
            "optimizer.min_lr", o.min_lr, f"must be between 0 and optimizer.lr ({o.lr})", "lower it"
        )
    if o.weight_decay < 0:
        raise config_error("optimizer.weight_decay", o.weight_decay, "must be >= 0", "use e.g. 0.1")
    for name in ("adam_beta1", "adam_beta2", "sgd_momentum"):
        value = getattr(o, name)
        if not 0 <= value < 1:
            raise config_error(f"optimizer.{name}", value, "must be in [0, 1)", "use e.g. 0.9")
    if not o.adam_eps > 0:
        raise config_error("optimizer.adam_eps", o.adam_eps, "must be > 0", "use e.g. 1e-5")
    if o.clip_grad < 0:
        raise config_error(
            "optimizer.clip_grad", o.clip_grad, "must be >= 0 (0 = no clipping)", "use e.g. 1.0"
        )
    check_muon(cfg)
    strategy = cfg.distributed.strategy
    if strategy == "megatron_fsdp" and not o.use_distributed_optimizer:
        raise config_error(
            "optimizer.use_distributed_optimizer",
            False,
            "strategy megatron_fsdp shards optimizer state through "
            "Megatron-Core's distributed optimizer and needs it",
            "set optimizer.use_distributed_optimizer=true",
        )
    if strategy in ("fsdp2", "ddp") and o.use_distributed_optimizer:
        return [
            f"optimizer.use_distributed_optimizer=true has no effect with strategy {strategy} "
            "(it is Megatron-Core's ZeRO-1 for strategy megatron); set it to false to silence this."
        ]
    return []


def scheduler_iters(cfg: ConfigContainer) -> tuple[int, int]:
    """(warmup, decay) lengths in iterations, as Megatron-Core's OptimizerParamScheduler gets them."""
    s = cfg.scheduler
    decay = s.lr_decay_iters if s.lr_decay_iters is not None else cfg.train.train_iters
    warmup = s.lr_warmup_iters
    if s.lr_decay_style == "constant" and warmup >= decay:
        decay = warmup + 1  # nothing decays; Megatron-Core still asserts warmup < decay
    return warmup, decay


def check_scheduler(cfg: ConfigContainer) -> None:
    s = cfg.scheduler
    one_of("scheduler.lr_decay_style", s.lr_decay_style, S.LR_DECAY_STYLES)
    positive("scheduler.lr_warmup_iters", s.lr_warmup_iters, zero_ok=True)
    positive("scheduler.lr_decay_iters", s.lr_decay_iters, none_ok=True)
    decay = s.lr_decay_iters if s.lr_decay_iters is not None else cfg.train.train_iters
    source = (
        "scheduler.lr_decay_iters"
        if s.lr_decay_iters is not None
        else "train.train_iters (lr_decay_iters=null)"
    )
    if s.lr_decay_style != "constant" and s.lr_warmup_iters >= decay:
        raise config_error(
            "scheduler.lr_warmup_iters",
            s.lr_warmup_iters,
            f"warmup must be shorter than the decay: {source} = {decay} "
            "(Megatron-Core's scheduler needs warmup < decay)",
            f"set scheduler.lr_warmup_iters < {decay} (e.g. scheduler.lr_warmup_iters=0 for short runs)",
        )
    one_of("scheduler.weight_decay_incr_style", s.weight_decay_incr_style, ("constant", "linear", "cosine"))
    wd = cfg.optimizer.weight_decay
    start = wd if s.start_weight_decay is None else s.start_weight_decay
    end = wd if s.end_weight_decay is None else s.end_weight_decay
    if not 0 <= start <= end:  # Megatron-Core's OptimizerParamScheduler asserts 0 <= start_wd <= end_wd
        raise config_error(
            "scheduler.start_weight_decay",
            start,
            f"must be between 0 and scheduler.end_weight_decay ({end}); null follows optimizer.weight_decay",
            "set 0 <= scheduler.start_weight_decay <= scheduler.end_weight_decay",
        )
    if not 0 <= s.lr_warmup_init <= cfg.optimizer.lr:
        raise config_error(
            "scheduler.lr_warmup_init",
            s.lr_warmup_init,
            f"must be between 0 and optimizer.lr ({cfg.optimizer.lr})",
            "use 0.0",
        )
