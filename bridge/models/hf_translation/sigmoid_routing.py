"""Sigmoid routing with a score-correction bias, as several families' config.json describe it, in
Megatron-Core's router fields (0.16.1 and 0.19.2 compute it alike).

transformers: scores = sigmoid(router logits, fp32); experts chosen by top-k of scores + bias
(e_score_correction_bias, optionally group-limited: n_group groups ranked by the sum of their best two
biased scores, topk_group kept); weights = the chosen unbiased scores, renormalised when the config
says so, times routed_scaling_factor. Megatron-Core: moe_router_score_function="sigmoid" with
moe_router_enable_expert_bias (the `expert_bias` buffer) always renormalises top-k (k > 1) and ranks
groups by the sum of their best topk // group_topk scores. What differs is refused.
"""

from __future__ import annotations

from typing import Any

from bridge.models.hf_translation.common import get, refuse


def sigmoid_routing_fields(
    experts: int,
    topk: int,
    renormalise: bool,
    scaling: float = 1.0,
    groups: int | None = None,
    group_topk: int | None = None,
    renormalise_key: str = "norm_topk_prob",
) -> dict[str, Any]:
    """Megatron-Core's router fields for sigmoid + bias routing, or a ConfigError naming the HF field."""
    if not 1 <= topk <= experts:
        raise refuse(
            "num_experts_per_tok", topk, f"must be between 1 and {experts}", "use the published value"
        )
    if renormalise != (topk > 1):
        # k = 1: HF's renormalised weight is 1, Megatron-Core keeps the sigmoid score (and the reverse).
        raise refuse(
            renormalise_key,
            renormalise,
            f"Megatron-Core's sigmoid router renormalises the top-k weights exactly when k > 1 (k={topk})",
            f"convert a model with {renormalise_key}={topk > 1}",
        )
    out: dict[str, Any] = dict(
        num_moe_experts=experts,
        moe_router_topk=topk,
        moe_router_score_function="sigmoid",
        moe_router_pre_softmax=False,
        moe_router_enable_expert_bias=True,
        moe_router_dtype="fp32",  # transformers computes the router logits in fp32
        # None (the provider's default) for no scaling, so that a provider without it exports as is
        moe_router_topk_scaling_factor=None if float(scaling) == 1.0 else float(scaling),
    )
    if not groups or groups == 1:
        return out  # one group: every expert is eligible
    group_topk = int(group_topk or 0)
    if experts % groups or not 0 < group_topk <= groups:
        raise refuse(
            "n_group/topk_group",
            (groups, group_topk),
            f"the {experts} experts must split into n_group equal groups, topk_group of them chosen",
            "use the published values",
        )
    if topk // group_topk != 2:
        raise refuse(
            "n_group/topk_group",
            (groups, group_topk),
            "transformers ranks each group by the sum of its best two scores; Megatron-Core by the sum of "
            f"its best num_experts_per_tok // topk_group = {topk // group_topk}",
            "convert a model with num_experts_per_tok // topk_group == 2, or n_group=1",
        )
    return out | dict(moe_router_num_groups=groups, moe_router_group_topk=group_topk)


def sigmoid_routing_hf_fields(p: Any) -> dict[str, Any]:
    """The config.json routing keys a sigmoid + bias provider writes back (n_group / topk_group naming)."""
    return {
        "num_experts_per_tok": p.moe_router_topk,
        "norm_topk_prob": p.moe_router_topk > 1,
        "routed_scaling_factor": p.moe_router_topk_scaling_factor or 1.0,
        "n_group": p.moe_router_num_groups or 1,
        "topk_group": p.moe_router_group_topk or 1,
    }


def shared_expert_moe_fields(
    cfg: Any,
    *,
    experts_key: str,
    shared_key: str,
    aux_loss_coeff: float,
    layer_freq: list[int],
) -> dict[str, Any]:
    """DeepSeek-V3's MoE block as config.json describes it (read with `get`): sigmoid + bias routing
    (sigmoid_routing_fields), routed experts of moe_intermediate_size and an ungated shared expert of
    `shared_key` x moe_intermediate_size in every sparse layer of `layer_freq`."""
    experts = int(get(cfg, experts_key) or 0)
    shared = int(get(cfg, shared_key) or 0)
    if experts < 1 or shared < 1:
        raise refuse(
            f"{experts_key}/{shared_key}",
            (experts, shared),
            f"transformers builds routed experts and a shared expert of {shared_key} * "
            "moe_intermediate_size in every sparse layer",
            "use the published config.json",
        )
    size = int(get(cfg, "moe_intermediate_size"))
    out: dict[str, Any] = dict(
        moe_ffn_hidden_size=size,
        moe_shared_expert_intermediate_size=shared * size,
        moe_shared_expert_gate=False,
        moe_router_load_balancing_type="seq_aux_loss",
        moe_aux_loss_coeff=aux_loss_coeff,
        moe_token_dispatcher_type="alltoall",
        moe_grouped_gemm=False,
        moe_layer_freq=layer_freq,
    )
    return out | sigmoid_routing_fields(
        experts,
        int(get(cfg, "num_experts_per_tok") or 0),
        bool(get(cfg, "norm_topk_prob", True)),
        float(get(cfg, "routed_scaling_factor", 1.0)),
        int(get(cfg, "n_group") or 1),
        get(cfg, "topk_group"),
    )
