"""Optimizer config and LR schedule from the config sections, checked against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from bridge.config.container import ConfigContainer
from bridge.config.run_plan import build_plan
from bridge.config.sections import MixedPrecisionConfig, OptimizerConfig, SchedulerConfig, TrainingConfig
from bridge.errors import ConfigError
from bridge.models.gpt_provider import GPTModelProvider
from bridge.training.optim import build_scheduler, megatron_optimizer_config


def plan_for(opt_cfg=None, sched_cfg=None, train_iters=10, global_batch_size=8, precision="fp32", cuda=False):
    """The RunPlan of a tiny model with these sections (validation included)."""
    model = GPTModelProvider(
        num_layers=2, hidden_size=64, num_attention_heads=4, seq_length=32, vocab_size=128
    )
    cfg = ConfigContainer(
        model=model,
        train=TrainingConfig(train_iters=train_iters, global_batch_size=global_batch_size),
        optimizer=opt_cfg or OptimizerConfig(),
        scheduler=sched_cfg or SchedulerConfig(lr_warmup_iters=0),
        mixed_precision=MixedPrecisionConfig(precision=precision),
    )
    cfg.validation.eval_interval = 0
    return build_plan(cfg, 1, cuda=cuda)


def scheduler(opt, opt_cfg, sched_cfg, train_iters, global_batch_size):
    plan = plan_for(opt_cfg, sched_cfg, train_iters, global_batch_size)
    return build_scheduler(opt, opt_cfg, sched_cfg, plan.schedule)


class _Opt:
    """The part of a Megatron optimizer the scheduler touches."""

    def __init__(self):
        self.param_groups = [{"params": [], "wd_mult": 1.0}, {"params": [], "wd_mult": 0.0}]


def test_cosine_schedule_with_warmup_matches_hand_computed_values():
    opt_cfg = OptimizerConfig(lr=3e-4, min_lr=3e-5, weight_decay=0.1)
    sched_cfg = SchedulerConfig(lr_decay_style="cosine", lr_warmup_iters=2, lr_decay_iters=10)
    opt = _Opt()
    sched = scheduler(opt, opt_cfg, sched_cfg, train_iters=12, global_batch_size=8)
    lrs = []
    for _ in range(12):
        sched.step(increment=8)  # one iteration = one global batch of samples
        lrs.append(opt.param_groups[0]["lr"])
    assert lrs[0] == pytest.approx(1.5e-4)  # warmup from lr_warmup_init=0
    assert lrs[1] == pytest.approx(3e-4)
    # iteration 6: 4 of 8 decay iterations done -> cosine midpoint
    assert lrs[5] == pytest.approx(3e-5 + 0.5 * (3e-4 - 3e-5) * (1 + math.cos(math.pi * 4 / 8)))
    assert lrs[9] == pytest.approx(3e-5) and lrs[11] == pytest.approx(3e-5)
    assert opt.param_groups[0]["weight_decay"] == pytest.approx(0.1)
    assert opt.param_groups[1]["weight_decay"] == 0.0  # no decay on norms / biases (wd_mult 0)


def test_linear_and_constant_schedules():
    opt = _Opt()
    scheduler(
        opt,
        OptimizerConfig(lr=1.0, min_lr=0.0),
        SchedulerConfig(lr_decay_style="linear", lr_warmup_iters=0),
        train_iters=4,
        global_batch_size=2,
    ).step(increment=2)
    assert opt.param_groups[0]["lr"] == pytest.approx(0.75)
    opt = _Opt()
    sched = scheduler(
        opt,
        OptimizerConfig(lr=1.0, min_lr=0.0),
        SchedulerConfig(lr_decay_style="constant", lr_warmup_iters=4),
        train_iters=4,
        global_batch_size=2,
    )
    for _ in range(6):
        sched.step(increment=2)
    assert opt.param_groups[0]["lr"] == pytest.approx(1.0)


def test_scheduler_weight_decay_overrides_the_optimizers_every_step():
    """Megatron-Bridge's recipes keep optimizer.weight_decay 0.1 and train with the scheduler's constant
    0.033: Megatron-Core's OptimizerParamScheduler writes get_wd() into every group at each step."""
    opt_cfg = OptimizerConfig(lr=1.0, min_lr=0.0, weight_decay=0.1)
    fixed = SchedulerConfig(lr_warmup_iters=0, start_weight_decay=0.033, end_weight_decay=0.033)
    opt = _Opt()
    sched = scheduler(opt, opt_cfg, fixed, train_iters=4, global_batch_size=2)
    sched.step(increment=2)
    assert sched.get_wd() == pytest.approx(0.033)
    assert opt.param_groups[0]["weight_decay"] == pytest.approx(0.033)
    assert opt.param_groups[1]["weight_decay"] == 0.0
    # linear from start to end over the run's samples (Megatron-Core's wd_incr_style)
    ramp = SchedulerConfig(
        lr_warmup_iters=0, start_weight_decay=0.0, end_weight_decay=0.1, weight_decay_incr_style="linear"
    )
    opt = _Opt()
    sched = scheduler(opt, opt_cfg, ramp, train_iters=4, global_batch_size=2)
    sched.step(increment=4)
    assert opt.param_groups[0]["weight_decay"] == pytest.approx(0.05)
    # unset: both follow optimizer.weight_decay, as before
    opt = _Opt()
    scheduler(opt, opt_cfg, SchedulerConfig(lr_warmup_iters=0), train_iters=4, global_batch_size=2).step(2)
    assert opt.param_groups[0]["weight_decay"] == pytest.approx(0.1)
    with pytest.raises(ConfigError, match="scheduler.start_weight_decay = 0.2"):
        plan_for(opt_cfg, SchedulerConfig(lr_warmup_iters=0, start_weight_decay=0.2, end_weight_decay=0.1))
    with pytest.raises(ConfigError, match="scheduler.weight_decay_incr_style"):
        plan_for(opt_cfg, SchedulerConfig(lr_warmup_iters=0, weight_decay_incr_style="step"))


