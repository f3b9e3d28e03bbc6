"""Tensor-parallel communication overlap: Transformer Engine's userbuffers, made before the model.

With `model.tp_comm_overlap` active (the plan checked CUDA, Transformer Engine, TP > 1 and sequence
parallelism), TE's linear layers overlap their sequence-parallel all-gathers / reduce-scatters with the
GEMMs through communicators ("userbuffers") that must exist before the layers are built. Their shape is
one micro batch's tokens on this CP rank by the hidden size. `distributed.tp_comm_overlap_cfg` holds the
per-GEMM settings (TE's `ub_cfgs`: method bulk / pipeline / ring_exchange, SMs, splits); None keeps TE's
defaults.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bridge.config.run_plan import RunPlan


def userbuffer_shape(plan: RunPlan) -> list[int]:
    model = plan.provider
    tokens = plan.data.seq_length * plan.config.train.micro_batch_size // plan.layout.cp
    return [tokens, model.hidden_size]


def initialize_tp_userbuffers(plan: RunPlan) -> None:
    """Create TE's userbuffers communicators for this run (call after the process groups exist)."""
    import torch
    from transformer_engine.pytorch import module as te_module

    initialize_ub = te_module.base.initialize_ub
    model = plan.provider
    ub_cfgs = dict(plan.config.distributed.tp_comm_overlap_cfg or {})
    params = inspect.signature(initialize_ub).parameters
    kwargs = dict(shape=userbuffer_shape(plan), tp_size=plan.layout.tp, ub_cfgs=ub_cfgs or None)
    if "bootstrap_backend" in params:  # TE >= 1.9 makes its own bootstrap group
        kwargs["bootstrap_backend"] = model.tp_comm_bootstrap_backend
    if "quantization_modes" in params:  # TE >= 2.8 names the buffers' formats
        from transformer_engine.pytorch import UserBufferQuantizationMode as Mode

        modes = [Mode.FP8 if model.fp8 else Mode.NONE]
        if model.fp8 and model.first_last_layers_bf16:
            modes.append(Mode.NONE)  # the bf16 first / last layers need plain buffers too
        kwargs["quantization_modes"] = modes
    else:
        kwargs["use_fp8"] = model.fp8 is not None
    if "dtype" in params:
        kwargs["dtype"] = torch.bfloat16 if plan.precision.bf16 else torch.float16
    initialize_ub(**kwargs)
