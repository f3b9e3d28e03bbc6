"""Loading a Megatron-LM or Megatron-Bridge checkpoint (bridge.checkpoint.foreign) into bridge's model chunks.

Weights always (they reshard to any layout, after bridge.checkpoint.compat's checks); the optimizer and
scheduler state when a resume asks for them and they fit: the distributed optimizer's state in a format
bridge loads (`dp_reshardable`, which needs the saved TP and PP sizes, or `fully_reshardable`); the
iteration and sample counters from its train state. Its RNG state is never restored (Megatron-LM and
Megatron-Bridge keep it per (PP, TP, DP) rank in another structure than bridge's per-rank one). One log
line on rank 0 says what was restored and what was not.
"""

from __future__ import annotations

import contextlib
import logging

import torch

from bridge.checkpoint import compat, fsdp2_state, state
from bridge.checkpoint.foreign import ForeignCheckpoint
from bridge.checkpoint.save_state import load_part, model_keys, model_sharded_state_dict
from bridge.errors import ConfigError
from bridge.models.adapter_marks import has_adapters
from bridge.parallel import ranks
from bridge.parallel.wrappers import unwrap_all

logger = logging.getLogger("bridge.checkpoint")


def _current_sizes() -> tuple[int, int]:
    from megatron.core import parallel_state

    return (
        parallel_state.get_tensor_model_parallel_world_size(),
        parallel_state.get_pipeline_model_parallel_world_size(),
    )


def optimizer_verdict(theirs: ForeignCheckpoint, current_sizes: tuple[int, int]) -> str | None:
    """None when the checkpoint's optimizer state loads under this layout, else why not."""
    fmt = theirs.optimizer_format
    if not theirs.has_optimizer:
        return "it holds none"
    if fmt not in state.OPTIMIZER_FORMATS:
        return (
            f"its format {fmt!r} is not one bridge loads ({', '.join(state.OPTIMIZER_FORMATS)}; Megatron-Core's "
            "content_metadata distrib_optim_sharding_type)"
        )
    if fmt == "dp_reshardable" and theirs.saved_sizes is not None and theirs.saved_sizes != current_sizes:
        return (
            f"it is dp_reshardable and was saved at TP={theirs.saved_sizes[0]} PP={theirs.saved_sizes[1]}, this "
            f"run is TP={current_sizes[0]} PP={current_sizes[1]} (save it with fully_reshardable optimizer "
            "state, Megatron-Bridge's checkpoint.dist_ckpt_optim_fully_reshardable, to change them)"
        )
    return None


def _load_metadata(theirs: ForeignCheckpoint) -> dict:
    """The content metadata the optimizer's sharded state dict is described with: the checkpoint's own."""
    saved = {
        k: v for k, v in (theirs.content_metadata or {}).items() if isinstance(v, (bool, int, float, str))
    }
    return {**state.optimizer_metadata(theirs.optimizer_format), **saved}


def load_foreign(
    theirs: ForeignCheckpoint, model_chunks: list, optimizer, scheduler, strict: bool, model_config,
    lr_from_config: bool = False,
) -> dict:  # fmt: skip
    """Load `theirs` into the chunks (and the optimizer / scheduler when given and it fits); returns the
    train state (iteration, consumed samples) plus "checkpoint_dir"."""
    from megatron.core import dist_checkpointing

    target = theirs.folder
    if fsdp2_state.is_fsdp2(model_chunks):
        raise ConfigError(
            f"{theirs.layout} checkpoint {target} holds Megatron-Core's torch_dist state and this run's model is "
            "an fsdp2 one: resume it with distributed.strategy=megatron, or start fsdp2 from its weights "
            "(checkpoint.pretrained_checkpoint)"
        )
    chunks = unwrap_all(model_chunks)
    part = "base" if has_adapters(chunks) else "all"  # a PEFT run starts from its weights
    sd = model_sharded_state_dict(model_chunks, part)
    try:
        compat.check_compatible(target, chunks, sd, model_config, strict=strict)
    except ConfigError as err:
        if theirs.model_fields:
            raise
        raise ConfigError(
            f"{theirs.layout} checkpoint {target} records no model fields (no run_config.yaml model section, "
            "no saved args), so the model is the recipe's, and it does not fit: pick the recipe (preset) of "
            f"its model or set its model fields (for an export: --hf-config with its Hugging Face config). {err}"
        ) from err
    restored, skipped = ["weights"], []
    why_not = optimizer_verdict(theirs, _current_sizes()) if optimizer is not None else None
    with_optimizer = optimizer is not None and why_not is None
    if with_optimizer:
        state.ensure_optimizer_state(optimizer)
        sd["optimizer"] = optimizer.sharded_state_dict(sd, is_loading=True, metadata=_load_metadata(theirs))
    elif optimizer is not None:
        skipped.append(f"optimizer state ({why_not})")
    loaded = dist_checkpointing.load(sd, str(target))
    with torch.no_grad():
        for chunk, key in zip(chunks, model_keys(len(chunks)), strict=True):
            load_part(chunk, loaded[key], part, strict)
        if with_optimizer:
            if lr_from_config:
                state.use_current_lr(optimizer, loaded["optimizer"])
            reshardable = theirs.optimizer_format == "fully_reshardable"
            with state.adam_steps_kept(optimizer) if reshardable else contextlib.nullcontext():
                optimizer.load_state_dict(loaded["optimizer"])
            state.restore_adam_steps(optimizer, loaded["optimizer"])
            restored.append(f"optimizer state ({theirs.optimizer_format})")
        elif optimizer is not None:
            optimizer.reload_model_params()  # the optimizer's main copies follow the loaded weights
    if scheduler is not None:
        if with_optimizer and "opt_param_scheduler" in loaded:
            scheduler.load_state_dict(loaded["opt_param_scheduler"])
            restored.append("learning-rate schedule")
        else:
            skipped.append("learning-rate schedule (it goes with the optimizer state)")
    if optimizer is not None or scheduler is not None:  # a resume: counters and RNG
        restored.append(f"iteration {theirs.train_state.get('iteration', 0)} and sample counters")
        skipped.append(f"RNG state ({theirs.layout} keeps it per (PP, TP, DP) rank, bridge per rank)")
    if ranks.is_rank_zero() and optimizer is None and scheduler is None:
        logger.info("loaded the weights of %s's checkpoint %s", theirs.layout, target)
    elif ranks.is_rank_zero():
        logger.info(
            "loaded %s's checkpoint %s: restored %s; not restored: %s",
            theirs.layout,
            target,
            ", ".join(restored),
            "; ".join(skipped) or "nothing",
        )
    return {**theirs.train_state, "checkpoint_dir": str(target)}
