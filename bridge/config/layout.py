"""The run's parallel layout from its config: the provider's sizes with the distributed and dataset
sections' inputs, through the one derivation (bridge.models.provider_layout.derive_layout). Pure Python."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bridge.models.provider_layout import derive_layout

if TYPE_CHECKING:
    from bridge.config.container import ConfigContainer
    from bridge.parallel.layout import ParallelLayout


def run_layout(cfg: ConfigContainer, world_size: int) -> ParallelLayout:
    """The validated layout of `cfg` (resolved) on `world_size` ranks; raises ConfigError on the layout
    rules (build_plan checks everything else too)."""
    return derive_layout(
        cfg.model,
        world_size,
        strategy=cfg.distributed.strategy,
        dp_replicate_size=cfg.distributed.dp_replicate_size,
        packed_sequence_size=cfg.dataset.packed_sequence_size or None,
        gpus_per_node=cfg.distributed.gpus_per_node,
    )
