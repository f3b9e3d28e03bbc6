"""Wrap the model chunks for `distributed.strategy` (docs/parallelism.md, "Data-parallel strategies").

| strategy      | wrapper                                           | optimizer                          |
| megatron      | Megatron-Core DistributedDataParallel             | distributed optimizer (if enabled) |
| fsdp2         | PyTorch FSDP2 fully_shard (per layer + root)      | torch AdamW/SGD on DTensor shards  |
| megatron_fsdp | Megatron-Core Megatron-FSDP                       | distributed optimizer (required)   |
| ddp           | torch.nn.parallel.DistributedDataParallel         | Megatron-Core, not distributed     |

The run's plan has already refused strategies this machine cannot run (megatron_fsdp needs CUDA:
bridge.config.checks.distributed.CUDA_ONLY_STRATEGIES); this module only builds.

fsdp2 is PyTorch's own `torch.distributed.fsdp.fully_shard` (not Megatron-Core's wrapper): every
TransformerLayer and then the root GPTModel are sharded over the dense mesh's dp_shard*cp axis and
replicated over dp_replicate (HSDP), on bridge.parallel.mesh's DeviceMesh in Megatron-Core's rank order.
Megatron-Core's TP/SP layers run inside (each TP rank shards its own TP slice over its dp group); the
gradients FSDP2 averages over dp*cp are what Megatron-Core DDP averages, and `finalize_fsdp2_grads`
does the rest of Megatron-Core's finalize_model_grads (sequence-parallel norm grads over TP).
"""

from __future__ import annotations

import contextlib
import copy
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bridge.config.checks.distributed import averages_in_collective
from bridge.parallel.mesh import build_meshes
from bridge.parallel.wrappers import unwrap


@dataclass
class WrappedModel:
    chunks: list  # one per virtual pipeline stage
    use_distributed_optimizer: bool
    megatron_ddp: bool  # chunks expose Megatron-Core's grad-buffer API (zero_grad_buffer, ...)
    fsdp2: bool = False  # chunks are PyTorch FSDP2 modules (DTensor parameters)


def ddp_config_for(
    dist_cfg: Any,
    strategy: str,
    use_distributed_optimizer: bool,
    interleaved: bool = False,
    num_moe_experts: int | None = None,
):
    from megatron.core.distributed import DistributedDataParallelConfig

    overlap_param_gather = bool(dist_cfg.overlap_param_gather) and use_distributed_optimizer
    kwargs = dict(
        grad_reduce_in_fp32=bool(dist_cfg.grad_reduce_in_fp32),
        overlap_grad_reduce=bool(dist_cfg.overlap_grad_reduce),
        overlap_param_gather=overlap_param_gather,
        # the interleaved schedule dispatches each chunk's all-gathers itself (config.param_sync_func), so
        # the forward hooks must not dispatch them too (Megatron-LM's align_param_gather; without it
        # Megatron-Core warns "already dispatched" on every step)
        align_param_gather=overlap_param_gather and interleaved,
        average_in_collective=averages_in_collective(
            strategy, bool(getattr(dist_cfg, "average_in_collective", True)), num_moe_experts
        ),
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
    layout=None,
    precision=None,
) -> WrappedModel:
    """Build this rank's model chunks with `provider` and wrap them per distributed.strategy."""
    strategy = dist_cfg.strategy
    if strategy == "megatron":
        use_dist_opt = bool(opt_cfg.use_distributed_optimizer)
        chunks = provider.provide_distributed_model(
            wrap_with_ddp=True,
            ddp_config=ddp_config_for(
                dist_cfg, strategy, use_dist_opt, interleaved=layout is not None and layout.interleaved
            ),
            data_parallel_random_init=data_parallel_random_init,
            seed=seed,
            layout=layout,
        )
        return WrappedModel(chunks, use_dist_opt, megatron_ddp=True)

    if strategy == "fsdp2":
        # fp32 parameters (no Float16Module): FSDP2's MixedPrecisionPolicy casts them per all-gather, and
        # the torch optimizer updates the fp32 shards (the master weights Megatron-Core's optimizer keeps
        # apart). The plan's provider says params_dtype=bf16 (what Float16Module would cast to): built from
        # a copy with fp32, bf16/fp16 kept (Megatron-Core's modules read them for their compute dtype).
        provider = copy.copy(provider)
        provider.params_dtype = "fp32"
        chunks = provider.provide_distributed_model(
            wrap_with_ddp=False, mixed_precision_wrapper=False, seed=seed, layout=layout
        )
        sharded = fully_shard_chunks(
            chunks,
            layout,
            precision,
            moe_reshard_after_forward=bool(dist_cfg.moe_reshard_after_forward),
            sum_gradients=bool(provider.calculate_per_token_loss),
        )
        return WrappedModel(sharded, False, False, fsdp2=True)
    chunks = provider.provide_distributed_model(wrap_with_ddp=False, seed=seed, layout=layout)
    if strategy == "ddp":
        summed = bool(provider.calculate_per_token_loss)
        return WrappedModel([_torch_ddp(c, summed) for c in chunks], False, megatron_ddp=False)
    # megatron_fsdp
    from megatron.core.distributed.fsdp.mcore_fsdp_adapter import FullyShardedDataParallel

    ddp_config = ddp_config_for(dist_cfg, strategy, True, num_moe_experts=provider.num_moe_experts)
    wrapped = [FullyShardedDataParallel(c.config, ddp_config, c) for c in chunks]
    return WrappedModel(wrapped, True, megatron_ddp=True)