def test_warmup_longer_than_decay_is_a_config_error():
    with pytest.raises(ConfigError, match="scheduler.lr_warmup_iters = 2000"):
        plan_for(sched_cfg=SchedulerConfig(lr_warmup_iters=2000), train_iters=3, global_batch_size=8)
    schedule = plan_for(
        sched_cfg=SchedulerConfig(lr_warmup_iters=0), train_iters=3, global_batch_size=8
    ).schedule
    assert (schedule.warmup_samples, schedule.decay_samples) == (0, 24)


def test_megatron_optimizer_config_carries_every_field():
    cfg = megatron_optimizer_config(
        OptimizerConfig(
            lr=1e-3,
            min_lr=1e-4,
            weight_decay=0.05,
            adam_beta1=0.8,
            adam_beta2=0.9,
            adam_eps=1e-6,
            clip_grad=0.5,
            use_distributed_optimizer=True,
        ),
        plan_for().precision,
        MixedPrecisionConfig(),
    )
    assert (
        cfg.lr,
        cfg.min_lr,
        cfg.weight_decay,
        cfg.adam_beta1,
        cfg.adam_beta2,
        cfg.adam_eps,
        cfg.clip_grad,
    ) == (1e-3, 1e-4, 0.05, 0.8, 0.9, 1e-6, 0.5)
    assert cfg.use_distributed_optimizer and not cfg.bf16 and cfg.params_dtype == torch.float32
    with pytest.raises(ConfigError, match="optimizer.optimizer = 'lamb'"):
        plan_for(OptimizerConfig(optimizer="lamb"))


def test_bf16_on_cpu_falls_back_to_fp32_with_one_warning():
    plan = plan_for(precision="bf16_mixed", cuda=False)
    assert plan.precision.name == "fp32" and plan.provider.params_dtype == "fp32" and not plan.provider.bf16
    assert sum("needs CUDA" in w for w in plan.warnings) == 1
    on_gpu = plan_for(precision="bf16_mixed", cuda=True)
    assert on_gpu.precision.bf16 and on_gpu.provider.bf16 and on_gpu.provider.params_dtype == "bf16"
    assert not any("needs CUDA" in w for w in on_gpu.warnings)
    with pytest.raises(ConfigError, match="mixed_precision.precision = 'fp8'"):
        plan_for(precision="fp8", cuda=True)
