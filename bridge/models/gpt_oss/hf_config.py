"""GPT-OSS config.json <-> provider fields beyond the generic ones (bridge.models.hf_translation).

swiglu_limit / swiglu_alpha  the experts' clamped SwiGLU: gate clamped above, up clamped both sides,
    gate * sigmoid(alpha * gate) * (up + 1) = Megatron-Core's quick_gelu GLU (alpha 1.702, fixed) with
    activation_func_clamp_value = limit and glu_linear_offset 1; another alpha is refused.
sinks (attention)  softmax_type "learnable" (the mapping's PROVIDER_FIELDS), with every linear biased.
sliding_window + layer_types  window_size on the sliding layers, window_attn_skip_freq N (every N-th
    layer global; Gemma 2's rule, bridge.models.gemma2.hf_config.window_fields).
rope_parameters yarn  position_embedding_type "yarn" with the yarn_* fields (truncate false: the
    correction range unrounded; mscale / mscale_all_dim when both are set, as transformers reads
    them); an explicit attention_factor other than the one they give is refused.
quantization_config (the published MXFP4 experts) is refused: convert a bf16 checkpoint.
"""

from __future__ import annotations

import math
from typing import Any

from bridge.models.gemma2.hf_config import default_layer_types, window_fields
from bridge.models.hf_translation.common import BASE_DEFAULTS, MOE_DEFAULTS, get, refuse

# quick_gelu's sigmoid gain in Megatron-Core (megatron.core.activations / fusions.fused_bias_geglu).
QUICK_GELU_ALPHA = 1.702

YARN_DEFAULTS: dict[str, Any] = dict(
    rope_type="yarn",
    factor=32.0,
    beta_fast=32.0,
    beta_slow=1.0,
    truncate=False,
    original_max_position_embeddings=4096,
    rope_theta=150000.0,
)

CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "gpt_oss": dict(
        BASE_DEFAULTS | MOE_DEFAULTS,
        hidden_size=2880,
        num_hidden_layers=36,
        intermediate_size=2880,
        head_dim=64,
        num_attention_heads=64,
        num_key_value_heads=8,
        sliding_window=128,
        max_position_embeddings=131072,
        vocab_size=201088,
        rms_norm_eps=1e-05,
        rope_theta=150000.0,
        rope_parameters=YARN_DEFAULTS,
        num_local_experts=128,
        num_experts_per_tok=4,
        swiglu_alpha=QUICK_GELU_ALPHA,
        swiglu_limit=7.0,
        attention_bias=True,
    ),
}

OWN_ACTIVATION = True  # hidden_act is unused by GptOssForCausalLM: the experts' swiglu_* decide


def check(cfg: Any) -> None:
    quantization = get(cfg, "quantization_config")
    if quantization:
        method = quantization.get("quant_method") if isinstance(quantization, dict) else quantization
        raise refuse(
            "quantization_config",
            method,
            "quantized expert weights (MXFP4 blocks and scales) are not dequantized by the conversion",
            "convert a bf16 checkpoint of the model (dequantized, without quantization_config)",
        )
    if not get(cfg, "attention_bias", True):
        raise refuse(
            "attention_bias",
            False,
            "the gpt_oss mapping has q/k/v/o biases (every published GPT-OSS has them)",
            "convert a model with attention_bias=true",
        )
    alpha = get(cfg, "swiglu_alpha", QUICK_GELU_ALPHA)
    if alpha != QUICK_GELU_ALPHA:
        raise refuse(
            "swiglu_alpha",
            alpha,
            f"Megatron-Core's quick_gelu GLU has the gain {QUICK_GELU_ALPHA} built in",
            f"convert a model with swiglu_alpha={QUICK_GELU_ALPHA}",
        )


def _yarn_mscale(scale: float, m: float = 1.0) -> float:
    return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0