def release_model(chunks: list) -> None:
    """Let a finished run's model be freed (its gradient buffers, and the process groups it holds).

    Megatron-Core's DDP hooks each parameter's gradient-accumulator node; the hook closes over the DDP
    module, and the node (a C++ object) holds the hook where Python's collector cannot see it, so the
    model would stay alive for the rest of the process. The hooks are dropped from the nodes' hook dicts
    (reached through a handle of a no-op hook registered for that purpose)."""
    for chunk in chunks:
        accumulators = getattr(chunk, "grad_accs", None)  # Megatron-Core DDP only (not FSDP2 / torch DDP)
        if not isinstance(accumulators, list):
            continue
        for node in accumulators:
            hooks = node.register_hook(_no_op_hook).hooks_dict_ref()
            if hooks is not None:
                hooks.clear()
        accumulators.clear()


def _no_op_hook(*_args) -> None:
    return None


def _sum_allreduce_hook(process_group, bucket):
    """torch DDP comm hook: the bucket's gradients summed over the group (DDP's default averages)."""
    import torch

    work = torch.distributed.all_reduce(bucket.buffer(), group=process_group, async_op=True)
    return work.get_future().then(lambda fut: fut.value()[0])


def _torch_ddp(chunk, sum_gradients: bool = False):
    """torch DDP over the data-parallel group, with the attributes Megatron-Core's optimizer and
    finalize_model_grads read. `sum_gradients` (model.calculate_per_token_loss): the gradients are summed
    over the ranks, as Megatron-Core's DDP does then, and finalize_model_grads divides them by the step's
    token count through `scale_gradients`."""
    import torch
    from megatron.core import parallel_state
    from megatron.core.distributed import DistributedDataParallelConfig

    class TorchDDP(torch.nn.parallel.DistributedDataParallel):
        ddp_config = DistributedDataParallelConfig(use_distributed_optimizer=False)

        def finish_grad_sync(self, force_all_reduce: bool = False):
            pass  # torch DDP already reduced the gradients during backward

        def zero_grad_buffer(self):
            pass  # gradients live in param.grad; the optimizer's zero_grad clears them

        def scale_gradients(self, scaling_factor: float) -> None:
            for p in self.parameters():
                if p.grad is not None:
                    p.grad.mul_(scaling_factor)

    group = parallel_state.get_data_parallel_group()
    wrapped = TorchDDP(chunk, process_group=group, **_no_forward_buffer_sync())
    if sum_gradients:
        wrapped.register_comm_hook(group, _sum_allreduce_hook)
    return wrapped


def _no_forward_buffer_sync() -> dict[str, bool]:
    """torch DDP keyword for "do not broadcast buffers at every forward" (GPTModel's buffers, e.g. RoPE
    frequencies, are computed identically on every rank). torch 2.13 deprecates `broadcast_buffers` for
    `forward_sync_buffers` (which still syncs them once at construction: harmless, they are equal);
    older releases only know `broadcast_buffers`."""
    import torch

    params = inspect.signature(torch.nn.parallel.DistributedDataParallel.__init__).parameters
    if "forward_sync_buffers" in params:
        return {"forward_sync_buffers": False}
    return {"broadcast_buffers": False}


