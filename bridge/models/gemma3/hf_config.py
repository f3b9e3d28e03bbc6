"""Gemma 3 text config.json <-> provider fields: Gemma 2's (bridge.models.gemma2.hf_config: activation,
query_pre_attn_scalar, soft-capping, sliding-window layers) plus the two rotary embeddings.

Global ("full_attention") layers: rope_theta -> rotary_base, rope_scaling linear (factor f) ->
seq_len_interpolation_factor f (positions / f, as HF's inv_freq / f). Local ("sliding_attention")
layers: rope_local_base_freq -> local_rotary_base, unscaled (bridge.models.local_rope_attention).
Read from transformers 5's rope_parameters (one entry per layer type) or the older rope_theta /
rope_local_base_freq / rope_scaling keys. The local layers are the windowed ones, so window_size is
kept even when the window is not shorter than max_position_embeddings.
"""

from __future__ import annotations

from typing import Any

from bridge.models.gemma2 import hf_config as gemma2
from bridge.models.hf_translation.common import get, refuse

# Gemma3TextConfig's defaults: Gemma2Config's but these (its rope_theta / rope_local_base_freq defaults,
# 1e6 / 1e4, are rope_fields' own: one per layer type)
CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "gemma3_text": {
        **{k: v for k, v in gemma2.DEFAULTS.items() if k != "rope_theta"},
        "max_position_embeddings": 131072,
        "vocab_size": 262208,
        "final_logit_softcapping": None,
        "attn_logit_softcapping": None,
    },
}

OWN_ACTIVATION = True
_ROPE_TYPES = ("default", "linear")


def _rope_of(cfg: Any, layer_type: str, theta_key: str, theta_default: float) -> dict[str, Any]:
    params = dict((get(cfg, "rope_parameters") or {}).get(layer_type) or {})
    if not params and layer_type == "full_attention":
        params = dict(get(cfg, "rope_scaling") or {})
    params.setdefault("rope_theta", get(cfg, theta_key, theta_default))
    params["rope_type"] = params.get("rope_type", params.get("type", "default")) or "default"
    return params


def rope_fields(cfg: Any) -> dict[str, Any]:
    """Replaces the generic RoPE translation (its one rope for every layer)."""
    full = _rope_of(cfg, "full_attention", "rope_theta", 1_000_000.0)
    local = _rope_of(cfg, "sliding_attention", "rope_local_base_freq", 10_000.0)
    for layer_type, params, allowed in (
        ("full_attention", full, _ROPE_TYPES),
        ("sliding_attention", local, ("default",)),
    ):
        if params["rope_type"] not in allowed:
            raise refuse(
                f"rope_parameters.{layer_type}.rope_type",
                params["rope_type"],
                f"Gemma 3's {layer_type} layers are built with {list(allowed)} RoPE",
                "convert a model with those (the published Gemma 3 configs)",
            )
        if float(params.get("partial_rotary_factor", 1.0)) != 1.0:
            raise refuse(
                f"rope_parameters.{layer_type}.partial_rotary_factor",
                params["partial_rotary_factor"],
                "Gemma 3's per-layer RoPE rotates whole heads",
                "convert a model without partial_rotary_factor",
            )
    factor = float(full["factor"]) if full["rope_type"] == "linear" else None
    return dict(
        position_embedding_type="rope",
        rotary_percent=1.0,
        rotary_base=full["rope_theta"],  # as the generic translation: the config's number
        seq_len_interpolation_factor=factor,
        local_rotary_base=float(local["rope_theta"]),
    )


def provider_fields(cfg: Any) -> dict[str, Any]:
    fields = gemma2.provider_fields(cfg)
    layers = int(get(cfg, "num_hidden_layers"))
    every = int(get(cfg, "sliding_window_pattern", 6) or 6)  # older config.json files without layer_types
    types = list(get(cfg, "layer_types") or gemma2.default_layer_types(layers, every))
    if "sliding_attention" not in types:
        return fields | {"window_size": None, "window_attn_skip_freq": None, "local_rotary_base": None}
    if get(cfg, "sliding_window") is None:
        raise refuse(
            "sliding_window",
            None,
            "layer_types has sliding_attention layers, which need a window",
            "set sliding_window (the published configs: 512 or 1024)",
        )
    # Every sliding layer keeps its window (and so its local RoPE), however long the window.
    fields.update(gemma2.window_fields(cfg, layers, float("inf"), types))
    fields.update(rope_fields(cfg))
    return fields


def hf_fields(p: Any) -> dict[str, Any]:
    """The Gemma 3 keys of config.json for provider `p` (hf_config_dict checks they read back)."""
    out = gemma2.hf_fields(p)  # hidden_act stays as Gemma 2 writes it (the HF name, unread)
    full: dict[str, Any] = {"rope_type": "default", "rope_theta": p.rotary_base}
    if p.seq_len_interpolation_factor is not None:
        full = {"rope_type": "linear", "factor": p.seq_len_interpolation_factor, "rope_theta": p.rotary_base}
    local = p.local_rotary_base if p.local_rotary_base is not None else p.rotary_base
    out["rope_parameters"] = {
        "full_attention": full,
        "sliding_attention": {"rope_type": "default", "rope_theta": local},
    }
    return out
