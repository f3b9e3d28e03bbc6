"""Overrides the configuration makes ineffective (bridge.config.ineffective): the trap is real in
Megatron-Core's own OptimizerParamScheduler, the composed recipe says it once, and the suggested
overrides do what the dead one was meant to."""

from __future__ import annotations

import pytest

from bridge.config.compose import compose
from bridge.config.run_plan import SchedulePlan
from recipes import get_recipe

RECIPE = "llama32_1b_pretrain_config"  # Megatron-Bridge's values: weight_decay 0.1, scheduler's 0.033


def scheduler_wd_and_lr(cfg, step: int) -> tuple[float, float]:
    """Megatron-Core's scheduler, built by bridge from cfg, after `step` samples: (wd, lr)."""
    import torch

    from bridge.training.optim import build_scheduler

    param = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.AdamW([param], lr=1.0)
    opt.param_groups[0].update(wd_mult=1.0, lr_mult=1.0)
    plan = SchedulePlan(warmup_samples=10, decay_samples=100, total_samples=100)
    sched = build_scheduler(opt, cfg.optimizer, cfg.scheduler, plan)
    sched.step(step)
    return opt.param_groups[0]["weight_decay"], opt.param_groups[0]["lr"]


def test_weight_decay_override_is_dead_in_megatron_core_and_said_once():
    cfg, warnings = compose(get_recipe(RECIPE)(), overrides=["optimizer.weight_decay=0.2"])
    assert scheduler_wd_and_lr(cfg, 50)[0] == pytest.approx(0.033)  # the override changed nothing
    (w,) = [w for w in warnings if "optimizer.weight_decay" in w]
    assert "scheduler.start_weight_decay=0.033" in w and "has no effect" in w, w
    instead = w.split("Set ", 1)[1].removesuffix(" instead.").split()
    fixed, again = compose(get_recipe(RECIPE)(), overrides=instead)
    assert scheduler_wd_and_lr(fixed, 50)[0] == pytest.approx(0.2)
    assert not [w for w in again if "has no effect" in w]


def test_recipe_defaults_alone_say_nothing():
    _, warnings = compose(get_recipe(RECIPE)(), overrides=["train.train_iters=5"])
    assert not [w for w in warnings if "has no effect" in w]


def test_min_lr_with_constant_decay_is_dead_in_megatron_core_and_said():
    over = ["scheduler.lr_decay_style=constant", "optimizer.min_lr=1e-6", "optimizer.lr=1e-3"]
    cfg, warnings = compose(get_recipe(RECIPE)(), overrides=over)
    assert scheduler_wd_and_lr(cfg, 90)[1] == pytest.approx(1e-3)  # min_lr never reached
    assert any(w.startswith("optimizer.min_lr=1e-06 has no effect") for w in warnings), warnings
    cfg, _ = compose(get_recipe(RECIPE)(), overrides=[*over[1:], "scheduler.lr_decay_style=cosine"])
    assert scheduler_wd_and_lr(cfg, 100)[1] == pytest.approx(1e-6)


def test_warmup_init_without_warmup_is_said():
    _, warnings = compose(
        get_recipe(RECIPE)(), overrides=["scheduler.lr_warmup_iters=0", "scheduler.lr_warmup_init=1e-5"]
    )
    assert any(w.startswith("scheduler.lr_warmup_init=1e-05 has no effect") for w in warnings), warnings
