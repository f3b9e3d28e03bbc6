"""Nemotron-H config.json <-> MambaModelProvider fields (bridge.models.hf_translation's hooks).

layers_block_type   one entry per layer (linear_attention = Mamba-2, full_attention, mlp, moe) ->
                    hybrid_override_pattern (M, *, -, E); config.json files written before transformers 5
                    hold the pattern itself (hybrid_override_pattern)
ssm_state_size, mamba_num_heads, mamba_head_dim, n_groups, conv_kernel, chunk_size -> the SSM sizes
mlp_hidden_act      relu2 -> squared ReLU without gate; attention without position embedding
moe layers (Nemotron 3): transformers' NemotronHMoE is Megatron-Core's MoELayer: routed experts of
                    moe_intermediate_size (squared ReLU, no gate) on the hidden states projected to
                    moe_latent_size when set (fc1_latent_proj before the experts, fc2_latent_proj after their
                    weighted sum: moe_latent_size), sigmoid routing with e_score_correction_bias (the router's
                    expert_bias; bridge.models.hf_translation.sigmoid_routing), plus one shared expert of
                    moe_shared_expert_intermediate_size on the full hidden states (n_shared_experts is not
                    read by transformers' class, nor here)
Refused with the reason: what Megatron-Core's mixer computes otherwise (conv without bias, biased
projections, a dt clamp, another gated-norm epsilon or activation, fp32 residuals), MLP / latent biases
(mlp_bias) and multi-token-prediction layers (num_nextn_predict_layers: transformers builds none and the
hybrid provider builds none).
"""

from __future__ import annotations

import math
from typing import Any

from bridge.models.hf_translation.common import BASE_DEFAULTS, get, refuse
from bridge.models.hf_translation.sigmoid_routing import sigmoid_routing_fields, sigmoid_routing_hf_fields

# transformers' NemotronHConfig defaults of every field the translation reads.
CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "nemotron_h": dict(
        {k: v for k, v in BASE_DEFAULTS.items() if k not in ("rms_norm_eps", "hidden_act", "rope_theta")},
        vocab_size=131072,
        hidden_size=4096,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=128,
        max_position_embeddings=4096,
        attention_bias=False,
        intermediate_size=21504,
        mlp_hidden_act="relu2",
        mlp_bias=False,
        ssm_state_size=128,
        mamba_num_heads=128,
        mamba_head_dim=64,
        mamba_hidden_act="silu",
        n_groups=8,
        conv_kernel=4,
        chunk_size=128,
        use_conv_bias=True,
        mamba_proj_bias=False,
        use_bias=False,
        layer_norm_epsilon=1e-5,
        residual_in_fp32=False,
        layers_block_type=["linear_attention", "moe", "full_attention", "mlp"],
        n_routed_experts=8,
        moe_intermediate_size=7688,
        moe_shared_expert_intermediate_size=7688,
        moe_latent_size=None,
        num_experts_per_tok=2,
        routed_scaling_factor=1.0,
        n_group=1,
        topk_group=1,
        norm_topk_prob=True,
        num_nextn_predict_layers=0,
    ),
}

NORM_EPS_KEY = "layer_norm_epsilon"
OWN_ACTIVATION = True  # mlp_hidden_act, read below
_SYMBOLS = {
    "linear_attention": "M",
    "mamba": "M",
    "full_attention": "*",
    "attention": "*",
    "mlp": "-",
    "moe": "E",
}
_TYPES = {"M": "linear_attention", "*": "full_attention", "-": "mlp", "E": "moe"}
# MambaMixer builds its gated RMSNorm with this epsilon (megatron.core.ssm.mamba_mixer, 0.16.1 and 0.19.2)
_MIXER_NORM_EPS = 1e-5


def layer_pattern(cfg: Any) -> str:
    types = get(cfg, "layers_block_type")
    legacy = get(cfg, "hybrid_override_pattern")
    if types is None and legacy is not None:
        return str(legacy)
    unknown = sorted({t for t in types or () if t not in _SYMBOLS})
    if types is None or unknown:
        raise refuse(
            "layers_block_type",
            types,
            f"each layer is one of {sorted(_TYPES.values())}",
            "list each layer's type",
        )
    return "".join(_SYMBOLS[t] for t in types)


def _number(value: Any) -> Any:
    """transformers writes an infinite float in config.json as {"__float__": "Infinity"}."""
    return float(value["__float__"]) if isinstance(value, dict) and "__float__" in value else value