def mixed_precision_policy(precision, fp32_output: bool = False):
    """FSDP2's MixedPrecisionPolicy for the run's precision: compute in bf16/fp16 and reduce gradients in
    fp32 (as Megatron-Core's Float16Module + fp32 grad buffers do); fp32 (CPU): no casts.

    `fp32_output` only for a module whose output leaves the model: the root chunk of the last pipeline
    stage (Float16Module returns that stage's output in fp32). Inside the model the activations stay in the
    compute dtype: a TransformerLayer returning fp32 makes the root's final norm (bf16 weight, fp32 input)
    return fp32, and the output layer's bf16 GEMM then fails ("expected mat1 and mat2 to have the same
    dtype"); a stage sending fp32 would not match the pipeline's bf16 receive buffers either."""
    import torch
    from torch.distributed.fsdp import MixedPrecisionPolicy

    if precision is None or precision.name == "fp32":
        return MixedPrecisionPolicy()
    return MixedPrecisionPolicy(
        param_dtype=precision.torch_dtype,
        reduce_dtype=torch.float32,
        output_dtype=torch.float32 if fp32_output else None,
    )


def fully_shard_chunks(
    chunks: list,
    layout,
    precision,
    reshard_after_forward: bool = True,
    moe_reshard_after_forward: bool = False,
    sum_gradients: bool = False,
) -> list:
    """fully_shard each TransformerLayer, then the root, over the layout's FSDP mesh (in place).

    With ep > 1 (AutoModel's MoE parallelizer) the layers and their experts keep their gathered
    parameters from forward to backward unless `moe_reshard_after_forward` (distributed.moe_*).
    `sum_gradients` (model.calculate_per_token_loss): the reduce-scatter sums instead of averaging, as
    Megatron-Core's DDP does then (its gradient scaling factor 1 for dense and expert weights);
    finalize_fsdp2_grads divides by the step's token count."""
    import torch
    from megatron.core.transformer.transformer_layer import TransformerLayer
    from torch.distributed.fsdp import fully_shard

    meshes = build_meshes(layout)
    mesh = meshes.fsdp_mesh()
    mp_policy = mixed_precision_policy(precision)
    layer_reshard = moe_reshard_after_forward if layout.ep > 1 else reshard_after_forward
    for chunk in chunks:
        # FSDP2 replaces each parameter by a DTensor Parameter and drops the attributes Megatron-Core set
        # on it (tensor_model_parallel, sequence_parallel, shared, allreduce, ...): keep them.
        attrs = {name: dict(vars(p)) for name, p in chunk.named_parameters()}
        layers = [m for m in chunk.modules() if isinstance(m, TransformerLayer)]
        for layer in layers:
            experts = getattr(getattr(layer, "mlp", None), "experts", None)
            if experts is not None and layout.ep > 1:
                # With EP the experts of one EP rank live on its ep_shard ranks (Megatron-Core's expert
                # data-parallel group): shard them there. Megatron-Core sums expert gradients over that
                # group and scales them by 1/(dp*cp), like the dense ones: the same divide factor.
                # (With ep = 1 Megatron-Core treats expert weights as dense: they shard with the layer.)
                fully_shard(
                    experts,
                    mesh=meshes.moe["ep_shard"],
                    mp_policy=mp_policy,
                    reshard_after_forward=layer_reshard,
                )
                if sum_gradients:
                    _sum_reduction(experts)
                else:
                    experts.set_gradient_divide_factor(float(layout.dp * layout.cp))
                if not torch.cuda.is_available() and meshes.moe["ep_shard"].size() > 1:
                    # gloo has no PREMUL_SUM. (Not on a 1-rank ep_shard axis: there torch 2.13's FSDP2
                    # divides twice under forced sum reduction, measured: 1/(dp*cp)^2; it needs no comms.)
                    experts.set_force_sum_reduction_for_comms(True)
            fully_shard(layer, mesh=mesh, mp_policy=mp_policy, reshard_after_forward=layer_reshard)
            if sum_gradients:
                _sum_reduction(layer)
        root_policy = mixed_precision_policy(
            precision, fp32_output=bool(getattr(chunk, "post_process", True))
        )
        fully_shard(chunk, mesh=mesh, mp_policy=root_policy, reshard_after_forward=reshard_after_forward)
        if sum_gradients:
            _sum_reduction(chunk)
        for name, p in chunk.named_parameters():
            for key, value in attrs.get(name, {}).items():
                setattr(p, key, value)
    return chunks


