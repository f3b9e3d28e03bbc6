"""EXAONE 4 config.json rules: Exaone4Config defaults and its local / global attention.

With a sliding_window, layer_types' "sliding_attention" layers attend within the window and rotate
q/k; its "full_attention" layers attend globally without RoPE. Both must be every N-th layer global:
Megatron-Core's window_attn_skip_freq N (windows) and no_rope_freq N (RoPE-less layers). Without a
sliding_window every layer is global with RoPE. A window of at least max_position_embeddings keys
masks nothing (no window_size) but still makes the global layers RoPE-less.
"""

from __future__ import annotations

from typing import Any

from bridge.models.gemma2.hf_config import default_layer_types, window_fields
from bridge.models.hf_translation.common import BASE_DEFAULTS, get, refuse
from bridge.models.hf_translation.layer_pattern import no_rope_freq

CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "exaone4": dict(
        BASE_DEFAULTS,
        hidden_size=4096,
        num_hidden_layers=32,
        intermediate_size=16384,
        num_attention_heads=32,
        num_key_value_heads=32,
        max_position_embeddings=2048,
        vocab_size=102400,
        rms_norm_eps=1e-05,
        sliding_window=4096,
        sliding_window_pattern=4,
    ),
}


def _layer_types(cfg: Any, layers: int) -> list[str]:
    types = get(cfg, "layer_types")
    if types:
        return list(types)
    if get(cfg, "sliding_window") is None:
        return ["full_attention"] * layers
    every = get(cfg, "sliding_window_pattern")
    if not isinstance(every, int) or isinstance(every, bool) or every < 1:
        raise refuse(
            "sliding_window_pattern",
            every,
            "without layer_types, transformers reads it as an integer N (every N-th layer global)",
            "give layer_types (the published configs do)",
        )
    return default_layer_types(layers, every)


def provider_fields(cfg: Any) -> dict[str, Any]:
    layers = int(get(cfg, "num_hidden_layers"))
    types = _layer_types(cfg, layers)
    fields: dict[str, Any] = {"window_size": None, "window_attn_skip_freq": None, "no_rope_freq": None}
    if get(cfg, "sliding_window") is None:
        return fields
    fields.update(window_fields(cfg, layers, int(get(cfg, "max_position_embeddings")), types))
    fields["no_rope_freq"] = no_rope_freq("layer_types", types, [t == "sliding_attention" for t in types])
    return fields


def hf_fields(p: Any) -> dict[str, Any]:
    """The EXAONE 4 keys of config.json for provider `p` (hf_config_dict checks they read back)."""
    if p.window_size is None and not p.no_rope_freq:
        return {"sliding_window": None, "layer_types": ["full_attention"] * p.num_layers}
    # global layers: the windowed model's, else (no window) the RoPE-less ones under a window that masks nothing
    every = p.window_attn_skip_freq if p.window_size is not None else p.no_rope_freq
    window = p.window_size[0] + 1 if p.window_size is not None else p.seq_length
    types = default_layer_types(p.num_layers, every) if every else ["sliding_attention"] * p.num_layers
    return {"sliding_window": window, "sliding_window_pattern": every or None, "layer_types": types}
