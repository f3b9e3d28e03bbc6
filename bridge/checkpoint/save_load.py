"""Saving and loading checkpoints in Megatron-Core's dist_checkpointing `torch_dist` format.

The tracker is replaced atomically by rank 0 only after every rank has finished writing, so a crash
during a save leaves it on the previous checkpoint. Model weights are saved as global ShardedTensors,
so a checkpoint loads under any TP/PP layout; optimizer state and RNG state are tied to the layout
they were saved with. `optimizer=None` on both sides is the model-only path (HF import/export,
pretrained weights).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from bridge.checkpoint import compat, state
from bridge.checkpoint.paths import (
    RUN_CONFIG_FILENAME,
    checkpoint_dir,
    remove_old_checkpoints,
    resolve_checkpoint,
    write_tracker,
)
from bridge.errors import ConfigError
from bridge.parallel import ranks
from bridge.parallel.wrappers import unwrap_all

# Called on every rank after the shards of a checkpoint are written and before the tracker moves.
# Tests use it to simulate a crash in the middle of a save.
AFTER_SHARDS_WRITTEN_HOOKS: list[Callable[[Path, int], None]] = []


def _model_keys(n_chunks: int) -> list[str]:
    return ["model"] if n_chunks == 1 else [f"model{i}" for i in range(n_chunks)]


def model_sharded_state_dict(model_chunks: list) -> dict:
    chunks = unwrap_all(model_chunks)
    return {key: c.sharded_state_dict() for key, c in zip(_model_keys(len(chunks)), chunks, strict=True)}


def save_checkpoint(
    root: str | os.PathLike,
    iteration: int,
    model_chunks: list,
    optimizer=None,
    scheduler=None,
    *,
    train_state: dict | None = None,
    run_config_yaml: str | None = None,
    save_rng: bool = True,
    most_recent_k: int = -1,
) -> Path:
    """Save a complete checkpoint for `iteration` on all ranks, then move the tracker to it."""
    from megatron.core import dist_checkpointing

    root = Path(root)
    target = checkpoint_dir(root, iteration)
    rank0 = ranks.is_rank_zero()
    if rank0:
        root.mkdir(parents=True, exist_ok=True)
        if target.exists():  # leftovers of an interrupted save (the tracker never named it)
            shutil.rmtree(target)
        target.mkdir()
    ranks.barrier()

    sd = model_sharded_state_dict(model_chunks)
    if optimizer is not None:
        sd["optimizer"] = optimizer.sharded_state_dict(sd, metadata=state.OPTIMIZER_METADATA)
    if scheduler is not None:
        sd["opt_param_scheduler"] = scheduler.state_dict()
    if save_rng:
        sd["rng_state"] = state.rng_sharded_object(state.rng_state())
    sd["train_state"] = {"iteration": int(iteration), **(train_state or {})}
    sd["checkpoint_content"] = {"optimizer": optimizer is not None, "rng": save_rng}

    dist_checkpointing.save(sd, str(target))
    if rank0 and run_config_yaml is not None:
        (target / RUN_CONFIG_FILENAME).write_text(run_config_yaml)
    ranks.barrier()
    for hook in AFTER_SHARDS_WRITTEN_HOOKS:
        hook(target, iteration)
    if rank0:
        write_tracker(root, iteration)
        if most_recent_k and most_recent_k > 0:
            remove_old_checkpoints(root, keep=most_recent_k)
    ranks.barrier()
    return target


def load_checkpoint(
    path: str | os.PathLike,
    model_chunks: list,
    optimizer=None,
    scheduler=None,
    *,
    iteration: int | None = None,
    load_rng: bool = True,
    strict: bool = True,
    model_config: Any = None,
) -> dict:
    """Load into the model chunks (and optimizer / scheduler / RNG when given); returns train_state.

    Model weights reshard to the current TP/PP layout; optimizer and RNG state need the saving layout.
    Before anything is read, the checkpoint is checked against the model (bridge.checkpoint.compat):
    tensor names and global shapes, tied embeddings, and (from the run_config.yaml next to it) the RoPE
    settings; `model_config` (the run's GPTModelProvider or a dict of its fields) adds the fields a
    built model does not record. A mismatch is a ConfigError on every rank.
    """
    from megatron.core import dist_checkpointing

    target, _ = resolve_checkpoint(path, iteration)
    content = read_common(target)
    has_optim = content.get("checkpoint_content", {}).get("optimizer", False)
    has_rng = content.get("checkpoint_content", {}).get("rng", False)

    chunks = unwrap_all(model_chunks)
    sd = model_sharded_state_dict(model_chunks)
    compat.check_compatible(target, chunks, sd, model_config, strict=strict)
    if optimizer is not None:
        if not has_optim:
            raise ConfigError(
                f"checkpoint {target} has no optimizer state: load it as "
                "checkpoint.pretrained_checkpoint (weights only) or set checkpoint.load_optim=False"
            )
        state.ensure_optimizer_state(optimizer)
        sd["optimizer"] = optimizer.sharded_state_dict(sd, is_loading=True, metadata=state.OPTIMIZER_METADATA)
    rng = load_rng and has_rng
    if rng:
        sd["rng_state"] = state.rng_sharded_object(None)
    loaded = dist_checkpointing.load(sd, str(target))

    with torch.no_grad():  # the optimizer copies into views of the parameters
        for chunk, key in zip(chunks, _model_keys(len(chunks)), strict=True):
            chunk.load_state_dict(loaded[key], strict=strict)
        if optimizer is not None:
            optimizer.load_state_dict(loaded["optimizer"])
            state.restore_adam_steps(optimizer, loaded["optimizer"])
    if scheduler is not None and "opt_param_scheduler" in loaded:
        scheduler.load_state_dict(loaded["opt_param_scheduler"])
    if rng:
        state.set_rng_state(loaded["rng_state"])
    return dict(loaded.get("train_state", {}))


def read_common(target: Path) -> dict:
    from megatron.core.dist_checkpointing.serialization import load_common_state_dict

    return load_common_state_dict(str(target))


def saved_layout(path: str | os.PathLike, iteration: int | None = None) -> str | None:
    """The layout line (TP=.. PP=..) a checkpoint was saved with, if recorded."""
    target, _ = resolve_checkpoint(path, iteration)
    return read_common(target).get("train_state", {}).get("layout")
