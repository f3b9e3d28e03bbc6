"""Checkpoints in Megatron-Core's dist_checkpointing `torch_dist` format.

Layout (Megatron's):
    <root>/iter_0000010/                  one checkpoint: sharded tensors, common.pt, metadata.json,
                                          run_config.yaml
    <root>/latest_checkpointed_iteration.txt   the tracker: the newest *complete* checkpoint

The tracker is replaced atomically (write + fsync + os.replace) by rank 0 only after every rank has
finished writing, so a crash during a save leaves it on the previous checkpoint. Model weights are
saved as global ShardedTensors, so a checkpoint loads under any TP/PP layout; optimizer state and RNG
state are tied to the layout they were saved with.

`save_checkpoint(..., optimizer=None)` / `load_checkpoint(..., optimizer=None)` is the model-only path
(HF import/export, pretrained weights).
"""

from __future__ import annotations

import os
import random
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bridge.errors import ConfigError

TRACKER_FILENAME = "latest_checkpointed_iteration.txt"
RUN_CONFIG_FILENAME = "run_config.yaml"

# Called on every rank after the shards of a checkpoint are written and before the tracker moves.
# Tests use it to simulate a crash in the middle of a save.
AFTER_SHARDS_WRITTEN_HOOKS: list[Callable[[Path, int], None]] = []


# Distributed-optimizer state stored per DP shard (reshardable across DP sizes only), the format
# Megatron-LM uses by default; the plain optimizer ignores these keys.
OPTIMIZER_METADATA = {"distrib_optim_sharding_type": "dp_reshardable", "chained_optim_avoid_prefix": True}


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


