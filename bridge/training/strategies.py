"""Wrap the model chunks for `distributed.strategy` (docs/parallelism.md, "Data-parallel strategies").

| strategy      | wrapper                                           | optimizer                          |
| megatron      | Megatron-Core DistributedDataParallel             | distributed optimizer (if enabled) |
| fsdp2         | Megatron-Core TorchFullyShardedDataParallel       | Megatron-Core, not distributed     |
| megatron_fsdp | Megatron-Core Megatron-FSDP                       | distributed optimizer (required)   |
| ddp           | torch.nn.parallel.DistributedDataParallel         | Megatron-Core, not distributed     |

The run's plan has already refused strategies this machine cannot run (fsdp2 and megatron_fsdp need
CUDA: bridge.config.validation.CUDA_ONLY_STRATEGIES); this module only builds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class WrappedModel:
    chunks: list  # one per virtual pipeline stage
    use_distributed_optimizer: bool
    megatron_ddp: bool  # chunks expose Megatron-Core's grad-buffer API (zero_grad_buffer, ...)


def ddp_config_for(dist_cfg: Any, strategy: str, use_distributed_optimizer: bool):
    from megatron.core.distributed import DistributedDataParallelConfig

    kwargs = dict(
        grad_reduce_in_fp32=bool(dist_cfg.grad_reduce_in_fp32),
        overlap_grad_reduce=bool(dist_cfg.overlap_grad_reduce),
        overlap_param_gather=bool(dist_cfg.overlap_param_gather) and use_distributed_optimizer,
        average_in_collective=bool(getattr(dist_cfg, "average_in_collective", True)),
        use_distributed_optimizer=use_distributed_optimizer,
        # The loop checks loss and grad-norm finiteness on every rank together and stops with one
        # message; Megatron-Core's per-bucket check would raise on some ranks and hang the others.
        check_for_nan_in_grad=False,
    )
    if strategy == "megatron_fsdp":
        kwargs.update(use_megatron_fsdp=True, data_parallel_sharding_strategy="optim_grads_params")
    return DistributedDataParallelConfig(**kwargs)


def wrap_model(
    provider,
    dist_cfg: Any,
    opt_cfg: Any,
    *,
    cuda_available: bool,
    seed: int,
    data_parallel_random_init: bool = False,
) -> WrappedModel:
    """Build this rank's model chunks with `provider` and wrap them per distributed.strategy."""
    strategy = dist_cfg.strategy
    if strategy == "megatron":
        use_dist_opt = bool(opt_cfg.use_distributed_optimizer)
        chunks = provider.provide_distributed_model(
            wrap_with_ddp=True,
            ddp_config=ddp_config_for(dist_cfg, strategy, use_dist_opt),
            data_parallel_random_init=data_parallel_random_init,
            seed=seed,
        )
        return WrappedModel(chunks, use_dist_opt, megatron_ddp=True)

    chunks = provider.provide_distributed_model(wrap_with_ddp=False, seed=seed)
    if strategy == "ddp":
        return WrappedModel([_torch_ddp(c) for c in chunks], False, megatron_ddp=False)
    if strategy == "fsdp2":
        from megatron.core.distributed import TorchFullyShardedDataParallel

        ddp_config = ddp_config_for(dist_cfg, strategy, False)
        wrapped = [TorchFullyShardedDataParallel(c.config, ddp_config, c) for c in chunks]
        return WrappedModel(wrapped, False, megatron_ddp=False)
    # megatron_fsdp
    from megatron.core.distributed.fsdp.mcore_fsdp_adapter import FullyShardedDataParallel

    ddp_config = ddp_config_for(dist_cfg, strategy, True)
    wrapped = [FullyShardedDataParallel(c.config, ddp_config, c) for c in chunks]
    return WrappedModel(wrapped, True, megatron_ddp=True)


def _torch_ddp(chunk):
    """torch DDP over the data-parallel group, with the attributes Megatron-Core's optimizer reads."""
    import torch
    from megatron.core import parallel_state
    from megatron.core.distributed import DistributedDataParallelConfig

    class TorchDDP(torch.nn.parallel.DistributedDataParallel):
        ddp_config = DistributedDataParallelConfig(use_distributed_optimizer=False)

        def finish_grad_sync(self, force_all_reduce: bool = False):
            pass  # torch DDP already averaged the gradients during backward

        def zero_grad_buffer(self):
            pass  # gradients live in param.grad; the optimizer's zero_grad clears them

    return TorchDDP(
        chunk, process_group=parallel_state.get_data_parallel_group(), **_no_forward_buffer_sync()
    )


def _no_forward_buffer_sync() -> dict[str, bool]:
    """torch DDP keyword for "do not broadcast buffers at every forward" (GPTModel's buffers, e.g. RoPE
    frequencies, are computed identically on every rank). torch 2.13 deprecates `broadcast_buffers` for
    `forward_sync_buffers` (which still syncs them once at construction: harmless, they are equal);
    older releases only know `broadcast_buffers`."""
    import inspect

    import torch

    params = inspect.signature(torch.nn.parallel.DistributedDataParallel.__init__).parameters
    if "forward_sync_buffers" in params:
        return {"forward_sync_buffers": False}
    return {"broadcast_buffers": False}
