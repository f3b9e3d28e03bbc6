"""MoE latent projections without Transformer Engine (Megatron-Core's `moe_latent_size`).

With `moe_latent_size` set, Megatron-Core's MoELayer (0.16.1 and 0.19.2) projects the tokens down to the
latent size before dispatching them to the routed experts (`fc1_latent_proj`) and back up after combining
their outputs (`fc2_latent_proj`); the router and the shared experts see the full hidden states. Both
projections are built as TELinear(parallel_mode="duplicated"), after `assert HAVE_TE`: a full weight on
every tensor-parallel rank, its gradient reduced over data parallelism and, under sequence parallelism,
over the tensor-parallel group too (the ranks hold different tokens). Without TE (CPU, or CUDA without
transformer-engine) the layer cannot be built at all.

`LocalLatentMoELayer` is MoELayer built with `DuplicatedLinear`, a torch linear with exactly those
properties, in place of TELinear; nothing else of MoELayer changes. The parameter names are Megatron-Core's
(`mlp.fc1_latent_proj.weight`, `mlp.fc2_latent_proj.weight`). torch / megatron.core are imported inside
functions only.
"""

from __future__ import annotations

import dataclasses
import functools

_MISSING = object()


@functools.cache
def duplicated_linear_class() -> type:
    import torch
    from megatron.core import tensor_parallel

    class DuplicatedLinear(torch.nn.Module):
        """TELinear(parallel_mode="duplicated")'s contract in plain torch: y = x W^T (+ b), (y, None)."""

        def __init__(self, input_size: int, output_size: int, *, config, init_method, bias: bool, **_te_only):
            super().__init__()
            dtype = config.params_dtype
            device = None if config.use_cpu_initialization else torch.cuda.current_device()
            self.weight = torch.nn.Parameter(torch.empty(output_size, input_size, dtype=dtype, device=device))
            self.bias = (
                torch.nn.Parameter(torch.zeros(output_size, dtype=dtype, device=device)) if bias else None
            )
            if config.perform_initialization:
                # TE draws a duplicated weight from the data-parallel RNG stream: the same on every TP rank
                tracker = tensor_parallel.get_cuda_rng_tracker()
                with tracker.fork(tensor_parallel.random.get_data_parallel_rng_tracker_name()):
                    init_method(self.weight)
            for param in self.parameters():
                param.allreduce = True  # reduced over data parallelism like any dense weight
                # and over the TP group when its ranks hold different tokens (sequence parallelism)
                param.sequence_parallel = config.sequence_parallel

        def forward(self, x):
            return torch.nn.functional.linear(x, self.weight, self.bias), None

    DuplicatedLinear.__module__ = __name__
    return DuplicatedLinear


@functools.cache
def local_latent_moe_layer_class() -> type:
    """MoELayer whose latent projections are DuplicatedLinear (its own TELinear needs TE)."""
    from megatron.core.transformer.moe import moe_layer

    class LocalLatentMoELayer(moe_layer.MoELayer):
        def __init__(self, *args, **kwargs):
            # MoELayer.__init__ reads these two module names only for the latent projections
            # (0.16.1 leaves TELinear undefined without TE, 0.19.2 sets it to None).
            saved = {name: getattr(moe_layer, name, _MISSING) for name in ("HAVE_TE", "TELinear")}
            moe_layer.HAVE_TE, moe_layer.TELinear = True, duplicated_linear_class()
            try:
                super().__init__(*args, **kwargs)
            finally:
                for name, value in saved.items():
                    if value is _MISSING:
                        delattr(moe_layer, name)
                    else:
                        setattr(moe_layer, name, value)

    LocalLatentMoELayer.__module__ = __name__
    LocalLatentMoELayer.__qualname__ = "LocalLatentMoELayer"
    return LocalLatentMoELayer


def with_latent_moe_layer(spec):
    """The MoE spec (0.16.1: a ModuleSpec of MoELayer; 0.19.2: a partial of it) building LocalLatentMoELayer."""
    cls = local_latent_moe_layer_class()
    if isinstance(spec, functools.partial):
        return functools.partial(cls, *spec.args, **spec.keywords)
    return dataclasses.replace(spec, module=cls)
