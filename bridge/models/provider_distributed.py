"""The distributed build of a GPTModelProvider: this rank's model chunks, wrapped and ready for training.

Steps, in order: make sure the model-parallel groups exist and match the layout; one TransformerConfig
shared by every chunk; the chunks (one per virtual pipeline stage); post-build hooks; the Float16Module
and DDP wrappers. torch and megatron.core are imported inside the functions only.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from bridge.errors import ConfigError
from bridge.models import provider_layout
from bridge.models.expert_grads import reduce_expert_grads_over_expert_dp
from bridge.models.provider_checks import model_error
from bridge.models.provider_layout import parallel_sizes
from bridge.parallel import ranks, runtime
from bridge.parallel.sizes import FIELD_OF

if TYPE_CHECKING:
    from bridge.models.provider_fields import GPTFields
    from bridge.parallel.layout import ParallelLayout


def _no_init(tensor):
    return tensor


def provide_distributed_model(
    p: GPTFields,
    *,
    wrap_with_ddp: bool,
    ddp_config: Any,
    mixed_precision_wrapper: bool,
    data_parallel_random_init: bool,
    seed: int,
    random_init: bool | None,
    meta_device: bool,
    layout: ParallelLayout | None,
) -> list:
    """See GPTModelProvider.provide_distributed_model."""
    wanted = _layout_sizes(p, layout)
    _ensure_model_parallel_groups(p, layout, seed)
    from megatron.core import parallel_state

    check_parallel_state(parallel_state, wanted)
    config = _shared_config(p, random_init=random_init, meta_device=meta_device, wrap_with_ddp=wrap_with_ddp)
    chunks = _build_chunks(p, config, meta_device)
    for hook in p.post_build_hooks():
        hook(chunks)
    reduce_expert_grads_over_expert_dp(chunks)
    return _wrap(
        p,
        chunks,
        config,
        mixed_precision_wrapper=mixed_precision_wrapper,
        wrap_with_ddp=wrap_with_ddp,
        ddp_config=ddp_config,
        data_parallel_random_init=data_parallel_random_init,
    )


def _layout_sizes(p: GPTFields, layout: ParallelLayout | None) -> dict[str, int | None]:
    """The sizes the groups must have: the provider's, which a given layout must agree with."""
    sizes = parallel_sizes(p)
    if layout is None:
        return sizes
    for short, size in sizes.items():
        if short == "vpp" and sizes["pp"] == 1:
            continue  # no virtual stages without pipeline stages (the layout refuses vpp with pp=1)
        if getattr(layout, short) != size:
            raise model_error(
                FIELD_OF[short],
                size,
                f"the layout given to provide_distributed_model has {short}={getattr(layout, short)}",
                "pass the layout derived from this provider (bridge.models.provider_layout.derive_layout(provider, world_size), or the run plan's)",
            )
    return sizes


def _ensure_model_parallel_groups(p: GPTFields, layout: ParallelLayout | None, seed: int) -> None:
    # torch.distributed and the groups of this layout, when nobody made them yet (one process when not
    # under torchrun); the layout is derived here only when the caller did not pass its own.
    from megatron.core import parallel_state

    if parallel_state.model_parallel_is_initialized():
        return

    runtime.initialize_distributed(
        layout if layout is not None else provider_layout.derive_layout(p, ranks.env_world_size()), seed=seed
    )


def check_parallel_state(parallel_state, wanted: dict[str, int | None]) -> None:
    """Groups built for another layout would silently shard the model wrongly: refuse them."""
    live = {
        "tp": parallel_state.get_tensor_model_parallel_world_size(),
        "pp": parallel_state.get_pipeline_model_parallel_world_size(),
        "vpp": parallel_state.get_virtual_pipeline_model_parallel_world_size(),
        "cp": parallel_state.get_context_parallel_world_size(),
        "ep": parallel_state.get_expert_model_parallel_world_size(),
        "etp": parallel_state.get_expert_tensor_parallel_world_size(),
    }
    if wanted["pp"] == 1:
        live["vpp"] = wanted["vpp"]
    for short, size in live.items():
        if size != wanted[short]:
            raise model_error(
                FIELD_OF[short],
                wanted[short],
                f"the model-parallel groups of this process were initialized with {size}",
                "build the model with the provider whose layout initialized the groups, or "
                "destroy them (bridge.parallel.runtime.destroy_distributed) first",
            )


def _shared_config(p: GPTFields, *, random_init: bool | None, meta_device: bool, wrap_with_ddp: bool):
    # One TransformerConfig shared by all chunks, as Megatron-LM does: the training loop sets its
    # hooks (no_sync_func, finalize_model_grads_func, ...) once and every chunk sees them.
    config = p.transformer_config()
    if random_init is None:
        random_init = not p.hooks_replace_weights()
    if not random_init:
        # The in-place path allocates each local shard directly; the CPU path would first build
        # every full weight in fp32 (a model-sized transient) only to overwrite it.
        config.use_cpu_initialization = False
        for name in ("init_method", "output_layer_init_method", "embedding_init_method"):
            if hasattr(config, name):
                setattr(config, name, _no_init)
    if meta_device:
        if wrap_with_ddp:
            raise ConfigError(
                "provide_distributed_model(meta_device=True, wrap_with_ddp=True): a meta-device model "
                "holds no data to train or wrap; pass wrap_with_ddp=False"
            )
        # The CPU-initialization path allocates without an explicit device, so the meta context
        # applies (the in-place path names the accelerator); TE layers take the config flag.
        config.use_cpu_initialization = True
        config.init_model_with_meta_device = True
    return config


def _build_chunks(p: GPTFields, config, meta_device: bool) -> list:
    import torch
    from megatron.core import tensor_parallel

    vpp = p.virtual_pipeline_model_parallel_size
    with torch.device("meta") if meta_device else contextlib.nullcontext():
        if p.pipeline_model_parallel_size > 1 and vpp is not None:
            chunks = [p.provide_stage(config, None, None, stage) for stage in range(vpp)]
        else:
            chunks = [p.provide_stage(config, None, None, None)]
    for chunk in chunks:
        for param in chunk.parameters():
            tensor_parallel.set_defaults_if_not_set_tensor_model_parallel_attributes(param)
        if torch.cuda.is_available() and not meta_device:
            chunk.cuda(torch.cuda.current_device())
    return chunks


def _wrap(
    p: GPTFields,
    chunks: list,
    config,
    *,
    mixed_precision_wrapper: bool,
    wrap_with_ddp: bool,
    ddp_config: Any,
    data_parallel_random_init: bool,
) -> list:
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
    from megatron.core.transformer.module import Float16Module

    if mixed_precision_wrapper and (p.fp16 or p.bf16):
        chunks = [Float16Module(config, chunk) for chunk in chunks]
    if not wrap_with_ddp:
        return chunks
    if ddp_config is None:
        ddp_config = DistributedDataParallelConfig()
    elif isinstance(ddp_config, dict):
        ddp_config = DistributedDataParallelConfig(**ddp_config)
    chunks = [
        # As Megatron-LM: no buckets after the first chunk (their comms overlap with compute anyway).
        DistributedDataParallel(config=config, ddp_config=ddp_config, module=chunk, disable_bucketing=i > 0)
        for i, chunk in enumerate(chunks)
    ]
    if data_parallel_random_init:
        for chunk in chunks:
            chunk.broadcast_params()
    return chunks
