"""The run's profiling decision (pure data): which profilers run, on which ranks, over which iterations.

`ProfilingPlan` is built from a validated `profiling` section (bridge/config/validation.py holds the
rules) and read by bridge/training/profiling.py. Inactive parts are off here, not in the loop: nsys and
CUDA memory history without CUDA (the plan warned). Pure data: no torch import.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bridge.config.container import ConfigContainer


@dataclass(frozen=True)
class ProfilingPlan:
    pytorch: bool  # torch.profiler over the window, a Chrome trace per profiled rank in output_dir
    nsys: bool  # cudaProfilerStart/Stop around the window, NVTX ranges per step (CUDA only)
    memory_history: bool  # CUDA allocator history over the window, dumped at its end (CUDA only)
    step_start: int  # first profiled iteration (the log line's numbering, from 1)
    step_end: int  # exclusive
    ranks: tuple[int, ...]
    record_shapes: bool
    output_dir: str | None  # the PyTorch profiler's trace folder (absolute); None without it
    memory_snapshot_path: str
    cuda: bool  # CUDA activities in the PyTorch profiler too

    def profiles(self, rank: int) -> bool:
        return rank in self.ranks

    def snapshot_path(self, rank: int) -> str:
        """memory_snapshot_path, with "_rank<r>" before the suffix when several ranks are profiled."""
        if len(self.ranks) == 1:
            return self.memory_snapshot_path
        root, ext = os.path.splitext(self.memory_snapshot_path)
        return f"{root}_rank{rank}{ext}"

    def describe(self) -> str:
        tools = [
            *(["pytorch profiler"] if self.pytorch else []),
            *(["nsys capture range + NVTX"] if self.nsys else []),
            *([f"CUDA memory history -> {self.memory_snapshot_path}"] if self.memory_history else []),
        ]
        where = f" -> {self.output_dir}" if self.pytorch else ""
        return (
            f"profiling: {' + '.join(tools)} at iterations {self.step_start}-{self.step_end - 1} on ranks "
            f"{list(self.ranks)}{where}"
        )


def profiling_plan(cfg: ConfigContainer, cuda: bool) -> ProfilingPlan | None:
    """The validated config's profiling decision, or None when nothing is profiled on this device."""
    p = cfg.profiling
    nsys, memory = p.use_nsys_profiler and cuda, p.record_memory_history and cuda
    if not (p.use_pytorch_profiler or nsys or memory):
        return None
    output_dir = None
    if p.use_pytorch_profiler:
        output_dir = os.path.abspath(
            p.output_dir or cfg.logger.tensorboard_dir or os.path.join(os.getcwd(), "profiles")
        )
    return ProfilingPlan(
        pytorch=p.use_pytorch_profiler,
        nsys=nsys,
        memory_history=memory,
        step_start=p.profile_step_start,
        step_end=p.profile_step_end,
        ranks=tuple(p.profile_ranks),
        record_shapes=p.record_shapes,
        output_dir=output_dir,
        memory_snapshot_path=p.memory_snapshot_path,
        cuda=cuda,
    )
