"""EXAONE-MoE config.json rules (transformers' ExaoneMoe, checked against Megatron-Core 0.16.1 and 0.19.2).

- Attention: EXAONE 4's (bridge.models.exaone4.hf_config): with a sliding_window, layer_types'
  "sliding_attention" layers attend within the window and rotate q/k, "full_attention" layers attend
  globally without RoPE, every N-th layer (window_attn_skip_freq / no_rope_freq N); per-head q/k norms.
  Norms before each branch (OLMoE's decoder layer), not after as in EXAONE 4.
- Experts: DeepSeek-V3's block: sigmoid scores + e_score_correction_bias, group-limited, renormalised,
  times routed_scaling_factor (hf_translation.sigmoid_routing); a shared expert of
  num_shared_experts * moe_intermediate_size, ungated.
- Dense / MoE layers: mlp_layer_types ("dense" / "sparse"), else the first first_k_dense_replace dense.
- Multi-token prediction (num_nextn_predict_layers, tensors mtp.*): a dense-MLP layer, not Megatron-Core's
  MTP layer (which repeats the last, MoE, decoder layer; mapping.UNMAPPED_WHY): the unmapped-tensor error
  with that reason (bridge.conversion.unmapped), or left out and listed with omit_unmapped.
- Keys of later EXAONE-MoE configs that transformers 5.25's ExaoneMoe does not read (per-layer SwiGLU
  clamps swiglu_limits, per-layer windows sliding_windows) would change the math of the checkpoint
  without changing transformers' model: refused.
"""

from __future__ import annotations

import logging
from typing import Any

from bridge.models.exaone4 import hf_config as exaone4
from bridge.models.hf_translation.common import BASE_DEFAULTS, get, refuse
from bridge.models.hf_translation.read import rope_fields
from bridge.models.hf_translation.sigmoid_routing import shared_expert_moe_fields, sigmoid_routing_hf_fields

logger = logging.getLogger(__name__)

CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "exaone_moe": dict(
        BASE_DEFAULTS,
        vocab_size=102400,
        hidden_size=4096,
        intermediate_size=16384,
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=32,
        max_position_embeddings=2048,
        rms_norm_eps=1e-5,
        sliding_window=4096,
        sliding_window_pattern=4,
        first_k_dense_replace=1,
        moe_intermediate_size=1024,
        num_experts=64,
        num_experts_per_tok=8,
        num_shared_experts=1,
        norm_topk_prob=True,
        routed_scaling_factor=2.5,
        n_group=1,
        topk_group=1,
    ),
}


# config.json keys transformers' ExaoneMoeConfig (5.25) ignores but a checkpoint's math depends on
UNREAD_MATH_KEYS = {
    "swiglu_limits": "per-layer clamps of the SwiGLU activation",
    "sliding_windows": "per-layer sliding-window sizes",
}


def check(cfg: Any) -> None:
    for key, what in UNREAD_MATH_KEYS.items():
        if get(cfg, key) is not None:
            raise refuse(
                key,
                get(cfg, key),
                f"{what}: transformers' ExaoneMoe does not apply them, so neither it nor a conversion checked "
                "against it computes the model the checkpoint was trained as",
                "convert a checkpoint without it (K-EXAONE-236B-A23B has none)",
            )


def _moe_layer_freq(cfg: Any) -> list[int]:
    layers = int(get(cfg, "num_hidden_layers"))
    types = get(cfg, "mlp_layer_types")
    if not types:  # ExaoneMoeConfig's rule
        dense = int(get(cfg, "first_k_dense_replace") or 0)
        types = ["dense" if i < dense else "sparse" for i in range(layers)]
    types = list(types)
    if len(types) != layers or set(types) - {"dense", "sparse"} or "sparse" not in types:
        raise refuse(
            "mlp_layer_types",
            types,
            f"one 'dense' or 'sparse' per layer ({layers}), at least one sparse",
            "use the published config.json",
        )
    return [int(t == "sparse") for t in types]


def _moe_fields(cfg: Any) -> dict[str, Any]:
    return shared_expert_moe_fields(
        cfg,
        experts_key="num_experts",
        shared_key="num_shared_experts",
        aux_loss_coeff=0.0,
        layer_freq=_moe_layer_freq(cfg),
    )


def translate(cfg: Any, base: dict[str, Any]) -> dict[str, Any]:
    """`base` (the generic sizes, norms, dtype) with RoPE, EXAONE's local / global layers and experts."""
    fields = base | rope_fields(cfg) | exaone4.provider_fields(cfg) | _moe_fields(cfg)
    return fields


def moe_hf_fields(p: Any) -> dict[str, Any]:
    freq = p.moe_layer_freq
    pattern = [int(i % freq == 0) for i in range(p.num_layers)] if isinstance(freq, int) else list(freq)
    size = p.moe_ffn_hidden_size
    return sigmoid_routing_hf_fields(p) | {
        "num_experts": p.num_moe_experts,
        "moe_intermediate_size": size,
        # a size that is not a multiple of the expert size reads back differently (refused on export)
        "num_shared_experts": (p.moe_shared_expert_intermediate_size or 0) // size if size else 0,
        "mlp_layer_types": ["sparse" if moe else "dense" for moe in pattern],
        "num_nextn_predict_layers": 0,
    }


def hf_fields(p: Any) -> dict[str, Any]:
    return exaone4.hf_fields(p)
