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
    # DPO's reference / distillation's teacher: a bridge.training.frozen_pass.FrozenPass run before each
    # step's pass, or None
    frozen_pass: Any = None
    # the last step's metrics beside the loss (DPO's rewards and accuracy), on the logging rank
    step_metrics: dict[str, float] = field(default_factory=dict)
    # the main thread's progress, beaten at each phase (bridge.training.watchdog.Heartbeat; set by train())
    heartbeat: Any = None

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

    @property
    def objective(self) -> str:
        """The name of the loss the run minimises (logs, TensorBoard)."""
        if self.plan.dpo is not None:
            return "dpo loss"
        return "distill loss" if self.plan.distill is not None else "lm loss"

    @property
    def rows_per_sample(self) -> int:
        """Sequences per sample: a DPO sample is a (chosen, rejected) pair."""
        return self.frozen_pass.rows_per_sample if self.frozen_pass is not None else 1

    def step_iterators(self, iterators: list) -> list:
        """The iterators a step's pass reads: with a frozen pass (DPO's reference, the teacher), the step's
        micro batches with its results attached (it runs here, once per step)."""
        return iterators if self.frozen_pass is None else self.frozen_pass.attach(self, iterators)
