"""Whether a complete checkpoint already on disk holds exactly the state a run is about to save.

A save at an iteration that already has a complete checkpoint (a re-run, a resume from an older step,
a retrain after a fallback from a damaged one) keeps that checkpoint only when this proves it is the
same state: its manifest records the same weights fingerprint (bridge.training.saves.weights_summary),
the same iteration and the same consumed samples, and its files still match the manifest. Anything
else is replaced through a staging folder and an atomic rename (save_load.save_checkpoint).
"""

from __future__ import annotations

import os
from pathlib import Path

from bridge.checkpoint import manifest
from bridge.checkpoint.paths import is_complete

# the summary entries that identify a saved state (weights_fingerprint: a digest of every rank's weights)
STATE_KEYS = ("iteration", "consumed_train_samples", "weights_fingerprint")


def holds_same_state(folder: str | os.PathLike, summary: dict | None) -> bool:
    """All ranks together (the checksums are shared out): True when `folder` is a complete checkpoint
    whose manifest summary matches `summary` on STATE_KEYS and whose files match the manifest."""
    folder = Path(folder)
    summary = summary or {}
    if not folder.is_dir() or not is_complete(folder) or summary.get("weights_fingerprint") is None:
        return False
    saved = manifest.summary(folder)
    if any(saved.get(key) != summary.get(key) for key in STATE_KEYS):
        return False
    return manifest.verify(folder, checksums=True) == []