def check(cfg: Any) -> None:
    rules = (
        ("mlp_hidden_act", "relu2", "the MLP layers are built for squared ReLU (relu2)"),
        ("mamba_hidden_act", "silu", "Megatron-Core's Mamba mixer applies SiLU after its conv"),
        ("use_conv_bias", True, "Megatron-Core's Mamba mixer always has a conv bias"),
        ("mamba_proj_bias", False, "Megatron-Core's Mamba mixer has no in/out projection biases"),
        ("use_bias", False, "the mapping has no linear biases"),
        ("mlp_bias", False, "the mapping has no MLP, expert or latent-projection biases"),
        ("residual_in_fp32", False, "MambaModel keeps residuals in the model dtype"),
    )
    for key, want, why in rules:
        if get(cfg, key, want) != want:
            raise refuse(key, get(cfg, key), why, f"convert a model with {key}={want!r}")
    limit = tuple(_number(v) for v in (get(cfg, "time_step_limit", (0.0, math.inf)) or (0.0, math.inf)))
    if limit != (0.0, math.inf):
        raise refuse(
            "time_step_limit",
            limit,
            "Megatron-Core's mixer does not clamp dt",
            "convert a model with (0.0, inf)",
        )
    eps = get(cfg, "layer_norm_epsilon", 1e-5)
    if eps != _MIXER_NORM_EPS:
        raise refuse(
            "layer_norm_epsilon",
            eps,
            f"Megatron-Core's Mamba mixer builds its gated RMSNorm with eps {_MIXER_NORM_EPS}, transformers with "
            "layer_norm_epsilon",
            f"convert a model with layer_norm_epsilon={_MIXER_NORM_EPS}",
        )
    pattern = layer_pattern(cfg)
    mtp = int(get(cfg, "num_nextn_predict_layers", 0) or 0)
    if mtp:
        raise refuse(
            "num_nextn_predict_layers",
            mtp,
            "bridge's hybrid provider builds no multi-token-prediction layers (transformers' class builds "
            "none either), so the checkpoint's mtp.* tensors would go unused",
            "convert a checkpoint without MTP layers (num_nextn_predict_layers=0)",
        )
    layers = get(cfg, "num_hidden_layers")
    if isinstance(cfg, dict) and layers is not None and int(layers) != len(pattern):
        raise refuse(
            "num_hidden_layers", layers, f"the layer pattern has {len(pattern)} layers", "make them agree"
        )


def _moe_fields(cfg: Any) -> dict[str, Any]:
    """Megatron-Core's MoE fields of Nemotron 3's `moe` layers (see the module docstring)."""
    shared = int(get(cfg, "moe_shared_expert_intermediate_size") or 0)
    if shared < 1:
        raise refuse(
            "moe_shared_expert_intermediate_size",
            shared,
            "transformers' NemotronHMoE always adds a shared expert of this size",
            "use the published config.json",
        )
    latent = get(cfg, "moe_latent_size")
    routing = sigmoid_routing_fields(
        int(get(cfg, "n_routed_experts") or 0),
        int(get(cfg, "num_experts_per_tok") or 0),
        bool(get(cfg, "norm_topk_prob", True)),
        float(get(cfg, "routed_scaling_factor", 1.0)),
        int(get(cfg, "n_group") or 1),
        get(cfg, "topk_group"),
    )
    return routing | dict(
        moe_ffn_hidden_size=int(get(cfg, "moe_intermediate_size")),
        moe_shared_expert_intermediate_size=shared,
        moe_shared_expert_gate=False,
        moe_shared_expert_overlap=False,  # Megatron-Core refuses it with latent projections
        moe_latent_size=None if latent is None else int(latent),
        # Megatron-Bridge's values for Nemotron 3 (training only: transformers computes no aux loss)
        moe_router_load_balancing_type="seq_aux_loss",
        moe_aux_loss_coeff=1e-4,
        moe_token_dispatcher_type="alltoall",
        moe_grouped_gemm=False,
    )


def translate(cfg: Any, base: dict[str, Any]) -> dict[str, Any]:
    pattern = layer_pattern(cfg)
    moe = _moe_fields(cfg) if "E" in pattern else {}
    return (
        base
        | moe
        | dict(
            num_layers=len(pattern),
            hybrid_override_pattern=pattern,
            activation_func="squared_relu",
            gated_linear_unit=False,
            position_embedding_type="none",
            mamba_state_dim=int(get(cfg, "ssm_state_size")),
            mamba_head_dim=int(get(cfg, "mamba_head_dim")),
            mamba_num_groups=int(get(cfg, "n_groups")),
            mamba_num_heads=int(get(cfg, "mamba_num_heads")),
            mamba_d_conv=int(get(cfg, "conv_kernel")),
            mamba_chunk_size=int(get(cfg, "chunk_size")),
        )
    )


def config_dict(p: Any, model_type: str, architecture: str) -> dict[str, Any]:
    return {
        "hidden_size": p.hidden_size,
        "intermediate_size": p.ffn_hidden_size,
        "num_attention_heads": p.num_attention_heads,
        "num_key_value_heads": p.num_query_groups or p.num_attention_heads,
        "head_dim": p.effective_kv_channels(),
        "layers_block_type": [_TYPES[s] for s in p.hybrid_override_pattern],
        "hidden_act": "relu2" if p.activation_func == "squared_relu" else p.activation_func,
        "mlp_hidden_act": "relu2" if p.activation_func == "squared_relu" else p.activation_func,
        "ssm_state_size": p.mamba_state_dim,
        "mamba_num_heads": p.effective_mamba_num_heads(),
        "mamba_head_dim": p.mamba_head_dim,
        "n_groups": p.mamba_num_groups,
        "conv_kernel": p.mamba_d_conv,
        "chunk_size": p.mamba_chunk_size,
    } | (_moe_hf_fields(p) if "E" in p.hybrid_override_pattern else {})


def _moe_hf_fields(p: Any) -> dict[str, Any]:
    return sigmoid_routing_hf_fields(p) | {
        "n_routed_experts": p.num_moe_experts,
        "moe_intermediate_size": p.moe_ffn_hidden_size,
        "moe_shared_expert_intermediate_size": p.moe_shared_expert_intermediate_size,
        "moe_latent_size": p.moe_latent_size,
    }
