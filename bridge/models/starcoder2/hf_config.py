"""StarCoder2 config.json <-> provider fields beyond the generic ones (bridge.models.hf_translation).

norm_epsilon   the LayerNorm epsilon (NORM_EPS_KEY: StarCoder2 has no rms_norm_eps)
hidden_act     gelu_pytorch_tanh -> activation_func "gelu_tanh", no gate (the only activation read)
use_bias       must be true: the mapping holds every linear's bias (a model without them is refused)
sliding_window every layer (the generic reading: StarCoder2 has no use_sliding_window switch)
residual_dropout  the provider's hidden_dropout (training only)
"""

from __future__ import annotations

from typing import Any

from bridge.models.hf_translation.common import BASE_DEFAULTS, get, refuse
from bridge.models.hf_translation.write import sliding_window_hf_fields

# Starcoder2Config's defaults (bigcode/starcoder2-7b's sizes); its norm epsilon is norm_epsilon.
CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "starcoder2": dict(
        {k: v for k, v in BASE_DEFAULTS.items() if k not in ("rms_norm_eps", "initializer_range")},
        hidden_act="gelu_pytorch_tanh",
        hidden_size=3072,
        num_hidden_layers=30,
        intermediate_size=12288,
        num_attention_heads=24,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        vocab_size=49152,
        initializer_range=0.018042,
        norm_epsilon=1e-5,
        sliding_window=None,
        residual_dropout=0.0,
        use_bias=True,
        tie_word_embeddings=True,
    ),
}

NORM_EPS_KEY = "norm_epsilon"
OWN_ACTIVATION = True  # tanh GELU without gate, read below


def check(cfg: Any) -> None:
    if not get(cfg, "use_bias", True):
        raise refuse(
            "use_bias",
            False,
            "the StarCoder2 mapping holds the biases of every linear, which a model without them lacks",
            "convert a StarCoder2 checkpoint with use_bias=true (as published)",
        )


def provider_fields(cfg: Any) -> dict[str, Any]:
    act = get(cfg, "hidden_act", "gelu_pytorch_tanh")
    if act != "gelu_pytorch_tanh":
        raise refuse(
            "hidden_act",
            act,
            "StarCoder2's MLP is built for the tanh GELU (gelu_pytorch_tanh)",
            "use gelu_pytorch_tanh",
        )
    return {
        "activation_func": "gelu_tanh",
        "gated_linear_unit": False,
        "normalization": "LayerNorm",
        "add_bias_linear": True,
        "add_qkv_bias": True,
        "hidden_dropout": float(get(cfg, "residual_dropout", 0.0) or 0.0),
    }


def hf_fields(p: Any) -> dict[str, Any]:
    """StarCoder2's keys for provider `p` (hf_config_dict checks they read back)."""
    act = "gelu_pytorch_tanh" if p.activation_func == "gelu_tanh" else p.activation_func
    return {
        "hidden_act": act,
        "use_bias": p.add_bias_linear,
        "residual_dropout": p.hidden_dropout,
        **sliding_window_hf_fields(p),
    }
