"""What exporting a training run's checkpoint needs from the run_config.yaml saved next to it.

Conversion and config are siblings, so this reads the file ConfigContainer.to_yaml wrote without the
config tree: plain YAML, each section it needs typed by its own dataclass as the tree types it (the model
as a GPTModelProvider, the adapters as a PeftConfig). Sections a file lacks keep their defaults.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from bridge.checkpoint.paths import RUN_CONFIG_FILENAME
from bridge.models.gpt_provider import GPTModelProvider
from bridge.models.vlm_provider import VLMModelProvider
from bridge.peft.settings import PeftConfig

T = TypeVar("T")


@dataclass(frozen=True)
class SavedRun:
    model: GPTModelProvider | None  # None: the file has no model section
    peft: PeftConfig = field(default_factory=PeftConfig)  # scheme None: the run trained every weight
    # rng.seed, which only initialises adapters the checkpoint then overwrites (0 when not recorded)
    seed: int = 0
    pretrained_checkpoint: str | None = None  # checkpoint.pretrained_checkpoint: the run's start
    hf_architecture: str | None = None  # checkpoint.hf_architecture


def _typed(cls: type[T], section: Any) -> T:
    """`section` (a dict from the YAML) as an instance of dataclass `cls`, typed as the config tree does."""
    from omegaconf import OmegaConf

    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(cls), section or {}))


def read_saved_run(folder: str | os.PathLike) -> SavedRun | None:
    """The run saved with the checkpoint in `folder` (None: no run_config.yaml, e.g. an import)."""
    path = Path(folder) / RUN_CONFIG_FILENAME
    if not path.is_file():
        return None
    from omegaconf import OmegaConf

    data = OmegaConf.to_container(OmegaConf.create(path.read_text()), resolve=True) or {}
    if isinstance(data.get("model"), dict) and "_target_" in data["model"]:
        # Megatron-Bridge's run config (its provider's _target_): bridge.conversion.foreign_export reads it
        return None
    checkpoint = data.get("checkpoint") or {}
    model = data.get("model")
    provider_class = (
        VLMModelProvider if isinstance(model, dict) and "vlm_config" in model else GPTModelProvider
    )
    return SavedRun(
        model=_typed(provider_class, model) if model else None,
        peft=_typed(PeftConfig, data.get("peft")),
        seed=int((data.get("rng") or {}).get("seed", 0)),
        pretrained_checkpoint=checkpoint.get("pretrained_checkpoint"),
        hf_architecture=checkpoint.get("hf_architecture"),
    )