def _sum_reduction(module) -> None:
    """An FSDP2 module whose gradients are summed over its mesh, not averaged: divide factor 1, and a
    plain SUM collective (not PREMUL_SUM(1), which gloo lacks), on GPU and CPU alike."""
    module.set_gradient_divide_factor(1.0)
    module.set_force_sum_reduction_for_comms(True)


def fsdp2_no_sync(chunk) -> Callable[[], contextlib.AbstractContextManager]:
    """Megatron-Core's `no_sync_func` for one FSDP2 chunk (distributed.defer_fsdp_grad_sync): inside
    it the backward accumulates unsharded gradients without reducing them. Megatron-Core's schedules
    leave it before each chunk's last micro batch backward, which then reduce-scatters the sum."""

    @contextlib.contextmanager
    def no_sync():
        chunk.set_requires_gradient_sync(False)
        try:
            yield
        finally:
            chunk.set_requires_gradient_sync(True)

    return no_sync


def _local(tensor):
    return tensor._local_tensor if hasattr(tensor, "_local_tensor") else tensor


def _allreduce_tied_embedding_grads(model: list) -> None:
    """Pipeline parallelism with tied embeddings: the first stage's embedding and the last stage's output
    weight are one parameter; sum their gradients over the embedding group (Megatron-Core's
    _allreduce_word_embedding_grads). Both stages shard it alike (same shape, same dp mesh size), so the
    local shards line up."""
    import torch
    from megatron.core import parallel_state as ps

    if ps.get_pipeline_model_parallel_world_size() == 1 or not ps.is_rank_in_embedding_group(
        ignore_virtual=True
    ):
        return
    group = ps.get_embedding_group()
    if torch.distributed.get_world_size(group) == 1:
        return
    chunk = unwrap(model[0] if ps.is_pipeline_first_stage(ignore_virtual=True) else model[-1])
    if not getattr(chunk, "share_embeddings_and_output_weights", False):
        return
    weight = chunk.shared_embedding_or_output_weight()
    if weight is not None and weight.grad is not None:
        torch.distributed.all_reduce(_local(weight.grad), group=group)


def finalize_fsdp2_grads(model: list, num_tokens=None, *args, **kwargs) -> None:
    """Megatron-Core's finalize_model_grads for FSDP2 chunks. FSDP2 has already reduce-scattered (and,
    HSDP, all-reduced) the gradients over dp*cp during backward; what is left: sequence-parallel norm and
    qk-layernorm gradients summed over the TP ranks (each saw part of the sequence), and per-token
    scaling when calculate_per_token_loss (the schedule then passes num_tokens)."""
    import torch
    from megatron.core import parallel_state as ps
    from megatron.core.utils import get_model_config
    from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

    config = get_model_config(model[0])
    tp_group = ps.get_tensor_model_parallel_group()
    if tp_group.size() > 1:
        summed, averaged = [], []  # (gloo has no ReduceOp.AVG: sum, then divide)
        for chunk in model:
            for name, p in chunk.named_parameters():
                if p.grad is None:
                    continue
                if getattr(p, "average_gradients_across_tp_domain", False):
                    averaged.append(_local(p.grad))
                elif (config.sequence_parallel and getattr(p, "sequence_parallel", False)) or (
                    config.qk_layernorm and ("q_layernorm" in name or "k_layernorm" in name)
                ):
                    summed.append(_local(p.grad))
        for grads, scale in ((summed, 1.0), (averaged, 1.0 / tp_group.size())):
            if grads:
                flat = _flatten_dense_tensors(grads)
                torch.distributed.all_reduce(flat, group=tp_group)
                if scale != 1.0:
                    flat.mul_(scale)
                for buf, synced in zip(grads, _unflatten_dense_tensors(flat, grads), strict=True):
                    buf.copy_(synced)
    _allreduce_tied_embedding_grads(model)
    if num_tokens is not None:
        torch.distributed.all_reduce(num_tokens, group=ps.get_data_parallel_group(with_context_parallel=True))
        if num_tokens > 0:
            for chunk in model:
                for p in chunk.parameters():
                    if p.grad is not None:
                        _local(p.grad).mul_(1.0 / num_tokens)