def rope_fields(cfg: Any) -> dict[str, Any]:
    """Default RoPE, or YaRN (position_embedding_type "yarn"): one RoPE for every layer."""
    scaling = {**(get(cfg, "rope_scaling") or {}), **(get(cfg, "rope_parameters") or {})}
    rope_type = scaling.get("rope_type", scaling.get("type", "default")) or "default"
    partial = scaling.get("partial_rotary_factor", get(cfg, "partial_rotary_factor", 1.0))
    if partial != 1.0:
        raise refuse(
            "partial_rotary_factor",
            partial,
            "Megatron-Core's YaRN rotates the whole head",
            "convert a model without partial_rotary_factor",
        )
    out: dict[str, Any] = {
        "position_embedding_type": "rope",
        "rotary_base": scaling.get("rope_theta", get(cfg, "rope_theta", 150000.0)),
        "rotary_percent": 1.0,
    }
    if rope_type == "default":
        return out
    if rope_type != "yarn":
        raise refuse(
            "rope_parameters.rope_type",
            rope_type,
            "GPT-OSS converts with 'yarn' or 'default' RoPE",
            "use the published rope_parameters",
        )
    original = int(scaling["original_max_position_embeddings"])
    factor = float(scaling.get("factor") or int(get(cfg, "max_position_embeddings")) / original)
    # transformers takes mscale / mscale_all_dim only when both are non-zero; Megatron-Core when both are set
    m, m_all = scaling.get("mscale"), scaling.get("mscale_all_dim")
    m, m_all = (float(m), float(m_all)) if m and m_all else (None, None)
    given = scaling.get("attention_factor")
    if given is not None:
        implied = _yarn_mscale(factor, m) / _yarn_mscale(factor, m_all) if m else _yarn_mscale(factor)
        if float(given) != implied:
            raise refuse(
                "rope_parameters.attention_factor",
                given,
                f"Megatron-Core scales YaRN's cos / sin by {implied} (from factor, mscale, mscale_all_dim)",
                "drop attention_factor, or convert a model whose attention factor follows from those",
            )
    return out | dict(
        position_embedding_type="yarn",
        yarn_rotary_scaling_factor=factor,
        yarn_original_max_position_embeddings=original,
        yarn_beta_fast=float(scaling.get("beta_fast") or 32),
        yarn_beta_slow=float(scaling.get("beta_slow") or 1),
        yarn_correction_range_round_to_int=bool(scaling.get("truncate", True)),
        yarn_mscale=m,
        yarn_mscale_all_dim=m_all,
    )


def provider_fields(cfg: Any) -> dict[str, Any]:
    limit = get(cfg, "swiglu_limit", 7.0)
    fields: dict[str, Any] = dict(
        activation_func="quick_gelu",
        gated_linear_unit=True,
        activation_func_clamp_value=None if limit is None else float(limit),
        glu_linear_offset=1.0,
    )
    layers = int(get(cfg, "num_hidden_layers"))
    return fields | window_fields(cfg, layers, int(get(cfg, "max_position_embeddings")))


def moe_hf_fields(p: Any) -> dict[str, Any]:
    """GPT-OSS's names of the expert keys: num_local_experts of intermediate_size, top-k renormalised."""
    return {"num_local_experts": p.num_moe_experts, "intermediate_size": p.moe_ffn_hidden_size}


def hf_fields(p: Any) -> dict[str, Any]:
    """The GPT-OSS keys of config.json for provider `p` (hf_config_dict checks they read back)."""
    if p.window_size is None:
        window, types = None, ["full_attention"] * p.num_layers
    else:
        every = p.window_attn_skip_freq
        window = p.window_size[0] + 1
        types = default_layer_types(p.num_layers, every) if every else ["sliding_attention"] * p.num_layers
    out: dict[str, Any] = {
        "hidden_act": "silu",
        "swiglu_alpha": QUICK_GELU_ALPHA,
        "swiglu_limit": p.activation_func_clamp_value,
        "attention_bias": True,
        "sliding_window": window,
        "layer_types": types,
    }
    if p.position_embedding_type == "yarn":
        out["rope_scaling"] = {
            "rope_type": "yarn",
            "factor": p.yarn_rotary_scaling_factor,
            "original_max_position_embeddings": p.yarn_original_max_position_embeddings,
            "beta_fast": p.yarn_beta_fast,
            "beta_slow": p.yarn_beta_slow,
            "truncate": p.yarn_correction_range_round_to_int,
        }
        if p.yarn_mscale is not None and p.yarn_mscale_all_dim is not None:
            out["rope_scaling"] |= {"mscale": p.yarn_mscale, "mscale_all_dim": p.yarn_mscale_all_dim}
    return out
