"""What a save writes: the sharded state dict of the model chunks (all of it, the PEFT adapters only, or
the base only), of the optimizer, scheduler, RNG and train state, and Megatron-Core's save strategy."""

from __future__ import annotations

from bridge.checkpoint import fsdp2_state, state
from bridge.errors import ConfigError
from bridge.models.adapter_marks import has_adapters, is_adapter_name
from bridge.parallel.wrappers import unwrap_all

# which model tensors a checkpoint holds: every one, only PEFT adapters, or everything but the adapters
MODEL_PARTS = ("all", "adapters", "base")


def model_keys(n_chunks: int) -> list[str]:
    return ["model"] if n_chunks == 1 else [f"model{i}" for i in range(n_chunks)]


def model_sharded_state_dict(model_chunks: list, part: str = "all") -> dict:
    """Megatron-Core's sharded state dict of each chunk, restricted to `part` (MODEL_PARTS)."""
    chunks = unwrap_all(model_chunks)
    out = {key: c.sharded_state_dict() for key, c in zip(model_keys(len(chunks)), chunks, strict=True)}
    if part == "all":
        return out
    keep_adapters = part == "adapters"
    return {
        key: {k: v for k, v in sd.items() if is_adapter_name(chunk, k) == keep_adapters}
        for (key, sd), chunk in zip(out.items(), chunks, strict=True)
    }


def save_strategy(fully_parallel: bool):
    """Megatron-Core's default torch_dist writer, its work spread over the DP x CP replicas when asked
    (None: the default strategy, every replica's shards written by replica 0)."""
    if not fully_parallel:
        return None
    from megatron.core import parallel_state
    from megatron.core.dist_checkpointing.serialization import get_default_save_sharded_strategy
    from megatron.core.dist_checkpointing.strategies.fully_parallel import FullyParallelSaveStrategyWrapper

    group = parallel_state.get_data_parallel_group(with_context_parallel=True)
    if group.size() == 1:
        return None
    return FullyParallelSaveStrategyWrapper(get_default_save_sharded_strategy(), group)


def checkpoint_state_dict(
    iteration: int,
    model_chunks: list,
    optimizer,
    scheduler,
    train_state: dict | None,
    save_rng: bool,
    optimizer_format: str = "dp_reshardable",
) -> tuple[dict, bool]:
    """The state dict handed to `dist_checkpointing.save`, and whether the model is an fsdp2 one (its
    tensors then go to torch DCP beside it, fsdp2_state). `optimizer_format`: state.OPTIMIZER_FORMATS."""
    # a PEFT run saves its adapters only: the frozen base comes from checkpoint.pretrained_checkpoint
    adapters_only = has_adapters(unwrap_all(model_chunks))
    # strategy fsdp2: DTensor parameters and optimizer state go to torch DCP (fsdp2_state); the rest
    # (scheduler, RNG, train state) is Megatron-Core's common state as for every strategy
    fsdp2 = fsdp2_state.is_fsdp2(model_chunks)
    sd = {} if fsdp2 else model_sharded_state_dict(model_chunks, "adapters" if adapters_only else "all")
    if optimizer is not None and not fsdp2:
        sd["optimizer"] = optimizer.sharded_state_dict(
            sd, metadata=state.optimizer_metadata(optimizer_format)
        )
    if scheduler is not None:
        sd["opt_param_scheduler"] = scheduler.state_dict()
    if save_rng:
        sd["rng_state"] = state.rng_sharded_object(state.rng_state())
    sd["train_state"] = {"iteration": int(iteration), **(train_state or {})}
    # what Megatron-LM / Megatron-Bridge read from common.pt: the iteration, the format version, and
    # Megatron-Core's content metadata (dist_checkpointing.load_content_metadata: the optimizer's format)
    sd["iteration"] = int(iteration)
    sd["checkpoint_version"] = 3.0
    sd["content_metadata"] = {
        **(state.optimizer_metadata(optimizer_format) if optimizer is not None and not fsdp2 else {}),
        "singleton_local_shards": False,
        "chained_optim_avoid_prefix": True,
    }
    sd["checkpoint_content"] = {
        "optimizer": optimizer is not None,
        "rng": save_rng,
        "adapters_only": adapters_only,
        "fsdp2": fsdp2_state.current_sizes(model_chunks) if fsdp2 else None,
        "optimizer_format": optimizer_format if optimizer is not None and not fsdp2 else None,
        "manifest": True,  # a manifest.json comes with it: one that goes missing means damage
    }
    return sd, fsdp2


def load_part(chunk, tensors: dict, part: str, strict: bool) -> None:
    """load_state_dict of one part: the other part's keys are expected to be missing, nothing else."""
    if part == "all":
        chunk.load_state_dict(tensors, strict=strict)
        return
    result = chunk.load_state_dict(tensors, strict=False)
    wrong_missing = [k for k in result.missing_keys if is_adapter_name(chunk, k) == (part == "adapters")]
    if strict and (wrong_missing or result.unexpected_keys):
        raise ConfigError(
            f"loading the {part} tensors: missing {wrong_missing[:5]}, unexpected {result.unexpected_keys[:5]}"
        )
