"""Optimizer config and LR schedule from the config sections, checked against hand-computed values."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from bridge.config.sections import OptimizerConfig, SchedulerConfig
from bridge.errors import ConfigError
from bridge.training.optim import build_scheduler, megatron_optimizer_config, scheduler_steps
from bridge.training.precision import resolve_precision


class _Opt:
    """The part of a Megatron optimizer the scheduler touches."""

    def __init__(self):
        self.param_groups = [{"params": [], "wd_mult": 1.0}, {"params": [], "wd_mult": 0.0}]


def test_cosine_schedule_with_warmup_matches_hand_computed_values():
    opt_cfg = OptimizerConfig(lr=3e-4, min_lr=3e-5, weight_decay=0.1)
    sched_cfg = SchedulerConfig(lr_decay_style="cosine", lr_warmup_iters=2, lr_decay_iters=10)
    opt = _Opt()
    sched = build_scheduler(opt, opt_cfg, sched_cfg, train_iters=12, global_batch_size=8)
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
    build_scheduler(
        opt,
        OptimizerConfig(lr=1.0, min_lr=0.0),
        SchedulerConfig(lr_decay_style="linear", lr_warmup_iters=0),
        train_iters=4,
        global_batch_size=2,
    ).step(increment=2)
    assert opt.param_groups[0]["lr"] == pytest.approx(0.75)
    opt = _Opt()
    sched = build_scheduler(
        opt,
        OptimizerConfig(lr=1.0, min_lr=0.0),
        SchedulerConfig(lr_decay_style="constant", lr_warmup_iters=4),
        train_iters=4,
        global_batch_size=2,
    )
    for _ in range(6):
        sched.step(increment=2)
    assert opt.param_groups[0]["lr"] == pytest.approx(1.0)


def test_warmup_longer_than_decay_is_a_config_error():
    with pytest.raises(ConfigError, match="scheduler.lr_warmup_iters=2000"):
        scheduler_steps(SchedulerConfig(lr_warmup_iters=2000), train_iters=3, global_batch_size=8)
    assert scheduler_steps(SchedulerConfig(lr_warmup_iters=0), train_iters=3, global_batch_size=8) == (0, 24)


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
        resolve_precision("fp32", cuda_available=False),
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
    with pytest.raises(ConfigError, match="optimizer.optimizer='lamb'"):
        megatron_optimizer_config(SimpleNamespace(optimizer="lamb"), resolve_precision("fp32", False))


def test_bf16_on_cpu_falls_back_to_fp32_with_one_warning(caplog):
    import bridge.training.precision as precision

    precision._warned = False
    with caplog.at_level("WARNING"):
        first = resolve_precision("bf16_mixed", cuda_available=False)
        second = resolve_precision("bf16_mixed", cuda_available=False)
    assert first.name == second.name == "fp32"
    assert sum("needs CUDA" in r.message for r in caplog.records) == 1
    assert resolve_precision("bf16_mixed", cuda_available=True).bf16
    with pytest.raises(ConfigError, match="mixed_precision.precision='fp8'"):
        resolve_precision("fp8", cuda_available=True)
