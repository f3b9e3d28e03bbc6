"""Multi-latent attention's shared RoPE key gets its whole gradient at tensor parallelism > 1.

Megatron-Core's MLASelfAttention (0.16.1 and 0.19.2) with the local spec's column-parallel
linear_kv_down_proj all-gathers the projection's output (each rank holds a slice of the rows
[kv latent; RoPE key]) and splits it into the latent and k_pos_emb. k_pos_emb is one key for all heads,
used by each rank's own heads, so its gradient on a rank is that rank's heads' share only; the all-gather's
backward keeps each rank's own columns, so the RoPE rows (on the last rank) get the last rank's share and
the others are dropped: the weight gradient of those rows (and of a LoRA adapter on them) and the input
gradient into the layer below differ from TP=1 (measured: every adapter gradient of the layers below).

The fix is a forward hook on linear_kv_down_proj that hands MLA the gathered output in the layout of its
other branch (a whole, TP-duplicated projection: full width, this rank's tokens), built from
Megatron-Core's own mappings: gather over TP, then scatter to this rank's tokens. MLA then all-gathers
k_pos_emb over the sequence, whose backward reduce-scatters: the heads' shares are summed. The forward
values are unchanged. MLA at TP > 1 runs with sequence parallelism only (without it other gradients
differ too: bridge.models.provider_checks.check_multi_latent_attention). Transformer Engine's spec (a
duplicated TELinear) takes MLA's other branch by itself and is left alone.
"""

from __future__ import annotations

from megatron.core import tensor_parallel as tp
from megatron.core.tensor_parallel import ColumnParallelLinear
from torch import nn


def whole_rope_key_gradient(model: nn.Module) -> int:
    """Hook every column-parallel linear_kv_down_proj of `model` split over more than one TP rank; returns
    how many it hooked."""
    hooked = 0
    for module in model.modules():
        base = getattr(module, "linear_kv_down_proj", None)
        group = getattr(base, "tp_group", None)
        if type(base) is ColumnParallelLinear and group is not None and group.size() > 1:
            if not module.config.sequence_parallel:  # refused by the provider checks before the build
                raise ValueError(
                    "multi-latent attention at tensor parallelism > 1 needs sequence parallelism"
                )
            base.register_forward_hook(_GatherToSequenceShard(group))
            hooked += 1
    return hooked


class _GatherToSequenceShard:
    """The forward hook (an object, so that it can be told apart from the PEFT adapters' hooks)."""

    def __init__(self, group):
        self.group = group

    def __call__(self, module: nn.Module, args: tuple, output):
        out, bias = output
        full = tp.gather_from_tensor_model_parallel_region(out, group=self.group)
        return tp.scatter_to_sequence_parallel_region(full, group=self.group), bias
