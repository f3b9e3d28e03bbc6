"""TrainingContext: what the training loop and its saves share, built once by pretrain() from the run's plan."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bridge.config.container import ConfigContainer
from bridge.config.run_plan import Precision, RunPlan
from bridge.training.logging import MetricWriters
from bridge.training.state import TrainState


@dataclass
class TrainingContext:
    """Everything the loop needs, built by pretrain() from the run's plan."""

    plan: RunPlan
    model: list
    optimizer: Any  # Megatron-Core's MegatronOptimizer
    scheduler: Any  # Megatron-Core's OptimizerParamScheduler
    forward_step_func: Callable
    train_iterators: list
    valid_iterators: list | None
    state: TrainState
    megatron_ddp: bool
    overlap_param_gather: bool
    flops_per_token: float
    writers: MetricWriters
    run_config_yaml: str | None
    # bridge.training.pipelining.TorchPipelineRunner when plan.pipeline.engine == "torch", else None
    pipeline_runner: Any = None
    # bridge.training.consolidated's hook writing the Hugging Face copy into each save, or None
    consolidated: Callable | None = None
    # checkpoint.async_save: bridge.checkpoint.async_writes.AsyncSaves (the write in flight), else None
    async_saves: Any = None
    # seconds each save held the loop, by iteration (TrainResult.save_stalls)
    save_stalls: dict[int, float] = field(default_factory=dict)

    @property
    def cfg(self) -> ConfigContainer:
        return self.plan.config

    @property
    def num_microbatches(self) -> int:
        return self.plan.num_microbatches

    @property
    def seq_length(self) -> int:
        return self.plan.data.seq_length

    @property
    def precision(self) -> Precision:
        return self.plan.precision
