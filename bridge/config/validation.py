"""validate_config: every rule across the sections of a ConfigContainer, checked before any process starts.

The rules live next to the section they check, one module each in bridge/config/checks/; this is the one
entry point that runs them in order. Each violation raises one ConfigError worded by
bridge.errors.config_error: "<field> = <value>: <rule>. Fix: <fix>." Settings that are legal but have no
effect with the chosen strategy or precision come back as warnings (nothing is silently changed or
silently ignored). Pure Python: no torch import.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bridge.config import finetune_rules, performance
from bridge.config.checks.checkpoint import check_checkpoint
from bridge.config.checks.data import check_dataset
from bridge.config.checks.distributed import check_distributed, check_fsdp2, check_strategy_available
from bridge.config.checks.files import check_data_files
from bridge.config.checks.logger import check_logger, check_profiling
from bridge.config.checks.muon import check_qk_clip
from bridge.config.checks.optimizer import check_optimizer, check_scheduler
from bridge.config.checks.precision import check_fp8, check_precision
from bridge.config.checks.rules import positive
from bridge.config.checks.tokenizer import check_tokenizer
from bridge.config.checks.train import check_evaluation, check_train
from bridge.config.layout import run_layout
from bridge.config.resolve import resolve_config
from bridge.errors import config_error

if TYPE_CHECKING:
    from bridge.config.container import ConfigContainer
    from bridge.config.environment import Environment
    from bridge.parallel.layout import ParallelLayout


def validate_config(
    cfg: ConfigContainer, world_size: int, env: Environment
) -> tuple[ParallelLayout, list[str], tuple[performance.SettingState, ...]]:
    """Raise ConfigError on the first broken rule; return the layout (built here, once per run), the
    warnings and the GPU performance settings asked for, each active or inactive on `env`
    (bridge.config.performance).

    `env`: the machine the run is for (strategies and precisions that need CUDA or Transformer Engine
    are refused without them)."""
    cuda = env.cuda
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise config_error(
            "world_size", world_size, "must be a positive integer", "pass --world-size N (or WORLD_SIZE)"
        )
    resolve_config(cfg)
    cfg.model.finalize()
    layout = run_layout(cfg, world_size)
    warnings = list(layout.warnings)
    check_train(cfg, layout)
    check_evaluation(cfg)
    warnings += check_optimizer(cfg)
    check_scheduler(cfg)
    check_dataset(cfg)
    check_tokenizer(cfg)
    check_checkpoint(cfg)
    warnings += check_logger(cfg)
    # the GPU performance settings this machine runs (the plan reports them); rules read the effective value
    settings = performance.resolve(cfg, layout, env)
    running = frozenset(s.field for s in settings if s.active)
    warnings += check_distributed(cfg, layout, running)
    if cfg.distributed.pp_schedule == "gpipe":  # its bubble note replaces the layout's "set vpp" advice
        warnings = [w for w in warnings if "without interleaving has large pipeline bubbles" not in w]
    check_strategy_available(cfg.distributed.strategy, cuda)
    check_fsdp2(cfg, layout)
    finetune_rules.check_sft_data(cfg, cuda, running)
    finetune_rules.check_peft(cfg, running)
    finetune_rules.check_hf_start(cfg)
    warnings += check_precision(cfg)
    check_fp8(cfg, env)
    check_qk_clip(cfg, env)
    positive("rng.seed", cfg.rng.seed, zero_ok=True)
    warnings += check_profiling(cfg, world_size, cuda)
    # last: what the run would read (file contents), once every rule of the config itself holds
    check_data_files(cfg)
    return layout, warnings, settings
