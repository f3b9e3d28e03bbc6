"""Where checkpoints live on disk and which one is current (pure Python: no torch import).

Layout (Megatron's):
    <root>/iter_0000010/                  one checkpoint: sharded tensors, common.pt, metadata.json,
                                          run_config.yaml, manifest.json (written last)
    <root>/latest_checkpointed_iteration.txt   the tracker: the newest *complete* checkpoint
    <root>/.iter_0000012.saving/          a save in progress (renamed onto iter_0000012 when complete)
    <root>/.iter_0000012.replaced/        an untracked complete checkpoint being replaced (kept until the
                                          new one is published)
    <root>/.bridge.lock                   the run that writes this directory (bridge.checkpoint.lock)

A folder iter_N is *complete* when it holds manifest.json (every save since the manifest), or, for
checkpoints written before it, when it holds metadata.json and N <= the tracker. Anything
else is a leftover: it never counts (retention, loading) and is removed at the next start.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from bridge.checkpoint.atomic import atomic_write_text
from bridge.errors import ConfigError

TRACKER_FILENAME = "latest_checkpointed_iteration.txt"
RUN_CONFIG_FILENAME = "run_config.yaml"
# Written by AutoBridge.import_ckpt next to the Megatron checkpoint, so that export can rebuild the HF folder.
HF_ASSETS_DIR = "hf_assets"
CONSOLIDATED_DIR = "consolidated"  # checkpoint.save_consolidated: the HF copy inside an iter_* folder
METADATA_FILENAME = "metadata.json"  # written by dist_checkpointing when a save is complete
COMMON_FILENAME = "common.pt"
MANIFEST_FILENAME = "manifest.json"  # bridge.checkpoint.manifest: written last, before the publish
STAGING_SUFFIX = ".saving"
TRAIN_STATE_FILENAME = "train_state.pt"  # Megatron-Bridge: iter_N/train_state.pt
LATEST_TRAIN_STATE_FILENAME = "latest_train_state.pt"  # Megatron-Bridge's tracker, beside the iter_* folders
REPLACED_SUFFIX = ".replaced"


def is_hf_folder(path: str | None) -> bool:
    """A Hugging Face model folder (config.json, no torch_dist metadata) rather than a bridge checkpoint."""
    if not path or not os.path.isdir(path):
        return False
    return os.path.isfile(os.path.join(path, "config.json")) and not any(
        os.path.exists(os.path.join(path, name))
        for name in (TRACKER_FILENAME, METADATA_FILENAME, COMMON_FILENAME)
    )


def checkpoint_dir(root: str | os.PathLike, iteration: int) -> Path:
    return Path(root) / f"iter_{iteration:07d}"


def latest_iteration(root: str | os.PathLike) -> int | None:
    """The iteration named by the tracker file, or None when `root` holds no complete checkpoint.
    Without latest_checkpointed_iteration.txt: Megatron-Bridge's latest_train_state.pt, when the folder it
    names is not one of bridge's (bridge's own roots follow the .txt alone)."""
    tracker = Path(root) / TRACKER_FILENAME
    if not tracker.is_file():  # Megatron-Bridge's own tracker, for a root it wrote
        return tracked_by_train_state(root)
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


def staging_dir(root: str | os.PathLike, iteration: int) -> Path:
    return Path(root) / f".iter_{iteration:07d}{STAGING_SUFFIX}"


def replaced_dir(root: str | os.PathLike, iteration: int) -> Path:
    return Path(root) / f".iter_{iteration:07d}{REPLACED_SUFFIX}"


def _iteration_of(name: str) -> int | None:
    return int(name[5:]) if name.startswith("iter_") and name[5:].isdigit() else None


def tracker_problem(root: str | os.PathLike) -> str | None:
    """What is wrong with the tracker of `root` (None when it is missing or names an iteration)."""
    try:
        latest_iteration(root)
    except ConfigError as err:
        return str(err).split("; fix or delete")[0]
    return None


def tracked_or_none(root: str | os.PathLike) -> int | None:
    """The tracker's iteration, or None when it is missing or holds no number."""
    try:
        return latest_iteration(root)
    except ConfigError:
        return None


def is_complete(folder: str | os.PathLike, tracked: int | None = None) -> bool:
    """Whether `folder` (an iter_* directory) holds a complete checkpoint (see the module docstring).
    `tracked`: the tracker's iteration (read from the parent folder when None)."""
    folder = Path(folder)
    if (folder / MANIFEST_FILENAME).is_file():
        return True
    if not (folder / METADATA_FILENAME).is_file():  # (Megatron-Core 0.19 writes no common.pt)
        return False
    it = _iteration_of(folder.name)
    if tracked is None:
        tracked = tracked_or_none(folder.parent)
    return it is None or (tracked is not None and it <= tracked)  # a lone folder: the user's choice


def complete_iterations(root: str | os.PathLike) -> list[int]:
    """The iterations of the complete checkpoints under `root`, ascending (leftovers never count)."""
    root = Path(root)
    if not root.is_dir():
        return []
    tracked = tracked_or_none(root)
    found = []
    for p in root.iterdir():
        it = _iteration_of(p.name)
        if it is not None and p.is_dir() and is_complete(p, tracked):
            found.append(it)
    return sorted(found)


