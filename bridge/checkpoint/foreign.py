"""Checkpoints of Megatron-LM and Megatron-Bridge: which layout a folder is in, what it holds, and the files
Megatron-Bridge's loader reads, written beside bridge's own.

All three write Megatron-Core's torch_dist format into `iter_NNNNNNN/` folders (the model under `model`,
`model0`.. with virtual pipeline stages, `optimizer`, `opt_param_scheduler`, `rng_state` beside it); they
differ in what comes with it:

    Megatron-LM      latest_checkpointed_iteration.txt; common.pt also holds `args` (its argparse
                     Namespace), `iteration`, `checkpoint_version` 3.0
    Megatron-Bridge  latest_train_state.pt (its tracker; the .txt only in older releases);
                     iter_N/train_state.pt (step, consumed samples, ...); iter_N/run_config.yaml (its
                     ConfigContainer: `model:` the provider's fields, `checkpoint:` save_optim, save_rng, ...)
    bridge           manifest.json in every folder, `checkpoint_content` in common.pt (and, for Megatron-Bridge's
                     loader, iter_N/train_state.pt; it reads latest_checkpointed_iteration.txt when there is
                     no latest_train_state.pt)

The optimizer's sharding format is Megatron-Core's `content_metadata` (distrib_optim_sharding_type) in each.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from bridge.checkpoint import foreign_fields
from bridge.checkpoint.paths import (  # noqa: F401 - the train-state names are re-exported
    LATEST_TRAIN_STATE_FILENAME,
    MANIFEST_FILENAME,
    RUN_CONFIG_FILENAME,
    TRAIN_STATE_FILENAME,
    read_train_state_file,
    tracked_by_train_state,
)
from bridge.parallel import ranks

BRIDGE = "bridge"
MEGATRON_BRIDGE = "Megatron-Bridge"
MEGATRON_LM = "Megatron-LM"
CHECKPOINT_VERSION = 3.0  # what Megatron-LM and Megatron-Bridge record (checkpoint_version)

logger = logging.getLogger("bridge.checkpoint")


@dataclass(frozen=True)
class ForeignCheckpoint:
    """What a Megatron-LM or Megatron-Bridge checkpoint folder holds, as bridge's loader needs it."""

    folder: Path
    layout: str  # MEGATRON_LM or MEGATRON_BRIDGE
    model_fields: dict = field(default_factory=dict)  # provider fields ({} when it records none)
    saved_sizes: tuple[int, int] | None = None  # (TP, PP) it was saved with
    train_state: dict = field(default_factory=dict)  # iteration, consumed_train_samples, ...
    content_metadata: dict | None = None  # Megatron-Core's, as saved
    has_optimizer: bool = False
    has_scheduler: bool = False

    @property
    def optimizer_format(self) -> str | None:
        return (self.content_metadata or {}).get("distrib_optim_sharding_type")

    @property
    def fields_source(self) -> str:
        return (
            f"its {RUN_CONFIG_FILENAME}" if self.layout == MEGATRON_BRIDGE else "its saved Megatron-LM args"
        )


def _read_common(folder: Path) -> dict:
    from megatron.core.dist_checkpointing.serialization import load_common_state_dict

    return load_common_state_dict(str(folder))


def layout_of(folder: str | os.PathLike, common: dict | None = None) -> str:
    """BRIDGE, MEGATRON_BRIDGE or MEGATRON_LM for one iter_* folder (a manifest or bridge's common state
    marks bridge's; a run_config.yaml without them Megatron-Bridge's; anything else Megatron-LM's)."""
    folder = Path(folder)
    if (folder / MANIFEST_FILENAME).is_file():
        return BRIDGE
    if common is None:
        common = _read_common(folder)
    if "checkpoint_content" in common:
        return BRIDGE
    if (folder / RUN_CONFIG_FILENAME).is_file() or (folder / TRAIN_STATE_FILENAME).is_file():
        return MEGATRON_BRIDGE
    return MEGATRON_LM


def _run_config(folder: Path) -> dict:
    try:
        data = yaml.safe_load((folder / RUN_CONFIG_FILENAME).read_text())
    except (OSError, yaml.YAMLError):
        return {}
    return data if isinstance(data, dict) else {}


