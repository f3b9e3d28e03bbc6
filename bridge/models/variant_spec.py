"""The local layer spec with a family's layer variant (bridge.models.layer_variant) swapped in:
the output norms of post / sandwich placement (bridge.models.post_norm), projection-wide q/k norms
(bridge.models.qk_norm), soft-capped attention (bridge.models.softcap_attention), per-layer RoPE
(bridge.models.local_rope_attention), the softmax-score MoE router (bridge.models.softmax_score_router) and
multi-latent attention's latent norms at their own eps (bridge.models.norms.fixed_eps_norm).
Walks the
ModuleSpecs of Megatron-Core 0.16.1 and the functools.partial builders of 0.19.2 alike."""

from __future__ import annotations

import dataclasses
import functools

from bridge.models.post_norm import row_parallel_linear_with_post_norm


def _submodules(spec):
    if isinstance(spec, functools.partial):
        return spec.keywords.get("submodules")
    return getattr(spec, "submodules", None)


def _with_submodules(spec, **changes):
    subs = dataclasses.replace(_submodules(spec), **changes)
    if isinstance(spec, functools.partial):
        return functools.partial(spec.func, *spec.args, **{**spec.keywords, "submodules": subs})
    return dataclasses.replace(spec, submodules=subs)


def _with_module(spec, module, **params):
    """`spec` building `module` (a subclass of its module) with the extra constructor `params`."""
    if isinstance(spec, functools.partial):
        return functools.partial(module, *spec.args, **{**spec.keywords, **params})
    return dataclasses.replace(spec, module=module, params={**(spec.params or {}), **params})


def with_layer_variant(block, variant):
    from megatron.core.transformer.identity_op import IdentityOp

    from bridge.models.local_rope_attention import LocalRopeSelfAttention
    from bridge.models.norms import fixed_eps_norm
    from bridge.models.qk_norm import KeyProjectionRMSNorm, QueryProjectionRMSNorm
    from bridge.models.softcap_attention import SoftcapAttention
    from bridge.models.softmax_score_router import SoftmaxScoreRouter

    post_linear = row_parallel_linear_with_post_norm()
    swapped = {}  # the same layer spec object repeats for every layer: swap it once
    for spec in block.layer_specs:
        if id(spec) in swapped:
            continue
        subs = spec.submodules
        attention, mlp = subs.self_attention, subs.mlp
        attn_changes = {}
        if variant.post_norms:
            attn_changes["linear_proj"] = post_linear
            mlp_subs = _submodules(mlp)
            if mlp_subs is None or not hasattr(mlp_subs, "linear_fc2"):
                raise NotImplementedError(
                    f"layernorm_placement={variant.layernorm_placement!r} is built for dense MLP layers only"
                )
            mlp = _with_submodules(mlp, linear_fc2=post_linear)
        if variant.qk_layernorm_scope == "projection":
            attn_changes |= {"q_layernorm": QueryProjectionRMSNorm, "k_layernorm": KeyProjectionRMSNorm}
        if variant.mla_latent_norm_epsilon is not None and hasattr(_submodules(attention), "kv_layernorm"):
            norm = fixed_eps_norm(variant.mla_latent_norm_epsilon)
            attn_changes |= {"q_layernorm": norm, "kv_layernorm": norm}
        if variant.explicit_attention:
            attn_changes["core_attention"] = functools.partial(
                SoftcapAttention,
                logit_softcapping=variant.attn_logit_softcapping,
                rope_score_multiplier=variant.rope_score_multiplier,
                local_rope=variant.local_rotary_base is not None,
                query_position_scale=variant.query_position_scale,
            )
        if attn_changes:
            attention = _with_submodules(attention, **attn_changes)
        if variant.local_rotary_base is not None:
            attention = _with_module(
                attention, LocalRopeSelfAttention, local_rotary_base=variant.local_rotary_base
            )
        if variant.moe_router_softmax_scores and hasattr(_submodules(mlp), "router"):
            mlp = _with_submodules(mlp, router=SoftmaxScoreRouter)  # MoE layers only
        changes = dict(self_attention=attention, mlp=mlp)
        if not variant.pre_norms:
            changes |= {"input_layernorm": IdentityOp, "pre_mlp_layernorm": IdentityOp}
        swapped[id(spec)] = dataclasses.replace(spec, submodules=dataclasses.replace(subs, **changes))
    return dataclasses.replace(block, layer_specs=[swapped[id(spec)] for spec in block.layer_specs])