def remove_old_checkpoints(root: str | os.PathLike, keep: int, newest: int) -> list[int]:
    """Keep the `keep` newest complete checkpoints up to `newest` (the one just saved); delete older
    complete ones. Partial folders never count, and checkpoints after `newest` are not touched."""
    root = Path(root)
    iters = [it for it in complete_iterations(root) if it <= newest]
    doomed = iters[:-keep] if keep > 0 else []
    for it in doomed:
        shutil.rmtree(checkpoint_dir(root, it), ignore_errors=True)
    return doomed


def clean_leftovers(root: str | os.PathLike) -> list[str]:
    """Remove what interrupted saves left under `root` (call only while holding its lock).

    Staging folders and legacy partial iter_* folders are removed; a `.replaced` folder is put back
    when its replacement never got published, else removed. Returns one line per action."""
    root = Path(root)
    if not root.is_dir():
        return []
    done = []
    tracked = tracked_or_none(root)
    for p in sorted(root.iterdir()):
        name = p.name
        if name.startswith(".iter_") and name.endswith(STAGING_SUFFIX):
            shutil.rmtree(p, ignore_errors=True)
            done.append(f"removed the unfinished save {p}")
        elif name.startswith(".iter_") and name.endswith(REPLACED_SUFFIX):
            original = root / name[1 : -len(REPLACED_SUFFIX)]
            if original.is_dir() and is_complete(original, tracked):
                shutil.rmtree(p, ignore_errors=True)
                done.append(f"removed {p} (its replacement {original.name} is complete)")
            else:
                if original.exists():
                    shutil.rmtree(original, ignore_errors=True)
                os.replace(p, original)
                done.append(f"restored {original} (its replacement was never published)")
        elif name == TRACKER_FILENAME + ".tmp":
            p.unlink(missing_ok=True)
        elif _iteration_of(name) is not None and p.is_dir() and not is_complete(p, tracked):
            shutil.rmtree(p, ignore_errors=True)
            done.append(f"removed the partial checkpoint {p} (never completed)")
    return done


def checkpoint_candidates(
    path: str | os.PathLike, iteration: int | None = None
) -> tuple[list[tuple[Path, int | None]], bool]:
    """Which checkpoints a load of `path` may use, best first, and whether falling back is allowed.

    `path` is an iter_* directory (exactly that one), or a root: with `iteration` (checkpoint.ckpt_step)
    exactly that one; else the tracker's, followed by the older complete ones (fallback candidates).
    A tracker that holds no iteration number counts as damaged: the newest complete checkpoint comes
    first (load_checkpoint's fallback says so). An empty list means the root holds no checkpoint."""
    path = Path(path)
    own = _iteration_of(path.name)
    if own is not None or (path / METADATA_FILENAME).is_file() or (path / MANIFEST_FILENAME).is_file():
        return [(path, own)], False
    if iteration is not None:
        return [(checkpoint_dir(path, iteration), iteration)], False
    complete = complete_iterations(path)
    try:
        latest = latest_iteration(path)
    except ConfigError:  # a garbage tracker: the newest complete checkpoint, then the older ones
        if not complete:
            raise
        return [(checkpoint_dir(path, it), it) for it in reversed(complete)], True
    if latest is None:
        if complete:
            raise ConfigError(
                f"checkpoint root {path} has complete checkpoints ({', '.join(map(str, complete))}) but no "
                f"{TRACKER_FILENAME}: set checkpoint.ckpt_step to one of them"
            )
        return [], False
    older = [it for it in reversed(complete) if it < latest]
    return [(checkpoint_dir(path, latest), latest)] + [(checkpoint_dir(path, it), it) for it in older], True


def resolve_checkpoint(path: str | os.PathLike, iteration: int | None = None) -> tuple[Path, int | None]:
    """A checkpoint root (with a tracker) or one iter_* directory -> (directory, iteration)."""
    path = Path(path)
    if (path / METADATA_FILENAME).is_file():
        return path, _iteration_of(path.name)
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


# ---- Megatron-Bridge's trackers (read here so that latest_iteration answers for its roots too) ----


def _tensor_value(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else value


def read_train_state_file(path: str | os.PathLike) -> dict:
    """Megatron-Bridge's TrainState.state_dict() (step, consumed_train_samples, ...) as plain numbers."""
    import torch  # only where a Megatron-Bridge tracker is read: the module stays torch-free

    data = torch.load(str(path), map_location="cpu", weights_only=True)
    return {k: _tensor_value(v) for k, v in data.items()}


def tracked_by_train_state(root: str | os.PathLike) -> int | None:
    """The iteration Megatron-Bridge's tracker (latest_train_state.pt) names, None without one."""
    path = Path(root) / LATEST_TRAIN_STATE_FILENAME
    if not path.is_file():
        return None
    try:
        step = int(read_train_state_file(path)["step"])
    except Exception:  # noqa: BLE001 - unreadable: as if there were none
        return None
    bridges = (Path(root) / f"iter_{step:07d}" / MANIFEST_FILENAME).is_file()
    return None if bridges else step
