"""Training log lines in Megatron's format (existing parsers read them), plus TensorBoard / W&B.

    iteration        3/       3 | consumed samples: 24 | elapsed time per iteration (ms): 812.3 |
    learning rate: 3.000000E-04 | global batch size:     8 | lm loss: 1.003808E+01 | grad norm: 2.345 |
    tokens per second: 1234 | ...
(one line; the grad norm once, in Megatron's 3 decimals: runs are compared through pretrain()'s returned
per-iteration values, not the log). Printed on the last pipeline stage's first rank, which holds the loss.

The model-FLOPs throughput is per rank: Megatron's "throughput per GPU (TFLOP/s/GPU)" with CUDA, and
"throughput per rank (TFLOP/s/rank)" on CPU, where a rank is a process, not a GPU. With CUDA and a
device in bridge/training/peak_flops.py, " MFU: 45.2% |" follows it: that throughput over the device's
dense peak in the run's precision (no MFU on CPU, nor for a device or precision without a peak).
"""

from __future__ import annotations

import importlib.util
import logging
import math
import sys
from dataclasses import dataclass, field

from bridge.config.sections import LoggerConfig

logger = logging.getLogger("bridge.training")


def ensure_console_logging() -> None:
    """Make bridge.training's INFO lines visible on stdout when the application configured no logging."""
    if not logging.getLogger().handlers and not logger.handlers:
        handler = logging.StreamHandler(sys.stdout)
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
        logger.propagate = False
    if logger.level == logging.NOTSET or logger.level > logging.INFO:
        logger.setLevel(logging.INFO)


@dataclass
class IterationStats:
    iteration: int
    train_iters: int
    consumed_samples: int
    elapsed_ms: float
    learning_rate: float
    global_batch_size: int
    losses: dict[str, float]
    grad_norm: float | None = None
    loss_scale: float | None = None
    tokens_per_second: float | None = None
    tflops_per_gpu: float | None = None  # per rank: the name is Megatron's (one rank per GPU)
    # the unit tflops_per_gpu is counted in: "GPU" or "rank"; None = "GPU" when CUDA is available, else "rank"
    throughput_unit: str | None = None
    mfu: float | None = None  # model-FLOPs utilisation, a fraction of the device's peak (None: hidden)
    skipped_iterations: int = 0
    nan_iterations: int = 0
    extra: dict[str, str] = field(default_factory=dict)


def format_iteration_line(s: IterationStats) -> str:
    parts = [
        f" iteration {s.iteration:8d}/{s.train_iters:8d}",
        f" consumed samples: {s.consumed_samples}",
        f" elapsed time per iteration (ms): {s.elapsed_ms:.1f}",
        f" learning rate: {s.learning_rate:.6E}",
        f" global batch size: {s.global_batch_size:5d}",
    ]
    parts += [f" {key}: {value:.6E}" for key, value in s.losses.items()]
    if s.loss_scale is not None:
        parts.append(f" loss scale: {s.loss_scale:.1f}")
    if s.grad_norm is not None:
        parts.append(f" grad norm: {s.grad_norm:.3f}")
    if s.tokens_per_second is not None:
        parts.append(f" tokens per second: {s.tokens_per_second:.0f}")
    if s.tflops_per_gpu is not None:
        value = f"{s.tflops_per_gpu:.1f}" if s.tflops_per_gpu >= 1 else f"{s.tflops_per_gpu:.3g}"
        unit = s.throughput_unit or throughput_unit()
        parts.append(f" throughput per {unit} (TFLOP/s/{unit}): {value}")
    if s.mfu is not None:
        parts.append(f" MFU: {100.0 * s.mfu:.1f}%")
    parts.append(f" number of skipped iterations: {s.skipped_iterations:3d}")
    parts.append(f" number of nan iterations: {s.nan_iterations:3d}")
    parts += [f" {k}: {v}" for k, v in s.extra.items()]
    return " |".join(parts) + " |"


def throughput_unit() -> str:
    """What one rank of this process runs on, for the throughput label: "GPU" with CUDA, else "rank"."""
    try:
        import torch
    except ImportError:
        return "rank"
    return "GPU" if torch.cuda.is_available() else "rank"


def format_validation_line(iteration: int, losses: dict[str, float], source: str | None = None) -> str:
    """Megatron's validation line; `source` (one source of blended data): ` validation-<source> loss ...`,
    as Megatron-LM names its multiple validation sets."""
    body = " | ".join(
        f"{k} value: {v:.6E} | {k} PPL: {math.exp(min(20.0, v)):.6E}" for k, v in losses.items()
    )
    name = "validation" if source is None else f"validation-{source}"
    return f" {name} loss at iteration {iteration} | {body} |"


class MetricWriters:
    """TensorBoard and W&B, each only when configured; both optional packages."""

    def __init__(self, logger_cfg: LoggerConfig | None, run_config: dict | None = None):
        """`logger_cfg` None: this rank writes nothing. The plan has checked the packages: W&B's is
        installed when wandb_project is set; a missing tensorboard was a plan warning."""
        self.tb = None
        self.wandb = None
        if logger_cfg is None:
            return
        if logger_cfg.tensorboard_dir and importlib.util.find_spec("tensorboard") is not None:
            from torch.utils.tensorboard import SummaryWriter

            self.tb = SummaryWriter(log_dir=logger_cfg.tensorboard_dir)
        if logger_cfg.wandb_project:
            import wandb

            self.wandb = wandb.init(
                project=logger_cfg.wandb_project,
                entity=logger_cfg.wandb_entity,
                name=logger_cfg.wandb_exp_name,
                config=run_config,
            )

    def write(self, iteration: int, scalars: dict[str, float]) -> None:
        if self.tb is not None:
            for key, value in scalars.items():
                self.tb.add_scalar(key, value, iteration)
            self.tb.flush()
        if self.wandb is not None:
            self.wandb.log(scalars, step=iteration)

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()
        if self.wandb is not None:
            self.wandb.finish()
