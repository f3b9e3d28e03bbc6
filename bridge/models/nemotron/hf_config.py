"""Nemotron config.json <-> provider fields beyond the generic ones (bridge.models.hf_translation).

norm_eps              the LayerNorm1P epsilon (NORM_EPS_KEY: Nemotron has no rms_norm_eps)
hidden_act            relu2 -> activation_func "squared_relu", no gate (the only activation read)
partial_rotary_factor RoPE over that share of each head; NemotronConfig's default is 0.5, so a config
                      that does not say rotates half of each head
"""

from __future__ import annotations

from typing import Any

from bridge.models.hf_translation.common import BASE_DEFAULTS, get, refuse

# NemotronConfig's defaults (Nemotron-4 15B's sizes); its norm epsilon is norm_eps.
CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "nemotron": dict(
        {k: v for k, v in BASE_DEFAULTS.items() if k not in ("rms_norm_eps", "initializer_range")},
        hidden_act="relu2",
        hidden_size=6144,
        num_hidden_layers=32,
        intermediate_size=24576,
        num_attention_heads=48,
        max_position_embeddings=4096,
        vocab_size=256000,
        initializer_range=0.0134,
        norm_eps=1e-5,
        attention_bias=False,
        mlp_bias=False,
    ),
}

NORM_EPS_KEY = "norm_eps"
OWN_ACTIVATION = True  # squared ReLU without gate, read below
PARTIAL_ROTARY_DEFAULT = 0.5  # NemotronConfig's, when the config names none


def provider_fields(cfg: Any) -> dict[str, Any]:
    act = get(cfg, "hidden_act", "relu2")
    if act != "relu2":
        raise refuse("hidden_act", act, "Nemotron's MLP is built for squared ReLU (relu2)", "use relu2")
    return {"activation_func": "squared_relu", "gated_linear_unit": False, "normalization": "LayerNorm"}


def hf_fields(p: Any) -> dict[str, Any]:
    """Nemotron's activation and rotary share under transformers' names (checked to read back)."""
    act = "relu2" if p.activation_func == "squared_relu" else p.activation_func
    return {"hidden_act": act, "partial_rotary_factor": p.rotary_percent}
