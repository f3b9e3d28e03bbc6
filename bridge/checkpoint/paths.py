"""Where checkpoints live on disk and which one is current (pure Python: no torch import).

Layout (Megatron's):
    <root>/iter_0000010/                  one checkpoint: sharded tensors, common.pt, metadata.json,
                                          run_config.yaml
    <root>/latest_checkpointed_iteration.txt   the tracker: the newest *complete* checkpoint
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from bridge.checkpoint.atomic import atomic_write_text
from bridge.errors import ConfigError

TRACKER_FILENAME = "latest_checkpointed_iteration.txt"
RUN_CONFIG_FILENAME = "run_config.yaml"
METADATA_FILENAME = "metadata.json"  # written by dist_checkpointing when a save is complete


def checkpoint_dir(root: str | os.PathLike, iteration: int) -> Path:
    return Path(root) / f"iter_{iteration:07d}"


def latest_iteration(root: str | os.PathLike) -> int | None:
    """The iteration named by the tracker file, or None when `root` holds no complete checkpoint."""
    tracker = Path(root) / TRACKER_FILENAME
    if not tracker.is_file():
        return None
    text = tracker.read_text().strip()
    try:
        return int(text)
    except ValueError as err:
        raise ConfigError(
            f"checkpoint tracker {tracker} holds {text!r}, not an iteration number; fix or delete the file"
        ) from err


def write_tracker(root: str | os.PathLike, iteration: int) -> None:
    """Point the tracker at `iteration` (atomic: a crash leaves the previous value)."""
    atomic_write_text(Path(root) / TRACKER_FILENAME, f"{iteration}\n")


def remove_old_checkpoints(root: str | os.PathLike, keep: int) -> None:
    root = Path(root)
    iters = sorted(int(p.name[5:]) for p in root.glob("iter_*") if p.name[5:].isdigit())
    for it in iters[:-keep]:
        shutil.rmtree(checkpoint_dir(root, it), ignore_errors=True)


def resolve_checkpoint(path: str | os.PathLike, iteration: int | None = None) -> tuple[Path, int | None]:
    """A checkpoint root (with a tracker) or one iter_* directory -> (directory, iteration)."""
    path = Path(path)
    if (path / METADATA_FILENAME).is_file():
        name = path.name
        return path, int(name[5:]) if name.startswith("iter_") and name[5:].isdigit() else None
    if iteration is None:
        iteration = latest_iteration(path)
    if iteration is None:
        raise ConfigError(
            f"checkpoint path {str(path)!r} holds no complete checkpoint (no {TRACKER_FILENAME} and no "
            f"{METADATA_FILENAME}): point checkpoint.load / checkpoint.pretrained_checkpoint at a checkpoint "
            "root or an iter_* directory"
        )
    target = checkpoint_dir(path, iteration)
    if not (target / METADATA_FILENAME).is_file():
        raise ConfigError(
            f"checkpoint {target} is incomplete (no {METADATA_FILENAME}); pick another iteration"
        )
    return target, iteration
