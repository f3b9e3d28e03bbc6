"""Gemma 2 config.json <-> provider fields beyond the generic ones (bridge.models.hf_translation).

hidden_activation   gelu_pytorch_tanh -> activation_func "gelu_tanh" (gelu -> "gelu"), gated (GeGLU)
query_pre_attn_scalar  softmax_scale = query_pre_attn_scalar ** -0.5
attn_logit_softcapping / final_logit_softcapping  the same-named provider fields
sliding_window + layer_types  window_size = [sliding_window - 1, 0] on the "sliding_attention"
    layers; Megatron-Core's window_attn_skip_freq N (the provider keeps its integer form) makes
    every N-th layer (1-based) global, which expresses transformers' default pattern and any
    "N - 1 sliding, 1 full" pattern; other patterns are refused.
"""

from __future__ import annotations

from typing import Any

from bridge.models.hf_translation.common import BASE_DEFAULTS, get, refuse

# Gemma2Config's defaults (Gemma 2 reads hidden_activation, not hidden_act)
DEFAULTS: dict[str, Any] = dict(
    {k: v for k, v in BASE_DEFAULTS.items() if k != "hidden_act"},
    hidden_size=2304,
    num_hidden_layers=26,
    intermediate_size=9216,
    num_attention_heads=8,
    num_key_value_heads=4,
    head_dim=256,
    hidden_activation="gelu_pytorch_tanh",
    max_position_embeddings=8192,
    vocab_size=256000,
    tie_word_embeddings=True,
    query_pre_attn_scalar=256,
    sliding_window=4096,
    final_logit_softcapping=30.0,
    attn_logit_softcapping=50.0,
    attention_bias=False,
)
CLASS_DEFAULTS: dict[str, dict[str, Any]] = {"gemma2": DEFAULTS}

OWN_ACTIVATION = True  # Gemma 2 reads hidden_activation; hidden_act (kept in old config.json files) is unused
_ACTIVATIONS = {"gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu"}
_HF_ACTIVATIONS = {v: k for k, v in _ACTIVATIONS.items()}
_LAYER_TYPES = ("sliding_attention", "full_attention")


def default_layer_types(layers: int, every: int = 2) -> list[str]:
    """transformers' pattern: layer i is global where (i + 1) % every == 0, sliding elsewhere."""
    return ["sliding_attention" if (i + 1) % every else "full_attention" for i in range(layers)]


def window_fields(cfg: Any, layers: int, seq_length: float, types: list | None = None) -> dict[str, Any]:
    types = list(types or get(cfg, "layer_types") or default_layer_types(layers))
    bad = sorted(set(types) - set(_LAYER_TYPES))
    if bad or len(types) != layers:
        raise refuse(
            "layer_types",
            types,
            f"must hold {layers} entries of {list(_LAYER_TYPES)}",
            "use the published config.json",
        )
    window = get(cfg, "sliding_window")
    sliding = [t == "sliding_attention" for t in types]
    if window is None or not any(sliding) or int(window) >= seq_length:
        return {"window_size": None, "window_attn_skip_freq": None}  # no key is ever outside a window
    fields: dict[str, Any] = {"window_size": [int(window) - 1, 0], "window_attn_skip_freq": None}
    if all(sliding):
        return fields
    every = sliding.index(False) + 1  # the first global layer, 1-based
    if sliding != [(i + 1) % every != 0 for i in range(layers)]:
        raise refuse(
            "layer_types",
            types,
            "the provider expresses sliding-window layers as Megatron-Core's window_attn_skip_freq N "
            "(every N-th layer global, the others sliding), which this pattern is not",
            "use a config whose global layers are every N-th layer (transformers' default pattern)",
        )
    fields["window_attn_skip_freq"] = every
    return fields


def provider_fields(cfg: Any) -> dict[str, Any]:
    act = get(cfg, "hidden_activation", "gelu_pytorch_tanh")
    if act not in _ACTIVATIONS:
        raise refuse(
            "hidden_activation",
            act,
            f"Gemma 2's GeGLU is built for {list(_ACTIVATIONS)}",
            "use gelu_pytorch_tanh",
        )
    if get(cfg, "use_bidirectional_attention"):
        raise refuse(
            "use_bidirectional_attention",
            True,
            "the provider builds causal language models",
            "convert a model with use_bidirectional_attention unset or false",
        )
    fields: dict[str, Any] = dict(
        activation_func=_ACTIVATIONS[act],
        gated_linear_unit=True,
        softmax_scale=float(get(cfg, "query_pre_attn_scalar")) ** -0.5,
        attn_logit_softcapping=_optional_float(get(cfg, "attn_logit_softcapping")),
        final_logit_softcapping=_optional_float(get(cfg, "final_logit_softcapping")),
    )
    layers = int(get(cfg, "num_hidden_layers"))
    fields.update(window_fields(cfg, layers, int(get(cfg, "max_position_embeddings"))))
    return fields


def _optional_float(value: Any) -> float | None:
    return None if value is None else float(value)


def hf_fields(p: Any) -> dict[str, Any]:
    """The Gemma 2 keys of config.json for provider `p` (hf_config_dict checks they read back)."""
    head_dim = p.kv_channels or p.hidden_size // p.num_attention_heads
    scale = p.softmax_scale if p.softmax_scale is not None else head_dim**-0.5
    scalar = scale**-2
    scalar = round(scalar) if abs(scalar - round(scalar)) < 1e-6 else scalar
    if p.window_size is None:
        window, types = None, ["full_attention"] * p.num_layers
    else:
        every = p.window_attn_skip_freq
        window = p.window_size[0] + 1
        types = default_layer_types(p.num_layers, every) if every else ["sliding_attention"] * p.num_layers
    act = _HF_ACTIVATIONS.get(p.activation_func, p.activation_func)
    return {
        "hidden_act": act,
        "hidden_activation": act,
        "query_pre_attn_scalar": scalar,
        "attn_logit_softcapping": p.attn_logit_softcapping,
        "final_logit_softcapping": p.final_logit_softcapping,
        "sliding_window": window,
        "layer_types": types,
    }
