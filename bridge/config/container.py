"""ConfigContainer: the whole description of a run, as one tree of plain dataclasses.

A recipe returns one; `--config-file` and dotted overrides change it (bridge.config.overrides);
`bridge.config.resolve.resolve_config` fills the fields that follow others (sequence length, NullTokenizer vocab);
`bridge.config.run_plan.build_plan(cfg, world_size)` checks every rule across sections (raising
ConfigError) and returns the frozen RunPlan the run builds; `to_yaml()` /
`from_yaml()` round-trip it without loss (run_config.yaml next to checkpoints).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from bridge.config.sections import (
    CheckpointConfig,
    DatasetConfig,
    DistillConfig,
    DistributedConfig,
    DPOConfig,
    FaultToleranceConfig,
    LoggerConfig,
    MixedPrecisionConfig,
    OptimizerConfig,
    PeftConfig,
    ProfilingConfig,
    RNGConfig,
    SchedulerConfig,
    StragglerDetectionConfig,
    TokenizerConfig,
    TrainingConfig,
    ValidationConfig,
)
from bridge.models.gpt_provider import GPTModelProvider


@dataclass
class ConfigContainer:
    model: GPTModelProvider
    train: TrainingConfig = field(default_factory=TrainingConfig)
    validation: ValidationConfig = field(default_factory=ValidationConfig)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    dataset: DatasetConfig = field(default_factory=DatasetConfig)
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    distributed: DistributedConfig = field(default_factory=DistributedConfig)
    mixed_precision: MixedPrecisionConfig = field(default_factory=MixedPrecisionConfig)
    rng: RNGConfig = field(default_factory=RNGConfig)
    peft: PeftConfig = field(default_factory=PeftConfig)  # scheme None: full-parameter training
    profiling: ProfilingConfig = field(default_factory=ProfilingConfig)  # off unless a profiler is on
    dpo: DPOConfig = field(default_factory=DPOConfig)  # read with dataset.kind=preference
    distill: DistillConfig = field(default_factory=DistillConfig)  # on with a distill.teacher
    ft: FaultToleranceConfig = field(default_factory=FaultToleranceConfig)  # hung ranks: off by default
    straggler: StragglerDetectionConfig = field(default_factory=StragglerDetectionConfig)  # off by default

    # ---- YAML ----------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        from bridge.config.yaml_io import to_container_dict

        return to_container_dict(self)

    def to_yaml(self) -> str:
        from bridge.config.yaml_io import to_yaml

        return to_yaml(self)

    @classmethod
    def from_yaml(cls, text: str) -> ConfigContainer:
        """Build a container from YAML text in this tree's shape (e.g. a run_config.yaml)."""
        from bridge.config.yaml_io import from_yaml

        return from_yaml(cls, text)

    def copy(self) -> ConfigContainer:
        return copy.deepcopy(self)
