"""Gated DeltaNet (linear attention) in a config.json: `layer_types` ("linear_attention" /
"full_attention" per layer, or transformers' default: every `full_attention_interval`-th layer, 4, is
softmax attention) and the `linear_*` head sizes, <-> the provider's Megatron-Core fields
(experimental_attention_variant="gated_delta_net", linear_attention_freq, linear_*). Read by the
families whose config classes carry them (their hf_config hooks call these)."""

from __future__ import annotations

from typing import Any

from bridge.models.hf_translation.common import get, refuse

# config.json key -> provider field (the same names in both, as Megatron-Core took them from HF)
LINEAR_SIZES = (
    "linear_conv_kernel_dim",
    "linear_key_head_dim",
    "linear_value_head_dim",
    "linear_num_key_heads",
    "linear_num_value_heads",
)
# transformers' rule when a config names no layer_types
DEFAULT_FULL_ATTENTION_INTERVAL = 4


def layer_types(num_layers: int, interval: int) -> list[str]:
    """transformers' layer_types for one softmax-attention layer every `interval` layers (the last of each)."""
    return ["linear_attention" if (i + 1) % interval else "full_attention" for i in range(num_layers)]


def gated_delta_net_fields(cfg: Any) -> dict[str, Any]:
    """The provider fields of a config with Gated DeltaNet layers."""
    layers = int(get(cfg, "num_hidden_layers"))
    types = get(cfg, "layer_types")
    if types is None:
        types = layer_types(layers, int(get(cfg, "full_attention_interval", DEFAULT_FULL_ATTENTION_INTERVAL)))
    types = list(types)
    unknown = sorted(set(types) - {"linear_attention", "full_attention"})
    if unknown or len(types) != layers:
        raise refuse(
            "layer_types",
            types,
            f"must name 'linear_attention' or 'full_attention' for each of the {layers} layers",
            "use the published config.json",
        )
    full = [i for i, t in enumerate(types) if t == "full_attention"]
    interval = full[0] + 1 if full else 0
    if not full or types != layer_types(layers, interval):
        raise refuse(
            "layer_types",
            types,
            "Megatron-Core's linear_attention_freq (an integer here) places one softmax-attention layer "
            "every N layers, the last of each N; this pattern is not of that form",
            "convert a model whose softmax-attention layers are every N-th layer",
        )
    out: dict[str, Any] = {
        "experimental_attention_variant": "gated_delta_net",
        "linear_attention_freq": interval,
        # softmax attention layers gate their output (sigmoid of a second half of q_proj)
        "attention_output_gate": True,
    }
    for name in LINEAR_SIZES:
        out[name] = int(get(cfg, name))
    return out


def gated_delta_net_hf_fields(p: Any) -> dict[str, Any]:
    """The config.json keys of a provider with Gated DeltaNet layers."""
    return {
        "layer_types": layer_types(p.num_layers, p.linear_attention_freq),
        **{name: getattr(p, name) for name in LINEAR_SIZES},
    }
