"""Whether a checkpoint folder can be loaded as it is on disk, before anything is read into a model.

bridge's own checkpoints are checked against their manifest (sizes and CRC-32s); one of bridge's that lost
its manifest is damaged; Megatron-LM's and Megatron-Bridge's, which never have one, get Megatron-Core's
metadata checks and one warning saying so (bridge.checkpoint.foreign).
"""

from __future__ import annotations

from pathlib import Path

from bridge.checkpoint import foreign, manifest
from bridge.checkpoint.paths import (
    HF_ASSETS_DIR,
    MANIFEST_FILENAME,
    RUN_CONFIG_FILENAME,
    is_complete,
    tracked_or_none,
)


def check_folder(target: Path, verify: bool, data_later: bool = False) -> list[str]:
    """What keeps the folder from loading ([] when nothing). `data_later`: the data files' checksums are
    the load's to check as it reads them (manifest.verify_data); their sizes are checked here."""
    if not target.is_dir():
        return [f"{target} does not exist"]
    tracked = tracked_or_none(target.parent) if target.name.startswith("iter_") else None
    if not is_complete(target, tracked):
        return [f"{target} is not a complete checkpoint (an interrupted save; it has no {MANIFEST_FILENAME})"]
    if (target / MANIFEST_FILENAME).is_file():
        return manifest.verify(target, checksums=verify, data_later=data_later)
    common = _common_or_none(target)
    if _written_by_bridge(target, common):
        return [
            f"{MANIFEST_FILENAME} is missing (bridge writes one with every checkpoint, so its files can no "
            "longer be checked: it was deleted or the folder was copied incompletely)"
        ]
    # no manifest to check against (Megatron-LM's, Megatron-Bridge's, bridge's from before it): Megatron-Core's
    problems = foreign.metadata_problems(target)
    if problems:
        return problems
    if common is not None and (layout := foreign.layout_of(target, common)) != foreign.BRIDGE:
        foreign.warn_no_manifest(target, layout)
    return manifest.verify(target, checksums=verify, data_later=data_later)


def _common_or_none(target: Path) -> dict | None:
    """Megatron-Core's common state of the folder, None when it cannot be read (the load reports why)."""
    from torch.distributed.checkpoint.api import CheckpointException  # (a BaseException)

    try:
        return foreign._read_common(target)
    except (Exception, CheckpointException):  # noqa: BLE001 - any kind of damage
        return None


def _written_by_bridge(target: Path, common: dict | None) -> bool:
    """A checkpoint saved with a manifest by save_checkpoint: its common state says so, and it holds
    the files bridge writes beside the shards (run_config.yaml from training, hf_assets/ from an
    import). Checkpoints from before the manifest, or from Megatron-LM / Megatron-Bridge, have none."""
    if not ((target / RUN_CONFIG_FILENAME).is_file() or (target / HF_ASSETS_DIR).is_dir()):
        return False
    return bool((common or {}).get("checkpoint_content", {}).get("manifest"))