def _write_tracker(root: Path, iteration: int) -> None:
    tmp = root / (TRACKER_FILENAME + ".tmp")
    with open(tmp, "w") as f:
        f.write(f"{iteration}\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, root / TRACKER_FILENAME)
    dir_fd = os.open(root, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _rank() -> int:
    return torch.distributed.get_rank() if torch.distributed.is_initialized() else 0


def _barrier() -> None:
    if torch.distributed.is_initialized():
        torch.distributed.barrier()


def _unwrap(chunks: list) -> list:
    """The GPTModel inside each chunk, whatever the strategy wrapped it in."""
    from megatron.core.distributed import DistributedDataParallel, TorchFullyShardedDataParallel
    from megatron.core.distributed.fsdp.mcore_fsdp_adapter import FullyShardedDataParallel
    from megatron.core.transformer.module import Float16Module
    from megatron.core.utils import unwrap_model

    wrappers = (
        DistributedDataParallel,
        TorchFullyShardedDataParallel,
        FullyShardedDataParallel,
        Float16Module,
        torch.nn.parallel.DistributedDataParallel,
    )
    return unwrap_model(list(chunks), wrappers)


def _model_sharded_state_dict(model_chunks: list) -> dict:
    chunks = _unwrap(model_chunks)
    if len(chunks) == 1:
        return {"model": chunks[0].sharded_state_dict()}
    return {f"model{i}": c.sharded_state_dict() for i, c in enumerate(chunks)}


def _model_keys(n_chunks: int) -> list[str]:
    return ["model"] if n_chunks == 1 else [f"model{i}" for i in range(n_chunks)]


def _rng_state() -> dict:
    from megatron.core import tensor_parallel

    state = {
        "random": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
        "tracker": tensor_parallel.get_cuda_rng_tracker().get_states(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def _set_rng_state(state: dict) -> None:
    from megatron.core import tensor_parallel

    random.setstate(state["random"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])
    tensor_parallel.get_cuda_rng_tracker().set_states(state["tracker"])


def _rng_sharded_object(data: dict | None):
    """Every rank keeps its own RNG state: one shard per global rank."""
    from megatron.core.dist_checkpointing.mapping import ShardedObject

    world = torch.distributed.get_world_size() if torch.distributed.is_initialized() else 1
    return ShardedObject("rng_state", data, (world,), (_rank(),), replica_id=0)


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
    if _rank() == 0:
        root.mkdir(parents=True, exist_ok=True)
        if target.exists():  # leftovers of an interrupted save (the tracker never named it)
            shutil.rmtree(target)
        target.mkdir()
    _barrier()

    state = _model_sharded_state_dict(model_chunks)
    if optimizer is not None:
        state["optimizer"] = optimizer.sharded_state_dict(state, metadata=OPTIMIZER_METADATA)
    if scheduler is not None:
        state["opt_param_scheduler"] = scheduler.state_dict()
    if save_rng:
        state["rng_state"] = _rng_sharded_object(_rng_state())
    state["train_state"] = {"iteration": int(iteration), **(train_state or {})}
    state["checkpoint_content"] = {"optimizer": optimizer is not None, "rng": save_rng}

    dist_checkpointing.save(state, str(target))
    if _rank() == 0 and run_config_yaml is not None:
        (target / RUN_CONFIG_FILENAME).write_text(run_config_yaml)
    _barrier()
    for hook in AFTER_SHARDS_WRITTEN_HOOKS:
        hook(target, iteration)
    if _rank() == 0:
        _write_tracker(root, iteration)
        if most_recent_k and most_recent_k > 0:
            _remove_old_checkpoints(root, keep=most_recent_k)
    _barrier()
    return target


def _remove_old_checkpoints(root: Path, keep: int) -> None:
    iters = sorted(int(p.name[5:]) for p in root.glob("iter_*") if p.name[5:].isdigit())
    for it in iters[:-keep]:
        shutil.rmtree(checkpoint_dir(root, it), ignore_errors=True)


def resolve_checkpoint(path: str | os.PathLike, iteration: int | None = None) -> tuple[Path, int | None]:
    """A checkpoint root (with a tracker) or one iter_* directory -> (directory, iteration)."""
    path = Path(path)
    if (path / "metadata.json").is_file():
        name = path.name
        return path, int(name[5:]) if name.startswith("iter_") and name[5:].isdigit() else None
    if iteration is None:
        iteration = latest_iteration(path)
    if iteration is None:
        raise ConfigError(
            f"checkpoint path {str(path)!r} holds no complete checkpoint (no {TRACKER_FILENAME} and no "
            "metadata.json): point checkpoint.load / checkpoint.pretrained_checkpoint at a checkpoint "
            "root or an iter_* directory"
        )
    target = checkpoint_dir(path, iteration)
    if not (target / "metadata.json").is_file():
        raise ConfigError(f"checkpoint {target} is incomplete (no metadata.json); pick another iteration")
    return target, iteration


def _ensure_optimizer_state(optimizer) -> None:
    """Megatron-Core's DistributedOptimizer can describe its state for loading only once that state
    exists (without Apex/TE it reads Adam's 'step'); a fresh optimizer gets Megatron-Core's own dummy
    state first. The dummy step touches the parameters, which the load then overwrites."""
    from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer

    for opt in getattr(optimizer, "chained_optimizers", [optimizer]):
        if isinstance(opt, DistributedOptimizer) and not opt.optimizer.state:
            opt._init_optimizer_states_with_dummy_values()


def _restore_adam_steps(optimizer, loaded: Any) -> None:
    """Put Adam's step count back after loading a DistributedOptimizer without Apex/TE.

    Megatron-Core 0.16 restores 'step' from the checkpoint and then overwrites it while copying the
    per-parameter state (with the step of the freshly initialised state, 1), and the value it set was
    one tensor shared by every parameter. Both make bias correction wrong after a resume; this sets
    one fresh step tensor per parameter from the checkpoint's param_groups.
    """
    from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer

    subs = getattr(optimizer, "chained_optimizers", [optimizer])
    if len(subs) == 1:
        saved = [loaded]
    elif isinstance(loaded, dict):
        saved = [v for _, v in sorted(loaded.items())]
    else:
        saved = list(loaded)
    for opt, sd in zip(subs, saved, strict=True):
        if not isinstance(opt, DistributedOptimizer) or not isinstance(sd, dict):
            continue
        groups = sd.get("optimizer", {}).get("param_groups", [])
        steps = {float(g["step"]) for g in groups if g.get("step") is not None}
        if len(steps) != 1:
            continue
        step = steps.pop()
        for state in opt.optimizer.state.values():
            if torch.is_tensor(state.get("step")):
                state["step"] = torch.tensor(step, dtype=state["step"].dtype, device=state["step"].device)


def load_checkpoint(
    path: str | os.PathLike,
    model_chunks: list,
    optimizer=None,
    scheduler=None,
    *,
    iteration: int | None = None,
    load_rng: bool = True,
    strict: bool = True,
) -> dict:
    """Load into the model chunks (and optimizer / scheduler / RNG when given); returns train_state.

    Model weights reshard to the current TP/PP layout; optimizer and RNG state need the saving layout.
    """
    from megatron.core import dist_checkpointing

    target, _ = resolve_checkpoint(path, iteration)
    content = _read_common(target)
    has_optim = content.get("checkpoint_content", {}).get("optimizer", False)
    has_rng = content.get("checkpoint_content", {}).get("rng", False)

    chunks = _unwrap(model_chunks)
    state = _model_sharded_state_dict(model_chunks)
    if optimizer is not None:
        if not has_optim:
            raise ConfigError(
                f"checkpoint {target} has no optimizer state: load it as "
                "checkpoint.pretrained_checkpoint (weights only) or set checkpoint.load_optim=False"
            )
        _ensure_optimizer_state(optimizer)
        state["optimizer"] = optimizer.sharded_state_dict(state, is_loading=True, metadata=OPTIMIZER_METADATA)
    rng = load_rng and has_rng
    if rng:
        state["rng_state"] = _rng_sharded_object(None)
    loaded = dist_checkpointing.load(state, str(target))

    with torch.no_grad():  # the optimizer copies into views of the parameters
        for chunk, key in zip(chunks, _model_keys(len(chunks)), strict=True):
            chunk.load_state_dict(loaded[key], strict=strict)
        if optimizer is not None:
            optimizer.load_state_dict(loaded["optimizer"])
            _restore_adam_steps(optimizer, loaded["optimizer"])
    if scheduler is not None and "opt_param_scheduler" in loaded:
        scheduler.load_state_dict(loaded["opt_param_scheduler"])
    if rng:
        _set_rng_state(loaded["rng_state"])
    return dict(loaded.get("train_state", {}))


def _read_common(target: Path) -> dict:
    from megatron.core.dist_checkpointing.serialization import load_common_state_dict

    return load_common_state_dict(str(target))


def saved_layout(path: str | os.PathLike, iteration: int | None = None) -> str | None:
    """The layout line (TP=.. PP=..) a checkpoint was saved with, if recorded."""
    target, _ = resolve_checkpoint(path, iteration)
    return _read_common(target).get("train_state", {}).get("layout")