def describe(folder: str | os.PathLike, common: dict | None = None) -> ForeignCheckpoint | None:
    """The foreign checkpoint in `folder` (an iter_* directory), None when bridge wrote it."""
    folder = Path(folder)
    if (folder / MANIFEST_FILENAME).is_file():
        return None
    if common is None:
        common = _read_common(folder)
    layout = layout_of(folder, common)
    if layout == BRIDGE:
        return None
    fields: dict = {}
    sizes = None
    args = common.get("args")
    train_state = {"iteration": int(common.get("iteration", 0) or 0)}
    if layout == MEGATRON_BRIDGE:
        run_config = _run_config(folder)
        model = run_config.get("model") if isinstance(run_config.get("model"), dict) else {}
        fields = foreign_fields.fields_from_megatron_bridge_model(model)
        sizes = foreign_fields.saved_layout_sizes(model)
        if (folder / TRAIN_STATE_FILENAME).is_file():
            saved = read_train_state_file(folder / TRAIN_STATE_FILENAME)
            train_state = {
                "iteration": int(saved.get("step", 0)),
                "consumed_train_samples": int(saved.get("consumed_train_samples", 0)),
                "consumed_valid_samples": int(saved.get("consumed_valid_samples", 0)),
            }
    if args is not None:
        if not fields:
            fields = foreign_fields.fields_from_megatron_lm_args(args)
        sizes = sizes or foreign_fields.saved_layout_sizes(args)
        if layout == MEGATRON_LM or not (folder / TRAIN_STATE_FILENAME).is_file():
            train_state["consumed_train_samples"] = int(getattr(args, "consumed_train_samples", 0) or 0)
            train_state["consumed_valid_samples"] = int(getattr(args, "consumed_valid_samples", 0) or 0)
    return ForeignCheckpoint(
        folder=folder,
        layout=layout,
        model_fields=fields,
        saved_sizes=sizes,
        train_state=train_state,
        content_metadata=common.get("content_metadata"),
        has_optimizer="optimizer" in common,
        has_scheduler="opt_param_scheduler" in common,
    )


def metadata_problems(folder: str | os.PathLike) -> list[str]:
    """Megatron-Core's own integrity checks for a checkpoint without bridge's manifest: metadata.json
    reads, the torch DCP `.metadata` (when there) reads, and every shard file it points into is there
    and long enough for the bytes it is said to hold."""
    from megatron.core import dist_checkpointing

    folder = Path(folder)
    if not dist_checkpointing.check_is_distributed_checkpoint(str(folder)):
        return ["metadata.json is missing or unreadable (not a Megatron-Core distributed checkpoint)"]
    if not (folder / ".metadata").is_file():
        return []  # the load itself stops at it with Megatron-Core's error
    try:
        from torch.distributed.checkpoint import FileSystemReader

        metadata = FileSystemReader(str(folder)).read_metadata()
    except Exception as err:  # noqa: BLE001 - any kind of damage
        return [f".metadata cannot be read ({type(err).__name__}: {err})"]
    needed: dict[str, int] = {}
    for info in (metadata.storage_data or {}).values():
        path = getattr(info, "relative_path", None)
        if path is not None:
            end = int(getattr(info, "offset", 0)) + int(getattr(info, "length", 0))
            needed[path] = max(needed.get(path, 0), end)
    problems = []
    for name, size in sorted(needed.items()):
        p = folder / name
        if not p.is_file():
            problems.append(f"{name} is missing (its .metadata points into it)")
        elif p.stat().st_size < size:
            problems.append(f"{name} has {p.stat().st_size} bytes, its .metadata needs {size} (truncated?)")
    return problems


_WARNED: set[str] = set()


def warn_no_manifest(folder: Path, layout: str) -> None:
    """Once per folder and process (rank 0): such a checkpoint is checked by Megatron-Core's metadata only."""
    key = str(Path(folder).resolve())
    if key in _WARNED:
        return
    _WARNED.add(key)
    if ranks.is_rank_zero():
        logger.warning(
            "checkpoint %s was written by %s: it has no bridge %s, so only Megatron-Core's metadata "
            "(metadata.json, .metadata and the shard files it names) was checked, not each file's bytes",
            folder,
            layout,
            MANIFEST_FILENAME,
        )


# ---- writing what Megatron-Bridge's loader reads ------------------------------------------------------


def train_state_dict(train_state: dict) -> dict:
    """Megatron-Bridge's TrainState.state_dict() for bridge's train state (the same counters)."""
    import torch

    return {
        "step": torch.tensor(int(train_state.get("iteration", 0)), dtype=torch.int64),
        "consumed_train_samples": torch.tensor(int(train_state.get("consumed_train_samples", 0)), dtype=torch.int64),
        "skipped_train_samples": torch.tensor(0, dtype=torch.int64),
        "consumed_valid_samples": torch.tensor(int(train_state.get("consumed_valid_samples", 0)), dtype=torch.int64),
        "floating_point_operations_so_far": torch.tensor(0.0, dtype=torch.float64),
        "do_train": torch.tensor(False),
        "do_valid": torch.tensor(False),
        "do_test": torch.tensor(False),
    }  # fmt: skip


def _atomic_torch_save(data: dict, path: Path) -> None:
    import torch

    tmp = path.with_name(path.name + ".tmp")
    torch.save(data, str(tmp))
    os.replace(tmp, path)


def write_train_state(folder: Path, train_state: dict) -> None:
    """iter_N/train_state.pt (rank 0, into the staging folder: published and hashed with the checkpoint)."""
    _atomic_torch_save(train_state_dict(train_state), Path(folder) / TRAIN_STATE_FILENAME)
