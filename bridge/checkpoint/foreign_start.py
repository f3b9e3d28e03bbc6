"""A run that starts from a Megatron-LM or Megatron-Bridge checkpoint takes its model fields from it.

`checkpoint.load` (when it holds a checkpoint) or else `checkpoint.pretrained_checkpoint` names the start;
its architecture (bridge.checkpoint.foreign_fields: Megatron-Bridge's run_config.yaml `model:` section, or
Megatron-LM's saved args) replaces the recipe's, as Megatron-Bridge's own export builds its provider from
the checkpoint's run_config.yaml. A field set on the command line or in a config file to another value
than the checkpoint's is one error naming the field and both values. Bridge's own checkpoints (a
manifest.json in the folder) are left alone: nothing is read for them, no torch is imported.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

from bridge.checkpoint import foreign
from bridge.checkpoint.foreign import ForeignCheckpoint
from bridge.checkpoint.paths import MANIFEST_FILENAME, METADATA_FILENAME, checkpoint_candidates, is_hf_folder
from bridge.errors import ConfigError, config_error
from bridge.parallel import ranks

logger = logging.getLogger("bridge.config")


def start_folder(path: str | None, iteration: int | None = None) -> Path | None:
    """The iter_* folder a load of `path` would read first, when it is a foreign torch_dist checkpoint."""
    if not path or not Path(path).is_dir() or is_hf_folder(path):
        return None
    try:
        candidates, _ = checkpoint_candidates(path, iteration)
    except ConfigError:
        return None
    if not candidates:
        return None
    folder = candidates[0][0]
    if (folder / MANIFEST_FILENAME).is_file() or not (folder / METADATA_FILENAME).is_file():
        return None
    return folder


def foreign_start(checkpoint: Any) -> ForeignCheckpoint | None:
    """The Megatron-LM / Megatron-Bridge checkpoint the run starts from, if any: checkpoint.load when it
    holds a checkpoint (then a pretrained start is not used), else checkpoint.pretrained_checkpoint."""
    folder = start_folder(checkpoint.load, checkpoint.ckpt_step)
    if folder is None and not _holds_checkpoint(checkpoint.load, checkpoint.ckpt_step):
        folder = start_folder(checkpoint.pretrained_checkpoint)
    return foreign.describe(folder) if folder is not None else None


def _holds_checkpoint(path: str | None, iteration: int | None) -> bool:
    if not path or not Path(path).is_dir():
        return False
    try:
        return bool(checkpoint_candidates(path, iteration)[0])
    except ConfigError:
        return True  # a damaged root: the resume reports it


def _as_declared(model: Any, name: str, value: Any) -> Any:
    declared = str(next(f.type for f in dataclasses.fields(model) if f.name == name))
    if declared.startswith("float") and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if declared.startswith("int") and isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def checkpoint_fields(model: Any, theirs: ForeignCheckpoint) -> dict[str, Any]:
    """The checkpoint's fields that `model` (a GPTModelProvider) has, typed as it declares them."""
    names = {f.name for f in dataclasses.fields(model)}
    return {k: _as_declared(model, k, v) for k, v in theirs.model_fields.items() if k in names}


def model_with_checkpoint_fields(model: Any, theirs: ForeignCheckpoint) -> Any:
    """A copy of `model` with the checkpoint's architecture; one log line names what changed."""
    fields = checkpoint_fields(model, theirs)
    changed = [f"{k}: {getattr(model, k)!r} -> {v!r}" for k, v in fields.items() if getattr(model, k) != v]
    if changed:
        if ranks.is_rank_zero():
            logger.info(
                "model fields from %s checkpoint %s (%s) replace the recipe's: %s",
                theirs.layout,
                theirs.folder,
                theirs.fields_source,
                ", ".join(changed),
            )
    return dataclasses.replace(model, **fields)


def check_fields_kept(model: Any, theirs: ForeignCheckpoint) -> None:
    """ConfigError when the final config sets an architecture field to another value than the checkpoint."""
    for name, value in checkpoint_fields(model, theirs).items():
        if getattr(model, name) != value:
            raise config_error(
                f"model.{name}",
                getattr(model, name),
                f"the {theirs.layout} checkpoint {theirs.folder} was saved with {name}={value!r} ({theirs.fields_source})",
                "drop that setting (the checkpoint's value is taken), or start from another checkpoint",
            )
