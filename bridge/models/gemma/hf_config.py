"""Gemma 1 config.json <-> provider fields beyond the generic ones (bridge.models.hf_translation).

hidden_act  gelu_pytorch_tanh -> activation_func "gelu_tanh", gated (GeGLU). "gelu" is the value of
    the original releases' config.json, which transformers reads as gelu_pytorch_tanh: so does this.
use_bidirectional_attention  refused (the provider builds causal language models).
"""

from __future__ import annotations

from typing import Any

from bridge.models.hf_translation.common import BASE_DEFAULTS, get, refuse

# GemmaConfig's defaults (google/gemma-7b's values)
CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "gemma": dict(
        BASE_DEFAULTS,
        hidden_act="gelu_pytorch_tanh",
        hidden_size=3072,
        num_hidden_layers=28,
        intermediate_size=24576,
        num_attention_heads=16,
        num_key_value_heads=16,
        head_dim=256,
        max_position_embeddings=8192,
        vocab_size=256000,
        tie_word_embeddings=True,
        attention_bias=False,
    ),
}

OWN_ACTIVATION = True  # GeGLU, read below
_TANH_GELU = ("gelu_pytorch_tanh", "gelu")  # transformers turns the legacy "gelu" into the tanh form


def provider_fields(cfg: Any) -> dict[str, Any]:
    act = get(cfg, "hidden_act", "gelu_pytorch_tanh")
    if act not in _TANH_GELU:
        raise refuse(
            "hidden_act", act, f"Gemma's GeGLU is built for {list(_TANH_GELU)}", "use gelu_pytorch_tanh"
        )
    if get(cfg, "use_bidirectional_attention"):
        raise refuse(
            "use_bidirectional_attention",
            True,
            "the provider builds causal language models",
            "convert a model with use_bidirectional_attention unset or false",
        )
    return {"activation_func": "gelu_tanh", "gated_linear_unit": True}


def hf_fields(p: Any) -> dict[str, Any]:
    """Gemma's activation under transformers' name (hf_config_dict checks it reads back)."""
    return {"hidden_act": "gelu_pytorch_tanh" if p.activation_func == "gelu_tanh" else p.activation_func}
