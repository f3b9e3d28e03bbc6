"""Nemotron-H config.json <-> MambaModelProvider fields (bridge.models.hf_translation's hooks).

layers_block_type   one entry per layer (linear_attention = Mamba-2, full_attention, mlp, moe) ->
                    hybrid_override_pattern (M, *, -, E); config.json files written before transformers 5
                    hold the pattern itself (hybrid_override_pattern)
ssm_state_size, mamba_num_heads, mamba_head_dim, n_groups, conv_kernel, chunk_size -> the SSM sizes
mlp_hidden_act      relu2 -> squared ReLU without gate; attention without position embedding
Refused with the reason: what Megatron-Core's mixer computes otherwise (conv without bias, biased
projections, a dt clamp, another gated-norm epsilon or activation, fp32 residuals) and the MoE layers
of Nemotron 3 (latent / sigmoid-routed experts, not converted by this bridge).
"""

from __future__ import annotations

import math
from typing import Any

from bridge.models.hf_translation.common import BASE_DEFAULTS, get, refuse

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
    if "E" in pattern:
        raise refuse(
            "layers_block_type",
            "moe",
            "Nemotron 3's MoE layers (sigmoid-routed experts with latent projections) are not converted by this "
            "bridge",
            "convert a Nemotron-H / Nemotron Nano 2 model (Mamba, attention and MLP layers)",
        )
    layers = get(cfg, "num_hidden_layers")
    if isinstance(cfg, dict) and layers is not None and int(layers) != len(pattern):
        raise refuse(
            "num_hidden_layers", layers, f"the layer pattern has {len(pattern)} layers", "make them agree"
        )


def translate(cfg: Any, base: dict[str, Any]) -> dict[str, Any]:
    pattern = layer_pattern(cfg)
    return base | dict(
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
    }
