"""OLMo 3 config.json rules: Olmo3Config defaults, its sliding-window layers and its RoPE per layer type.

sliding_window + layer_types  window_size = [sliding_window - 1, 0] on the "sliding_attention" layers,
    every N-th layer global (Megatron-Core's window_attn_skip_freq N; transformers' default: N = 4).
rope_parameters  one entry per layer type (transformers 5), or rope_theta for both and rope_scaling for
    the "full_attention" layers (older config.json files). The full layers: default or YaRN RoPE
    (yarn_rope_*: the published long-context checkpoints), GPTModel's; the sliding layers: default
    RoPE, their own (local_rotary_base, bridge.models.local_rope_attention) when it is not GPTModel's.
"""

from __future__ import annotations

from typing import Any

from bridge.models.gemma2.hf_config import default_layer_types, window_fields
from bridge.models.hf_translation.common import BASE_DEFAULTS, get, refuse
from bridge.models.hf_translation.write import yarn_rope_parameters
from bridge.models.hf_translation.yarn import yarn_rope_fields

CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    # (its rope_theta default, 500000 for both layer types, is rope_of's own)
    "olmo3": dict(
        {k: v for k, v in BASE_DEFAULTS.items() if k != "rope_theta"},
        hidden_size=4096,
        num_hidden_layers=32,
        intermediate_size=11008,
        num_attention_heads=32,
        max_position_embeddings=2048,
        vocab_size=50304,
        rms_norm_eps=1e-05,
        attention_bias=False,
        sliding_window=4096,
    ),
}

_LAYER_TYPES = ("sliding_attention", "full_attention")


def rope_of(cfg: Any, layer_type: str) -> dict[str, Any]:
    """The RoPE parameters of `layer_type`'s layers, with rope_type and rope_theta always present."""
    params = get(cfg, "rope_parameters") or {}
    if params and all(isinstance(v, dict) for v in params.values()):
        out = dict(params.get(layer_type) or {})
    else:
        out = dict(params)
        if layer_type == "full_attention":  # transformers applies rope_scaling to these only
            out.update(get(cfg, "rope_scaling") or {})
    out.setdefault("rope_theta", get(cfg, "rope_theta", 500000.0))
    out["rope_type"] = out.get("rope_type", out.get("type", "default")) or "default"
    return out


def rope_fields(cfg: Any) -> dict[str, Any]:
    """Replaces the generic RoPE translation (which reads one flat rope_parameters): GPTModel's RoPE is
    the full layers' (default or YaRN); the sliding layers get their own unscaled one (local_rotary_base)
    when it differs."""
    ropes = {t: rope_of(cfg, t) for t in _LAYER_TYPES}
    for layer_type, params in ropes.items():
        allowed = ("default", "yarn") if layer_type == "full_attention" else ("default",)
        if params["rope_type"] not in allowed:
            raise refuse(
                f"rope_parameters.{layer_type}.rope_type",
                params["rope_type"],
                f"OLMo 3's {layer_type} layers are built with {list(allowed)} RoPE",
                "convert a model with those (the published OLMo 3 configs)",
            )
        if float(params.get("partial_rotary_factor", 1.0)) != 1.0:
            raise refuse(
                f"rope_parameters.{layer_type}.partial_rotary_factor",
                params["partial_rotary_factor"],
                "OLMo 3's RoPE rotates whole heads",
                "convert a model without partial_rotary_factor",
            )
    full, sliding = ropes["full_attention"], ropes["sliding_attention"]
    out: dict[str, Any] = dict(
        position_embedding_type="rope",
        rotary_percent=1.0,
        rotary_base=full["rope_theta"],  # as the generic translation: the config's number
        yarn_rope_factor=None,
        local_rotary_base=None,
    )
    if full["rope_type"] == "yarn":
        out.update(yarn_rope_fields(full, cfg, "rope_parameters.full_attention"))
    if full["rope_type"] != "default" or float(sliding["rope_theta"]) != float(full["rope_theta"]):
        out["local_rotary_base"] = float(sliding["rope_theta"])
    return out


def provider_fields(cfg: Any) -> dict[str, Any]:
    layers = int(get(cfg, "num_hidden_layers"))
    types = list(get(cfg, "layer_types") or default_layer_types(layers, 4))
    # Every sliding layer keeps its window, however long: it is also what selects their own RoPE.
    fields = window_fields(cfg, layers, float("inf"), types)
    if fields["window_size"] is None and rope_fields(cfg)["local_rotary_base"] is not None:
        raise refuse(
            "layer_types",
            types,
            "the sliding layers' own RoPE needs sliding layers with a window",
            "set sliding_window and sliding_attention layers, or one RoPE for both layer types",
        )
    return fields


def hf_fields(p: Any) -> dict[str, Any]:
    """The OLMo 3 keys of config.json for provider `p` (hf_config_dict checks they read back)."""
    if p.window_size is None:
        window, types = None, ["full_attention"] * p.num_layers
    else:
        every = p.window_attn_skip_freq
        window = p.window_size[0] + 1
        types = default_layer_types(p.num_layers, every) if every else ["sliding_attention"] * p.num_layers
    full = yarn_rope_parameters(p)
    local = p.local_rotary_base if p.local_rotary_base is not None else p.rotary_base
    return {
        "sliding_window": window,
        "layer_types": types,
        "rope_parameters": {
            "full_attention": full,
            "sliding_attention": {"rope_type": "default", "rope_theta": local},
        },
    }
