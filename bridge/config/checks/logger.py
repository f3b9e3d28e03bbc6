"""The `logger` and `profiling` sections: optional packages, the profiled window and ranks."""

from __future__ import annotations

import importlib.util
import os
from typing import TYPE_CHECKING

from bridge.config.checks.rules import positive
from bridge.errors import config_error

if TYPE_CHECKING:
    from bridge.config.container import ConfigContainer
    from bridge.config.sections import ProfilingConfig


def check_logger(cfg: ConfigContainer) -> list[str]:
    lg = cfg.logger
    positive("logger.log_interval", lg.log_interval)
    if not lg.wandb_project:
        for name in ("wandb_entity", "wandb_exp_name"):
            if getattr(lg, name):
                raise config_error(
                    f"logger.{name}",
                    getattr(lg, name),
                    "W&B logging is on only when logger.wandb_project is set",
                    "set logger.wandb_project too, or remove it",
                )
    elif importlib.util.find_spec("wandb") is None:
        raise config_error(
            "logger.wandb_project",
            lg.wandb_project,
            "W&B logging needs the wandb package, which is not installed",
            "pip install wandb, or unset logger.wandb_project",
        )
    if lg.tensorboard_dir and importlib.util.find_spec("tensorboard") is None:
        # Recipes set a tensorboard_dir by default; a missing optional package must not stop a run.
        return [
            f"logger.tensorboard_dir={lg.tensorboard_dir} is set but the tensorboard package is not "
            "installed: TensorBoard logging is off (pip install tensorboard to enable it)."
        ]
    return []


def check_profiling(cfg: ConfigContainer, world_size: int, cuda: bool) -> list[str]:
    """The profiling section (bridge/config/profiling.py, bridge/training/profiling.py). Without CUDA the
    CUDA-only tools are warnings, not errors, so a GPU recipe still dry-runs on a laptop."""
    p = cfg.profiling
    if p.use_pytorch_profiler and p.use_nsys_profiler:
        raise config_error(
            "profiling.use_nsys_profiler",
            True,
            "profiling.use_pytorch_profiler is on too: one profiler at a time (as Megatron-Bridge; the "
            "PyTorch profiler's own CUDA tracing would sit inside the nsys capture)",
            "set profiling.use_pytorch_profiler=false or profiling.use_nsys_profiler=false",
        )
    windowed = p.use_pytorch_profiler or p.use_nsys_profiler or p.record_memory_history
    warnings: list[str] = []
    if not windowed:
        for name in ("record_shapes", "output_dir"):
            if getattr(p, name):
                warnings.append(
                    f"profiling.{name}={getattr(p, name)} has no effect: no profiler is on "
                    "(profiling.use_pytorch_profiler / use_nsys_profiler / record_memory_history)."
                )
        return warnings
    check_profiling_window(p, world_size)
    if not cuda:
        warnings += cuda_only_profiling_notes(p)
    if p.profile_step_start > cfg.train.train_iters:
        warnings.append(
            f"profiling.profile_step_start={p.profile_step_start} is after the last iteration "
            f"(train.train_iters={cfg.train.train_iters}): nothing is profiled."
        )
    return warnings


def check_profiling_window(p: ProfilingConfig, world_size: int) -> None:
    """The profiled iterations, the profiled ranks and the trace folder of a profiler that is on."""
    if p.profile_step_start < 1:
        raise config_error(
            "profiling.profile_step_start",
            p.profile_step_start,
            "must be >= 1 (iterations are numbered from 1, as in the log line)",
            "give the first iteration to profile, e.g. 10",
        )
    if p.profile_step_end <= p.profile_step_start:
        raise config_error(
            "profiling.profile_step_end",
            p.profile_step_end,
            f"must be > profiling.profile_step_start ({p.profile_step_start}): the window "
            "[profile_step_start, profile_step_end) would hold no iteration",
            f"set profiling.profile_step_end to at least {p.profile_step_start + 1}",
        )
    if not p.profile_ranks:
        raise config_error(
            "profiling.profile_ranks", p.profile_ranks, "lists no rank, so nothing is profiled", "use [0]"
        )
    outside = [r for r in p.profile_ranks if not 0 <= r < world_size]
    if outside:
        raise config_error(
            "profiling.profile_ranks",
            p.profile_ranks,
            f"rank {outside[0]} is outside [0, {world_size}) (world size {world_size})",
            f"list ranks between 0 and {world_size - 1}",
        )
    if (
        p.use_pytorch_profiler
        and p.output_dir
        and os.path.exists(p.output_dir)
        and not os.path.isdir(p.output_dir)
    ):
        raise config_error(
            "profiling.output_dir", p.output_dir, "exists and is not a directory", "give a directory path"
        )


def cuda_only_profiling_notes(p: ProfilingConfig) -> list[str]:
    """What is inactive without CUDA (a warning, so a GPU recipe still dry-runs on a laptop)."""
    notes: list[str] = []
    if p.record_memory_history:
        notes.append(
            "profiling.record_memory_history=true is inactive on this machine: it records the CUDA "
            "caching allocator's history (torch.cuda.memory._record_memory_history), which needs CUDA; "
            "no snapshot is written."
        )
    if p.use_nsys_profiler:
        notes.append(
            "profiling.use_nsys_profiler=true is inactive on this machine: the nsys capture range "
            "(cudaProfilerStart/Stop) and the NVTX ranges need CUDA; nothing is profiled by it."
        )
    return notes
