"""checkpoint.overwrite=true applies once: to the run it was given for, not to every relaunch of its command.

When a run starts with the flag, rank 0 (holding the save directory's lock) moves the previous run's
history (its iter_* folders, the tracker, Megatron-Bridge's train-state tracker) into one hidden folder
`<save>/.overwritten-<UTC time>` by renames (nothing complete is deleted or rewritten in place), then
publishes the marker `<save>/.bridge-overwrite.json` naming the new run's start. A relaunch of the same
command finds the marker and the new run's own checkpoints and resumes them (the plan's resume source
"checkpoint.save"); a relaunch of another config with the flag retires that run in turn. An interrupted
retirement leaves each entry either moved or not: the next start with the flag moves the rest.
Pure Python (no torch).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from bridge.checkpoint.atomic import atomic_write_text
from bridge.checkpoint.paths import TRACKER_FILENAME, _iteration_of

MARKER_FILENAME = ".bridge-overwrite.json"
RETIRED_PREFIX = ".overwritten-"
_HISTORY_FILES = (TRACKER_FILENAME, "latest_train_state.pt", MARKER_FILENAME)


def overwrite_marker(root: str | os.PathLike) -> dict | None:
    """The marker of the run that checkpoint.overwrite started in `root`, or None."""
    try:
        with open(Path(root) / MARKER_FILENAME, encoding="utf-8") as f:
            found = json.load(f)
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def _history(root: Path) -> list[Path]:
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if _iteration_of(p.name) is not None or p.name in _HISTORY_FILES)


def apply_overwrite(root: str | os.PathLike) -> str:
    """Rank 0, under the save directory's lock: retire the previous history of `root` (if any) and mark the
    new run's start. Returns the run log's line."""
    root = Path(root)
    moved = _history(root)
    if not any(_iteration_of(p.name) is not None for p in moved):
        moved = []  # no checkpoint to retire (a start before the first save): the marker is renewed
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    retired = None
    if moved:
        retired = root / f"{RETIRED_PREFIX}{stamp}-{os.getpid()}"
        retired.mkdir()
        for p in moved:
            os.replace(p, retired / p.name)  # a rename in the same directory tree: atomic per entry
    atomic_write_text(
        root / MARKER_FILENAME,
        json.dumps({"started": stamp, "retired": retired.name if retired else None}) + "\n",
    )
    iters = sorted(_iteration_of(p.name) for p in moved if _iteration_of(p.name) is not None)
    what = (
        f"moved the previous run's checkpoints (iterations {', '.join(map(str, iters))}) to {retired}"
        if iters
        else (f"moved the previous run's files to {retired}" if retired else "nothing to replace")
    )
    return (
        f"checkpoint.overwrite=true applied: {what}; this run starts from scratch, and a relaunch of the same "
        "command resumes it (delete the .overwritten-* folder to free its space)"
    )
