"""Checkpoint I/O (Megatron-Core dist_checkpointing, `torch_dist`), below conversion and training.

    paths.py      tracker, iter_* directories, resolve_checkpoint (pure Python)
    atomic.py     atomic files and folders (the tracker, conversion outputs; pure Python)
    save_load.py  save_checkpoint / load_checkpoint / saved_layout (torch, megatron.core)
    save_state.py what a save writes: the sharded state dicts, Megatron-Core's save strategy
    async_writes.py checkpoint.async_save: the write in flight, published once every rank has written it
    direct_load.py the torch_dist load that reads each saved tensor straight into its parameter
    manifest.py   the integrity manifest (size + crc32 per file) written with a save, checked on load
    lock.py       one run per save directory (.bridge.lock: owner pid/host, stale-lock detection)
    preflight.py  before the first iteration: lock, leftovers cleaned, writable, room; writer reaper
    writer_processes.py  Megatron-Core's writer processes: die with their rank, ignore stop signals
    same_state.py whether a checkpoint on disk already holds the state about to be saved
    disk_full.py  a save that filled the disk: one error with the free and the needed space
    state.py      RNG state and optimizer-state fixes kept in a checkpoint
    compat.py     checkpoint vs model checks before a load (names, shapes, tied embeddings, RoPE)
    fsdp2_state.py strategy fsdp2's parameters and optimizer state as torch DCP shards (dp-reshardable)
    integrity.py  before a load: the manifest, or Megatron-Core's metadata checks for a foreign checkpoint
    foreign.py    Megatron-LM / Megatron-Bridge layouts: markers, what a folder holds, the files
                  Megatron-Bridge's loader reads (iter_N/train_state.pt)
    foreign_fields.py  their model fields (saved args, run_config.yaml) as provider fields (pure Python)
    foreign_start.py   a run composed on such a checkpoint takes its model fields
    foreign_load.py    loading one: weights, optimizer / scheduler / iteration when they fit, one log line

Names are re-exported here lazily: `import bridge.checkpoint` imports no torch.
"""

from __future__ import annotations

import importlib
from typing import Any

from bridge.checkpoint.paths import (
    RUN_CONFIG_FILENAME,
    TRACKER_FILENAME,
    checkpoint_dir,
    latest_iteration,
    resolve_checkpoint,
)

_LAZY = {
    "save_checkpoint": "bridge.checkpoint.save_load",
    "load_checkpoint": "bridge.checkpoint.save_load",
    "saved_layout": "bridge.checkpoint.save_load",
    "saved_optimizer_format": "bridge.checkpoint.save_load",
    "is_fsdp2_checkpoint": "bridge.checkpoint.save_load",
    "read_common": "bridge.checkpoint.save_load",
    "AFTER_SHARDS_WRITTEN_HOOKS": "bridge.checkpoint.save_load",
    "SAVE_STAGE_HOOKS": "bridge.checkpoint.save_load",
    "CheckpointDamaged": "bridge.checkpoint.save_load",
    "OPTIMIZER_METADATA": "bridge.checkpoint.state",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'bridge.checkpoint' has no attribute {name!r}")


__all__ = [
    "AFTER_SHARDS_WRITTEN_HOOKS",
    "SAVE_STAGE_HOOKS",
    "CheckpointDamaged",
    "OPTIMIZER_METADATA",
    "RUN_CONFIG_FILENAME",
    "TRACKER_FILENAME",
    "checkpoint_dir",
    "latest_iteration",
    "load_checkpoint",
    "read_common",
    "resolve_checkpoint",
    "save_checkpoint",
    "saved_layout",
]
