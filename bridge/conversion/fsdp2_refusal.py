"""Why an fsdp2 checkpoint does not export, and the ways to its weights that do work."""

from __future__ import annotations

from pathlib import Path

from bridge.checkpoint.paths import CONSOLIDATED_DIR
from bridge.errors import ConfigError


def refuse_fsdp2_checkpoint(folder: str | Path, reader: str = "export") -> None:
    """A ConfigError for a checkpoint saved by strategy fsdp2 (torch DCP shards), before any build.

    Export (plain or --low-memory) reads Megatron-Core torch_dist checkpoints only. The fixes named are
    the two that work: the Hugging Face copy the run wrote beside the shards (checkpoint.save_consolidated),
    or a resumed fsdp2 run that writes one. `reader`: what refuses it (export, generation)."""
    from bridge.checkpoint.save_load import read_common

    folder = Path(folder)
    if read_common(folder).get("checkpoint_content", {}).get("fsdp2") is None:
        return
    copy = folder / CONSOLIDATED_DIR
    if (copy / "config.json").is_file():
        fix = (
            f"its Hugging Face copy is already there: use {copy} directly (a Hugging Face folder: "
            "--hf-path for generate.py, checkpoint.pretrained_checkpoint for training)"
        )
    else:
        fix = (
            "resume the run with checkpoint.save_consolidated=true (same distributed.strategy=fsdp2) for "
            "at least one more iteration: each checkpoint it saves then holds a Hugging Face copy in "
            f"iter_N/{CONSOLIDATED_DIR}"
        )
    raise ConfigError(
        f"checkpoint {folder} was saved by strategy fsdp2 (torch DCP shards): {reader} reads Megatron-Core "
        f"torch_dist checkpoints only{', with or without --low-memory' if reader == 'export' else ''}. Fix: {fix}"
    )
