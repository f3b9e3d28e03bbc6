"""The `checkpoint` section: format, save / load directories, the step to resume, retention."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from bridge.config import sections as S
from bridge.config.checks.rules import one_of, positive
from bridge.errors import config_error

if TYPE_CHECKING:
    from bridge.config.container import ConfigContainer
    from bridge.config.sections import CheckpointConfig


def check_checkpoint(cfg: ConfigContainer) -> None:
    c = cfg.checkpoint
    one_of("checkpoint.ckpt_format", c.ckpt_format, S.CKPT_FORMATS)
    if c.async_save:
        raise config_error(
            "checkpoint.async_save",
            True,
            "asynchronous saves are not implemented (every save is synchronous)",
            "set checkpoint.async_save=false",
        )
    positive("checkpoint.save_interval", c.save_interval, zero_ok=True, none_ok=True)
    if c.save_interval and not c.save:
        raise config_error(
            "checkpoint.save_interval",
            c.save_interval,
            "periodic saves need a directory, but checkpoint.save is not set",
            "set checkpoint.save=/path/to/dir, or checkpoint.save_interval=0 to not save",
        )
    if c.save_consolidated:
        if not c.save:
            raise config_error(
                "checkpoint.save_consolidated",
                True,
                "writes a Hugging Face copy inside each saved checkpoint, but checkpoint.save is not set",
                "set checkpoint.save=/path/to/dir, or checkpoint.save_consolidated=false",
            )
        from bridge.config.consolidated import consolidated_source

        consolidated_source(cfg)  # a ConfigError when the copy's architecture is unknown
    elif c.hf_architecture:  # the architecture the run's checkpoints export as (convert_checkpoint.py)
        from bridge.config.consolidated import consolidated_source

        consolidated_source(cfg)
    if c.save and os.path.exists(c.save) and not os.path.isdir(c.save):
        raise config_error(
            "checkpoint.save", c.save, "exists and is not a directory", "give a directory path"
        )
    if c.load and not os.path.isdir(c.load):
        raise config_error(
            "checkpoint.load",
            c.load,
            "directory does not exist",
            "give an existing checkpoint directory, or checkpoint.load=null to start from scratch",
        )
    if c.pretrained_checkpoint and not os.path.exists(c.pretrained_checkpoint):
        raise config_error(
            "checkpoint.pretrained_checkpoint",
            c.pretrained_checkpoint,
            "does not exist",
            "give an existing checkpoint (e.g. one written by scripts/conversion/convert_checkpoint.py)",
        )
    if c.ckpt_step is not None:
        check_ckpt_step(c)
    if c.most_recent_k != -1 and c.most_recent_k < 1:
        raise config_error(
            "checkpoint.most_recent_k", c.most_recent_k, "must be -1 (keep all) or >= 1", "use -1 or a count"
        )


def check_ckpt_step(c: CheckpointConfig) -> None:
    """checkpoint.ckpt_step picks an existing iter_* folder of the checkpoint.load root."""
    positive("checkpoint.ckpt_step", c.ckpt_step, zero_ok=True)
    if not c.load:
        raise config_error(
            "checkpoint.ckpt_step",
            c.ckpt_step,
            "picks an iteration of checkpoint.load, which is not set",
            "set checkpoint.load to the checkpoint root",
        )
    name = os.path.basename(os.path.normpath(c.load))
    if name.startswith("iter_") and name[5:].isdigit():
        raise config_error(
            "checkpoint.ckpt_step",
            c.ckpt_step,
            f"checkpoint.load already names one checkpoint ({name})",
            "set checkpoint.load to the root that holds the iter_* folders, or drop checkpoint.ckpt_step",
        )
    folder = os.path.join(c.load, f"iter_{c.ckpt_step:07d}")
    if not os.path.isdir(folder):
        have = sorted(int(n[5:]) for n in os.listdir(c.load) if n.startswith("iter_") and n[5:].isdigit())
        raise config_error(
            "checkpoint.ckpt_step",
            c.ckpt_step,
            f"{folder} does not exist (checkpoints in {c.load}: {', '.join(map(str, have)) or 'none'})",
            "pick one of those iterations",
        )
