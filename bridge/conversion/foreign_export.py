"""Exporting a Megatron-LM or Megatron-Bridge checkpoint to Hugging Face without naming an HF config.

The model fields come from the checkpoint (bridge.checkpoint.foreign: Megatron-Bridge's run_config.yaml
`model:` section or Megatron-LM's saved args) onto a GPTModelProvider, and the config.json is written for
the simplest supported Hugging Face architecture that expresses every one of them: the one whose
config.json needs the fewest keys (then by name; e.g. Llama's for the plain GPT that Megatron-LM's
--swiglu --normalization RMSNorm --position-embedding-type rope flags describe, Qwen2's with
--add-qkv-bias). `--hf-config` still chooses another.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable
from typing import Any

from bridge.checkpoint import foreign
from bridge.checkpoint.foreign_start import checkpoint_fields, start_folder
from bridge.conversion.registry import family_for
from bridge.errors import ConfigError
from bridge.models.gpt_provider import GPTModelProvider
from bridge.models.hf_architecture import supported_architectures
from bridge.models.provider_kinds import provider_class

logger = logging.getLogger("bridge.conversion")


def foreign_checkpoint_at(megatron_path: str | os.PathLike):
    """The foreign checkpoint (bridge.checkpoint.foreign.ForeignCheckpoint) a root or iter_* folder holds
    first, None for bridge's own checkpoints and anything else."""
    folder = start_folder(str(megatron_path))
    return foreign.describe(folder) if folder is not None else None


def bridge_for_foreign(
    megatron_path: str | os.PathLike, from_provider: Callable[[Any, str], Any]
) -> Any | None:
    """The bridge (`from_provider(provider, architecture)`: AutoBridge.from_provider, passed in by
    AutoBridge itself) for the foreign checkpoint at `megatron_path` (None when it is not one); a
    ConfigError when it records no model fields or no supported architecture expresses them."""
    theirs = foreign_checkpoint_at(megatron_path)
    if theirs is None:
        return None
    if not theirs.model_fields:
        raise ConfigError(
            f"{theirs.layout} checkpoint {theirs.folder} records no model fields (no run_config.yaml model "
            "section, no saved args): pass the Hugging Face config folder of its model (--hf-config)"
        )
    base = GPTModelProvider()
    provider = dataclasses.replace(base, **checkpoint_fields(base, theirs))
    expressing = []
    for architecture in supported_architectures():
        if provider_class(family_for([architecture]).provider_kind) is not type(provider):
            continue  # another provider kind's family (a hybrid layer pattern) cannot express this model
        try:
            bridge = from_provider(provider, architecture)
        except (ConfigError, TypeError, ValueError, KeyError):  # its rules cannot write or read this model
            continue
        expressing.append((len(bridge.hf_config), architecture, bridge))
    if expressing:  # the simplest: the fewest config.json keys, then the name
        _, architecture, bridge = min(expressing, key=lambda entry: entry[:2])
        logger.info(
            "exporting %s checkpoint %s as %s (model fields from %s; of %s); --hf-config chooses another",
            theirs.layout,
            theirs.folder,
            architecture,
            theirs.fields_source,
            ", ".join(sorted(a for _, a, _ in expressing)),
        )
        return bridge
    raise ConfigError(
        f"no supported Hugging Face architecture expresses the model of {theirs.layout} checkpoint "
        f"{theirs.folder}: pass the Hugging Face config folder of its model (--hf-config)"
    )
