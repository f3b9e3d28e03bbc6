"""Where MoE expert gradients are reduced: over the expert-data-parallel group, at every layout.

Megatron-Core (0.16.1 and 0.19.2) marks expert parameters `allreduce=False` (reduced by DDP over the
expert-data-parallel group) only when expert_model_parallel_size > 1. At EP=1 with ETP < TP (TP=2,
ETP=1: the only ETP Megatron-Core allows with expert biases, GPT-OSS) each TP rank holds whole experts and
runs them on its sequence-parallel share of the tokens, so the expert-data-parallel group (DP x TP / ETP)
is larger than DP: reduced over DP alone, each rank kept its share's gradient. Separately, the expert
linear_fc2 bias carries RowParallelLinear's `sequence_parallel=True`, so finalize_model_grads summed it over
the TP group as if it were a norm weight: with EP over those same ranks that adds different experts' biases.
Experts see the tokens the dispatcher hands them, never a TP sequence split: every expert parameter is
reduced over the expert-data-parallel group only. At EP > 1 Megatron-Core already sets allreduce=False; at
EP=1 with ETP=TP that group equals the DP group: same numbers as before.
"""

from __future__ import annotations


def reduce_expert_grads_over_expert_dp(chunks: list) -> int:
    """Mark every MoE expert parameter of the bare chunks for the expert-data-parallel reduce (before
    DDP wraps them); returns how many parameters are marked."""
    from megatron.core.transformer.moe.moe_layer import MoELayer

    marked = 0
    for chunk in chunks:
        for module in chunk.modules():
            if not isinstance(module, MoELayer):
                continue
            for param in module.experts.parameters():
                param.allreduce = False
                if getattr(param, "sequence_parallel", False):
                    param.sequence_parallel = False
                marked += 1
    return marked


def count_expert_grads_once_in_norm(optimizer) -> None:
    """The grad norm counts each expert parameter once: Megatron-Core 0.16.1 skips a parameter that is not
    split over TP on every TP rank but the first, by the dense TP group's rank, for expert parameters too
    (0.19.2 uses the expert TP group for those). At TP=2, ETP=1 with EP=2 the second TP rank's expert
    biases are other experts', not copies: the norm left them out. Give the optimizer of the expert
    parameters (its param groups' is_expert_parallel, Megatron-Core's mark) the expert TP group."""
    from megatron.core import parallel_state

    for opt in getattr(optimizer, "chained_optimizers", [optimizer]):
        groups = opt.param_groups
        if groups and all(group.get("is_expert_parallel", False) for group in groups):
            opt.tp_group = parallel_state.get_expert_tensor_parallel_group()
