"""bridge.config: the run description (ConfigContainer), overrides, YAML and validation. Pure data.

Light to import: omegaconf / hydra load only when overrides or YAML are used.
"""

import importlib

from bridge.config.container import ConfigContainer
from bridge.config.sections import (
    CheckpointConfig,
    DatasetConfig,
    DistributedConfig,
    LoggerConfig,
    MixedPrecisionConfig,
    OptimizerConfig,
    RNGConfig,
    SchedulerConfig,
    TokenizerConfig,
    TrainingConfig,
    ValidationConfig,
)

_LAZY = {
    "apply_overrides": "bridge.config.overrides",
    "compose": "bridge.config.compose",
    "merge_yaml": "bridge.config.yaml_io",
}

__all__ = [
    "CheckpointConfig",
    "ConfigContainer",
    "DatasetConfig",
    "DistributedConfig",
    "LoggerConfig",
    "MixedPrecisionConfig",
    "OptimizerConfig",
    "RNGConfig",
    "SchedulerConfig",
    "TokenizerConfig",
    "TrainingConfig",
    "ValidationConfig",
    *_LAZY,
]


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'bridge.config' has no attribute {name!r}")

    return getattr(importlib.import_module(module), name)
