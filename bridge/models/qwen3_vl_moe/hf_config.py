"""Qwen3-VL-MoE config.json rules: transformers' Qwen3VLMoeConfig / Qwen3VLMoeTextConfig defaults, the
language model read as Qwen3-MoE (its router renormalizes the top-k probabilities: norm_topk_prob), and
Qwen3-VL's interleaved M-RoPE (bridge.models.qwen3_vl.hf_config)."""

from __future__ import annotations

from typing import Any

from bridge.models.hf_translation.common import BASE_DEFAULTS, MOE_DEFAULTS, refuse
from bridge.models.qwen3_vl import hf_config as qwen3_vl
from bridge.models.qwen3_vl.hf_config import provider_fields  # noqa: F401  (M-RoPE, tied embeddings)

TEXT_MODEL_TYPE = "qwen3_vl_moe_text"

CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "qwen3_vl_moe": dict(qwen3_vl.CLASS_DEFAULTS["qwen3_vl"]),
    # Qwen3VLMoeTextConfig's defaults, read when a text config omits a key.
    TEXT_MODEL_TYPE: dict(
        BASE_DEFAULTS | MOE_DEFAULTS, vocab_size=151936, hidden_size=2048, intermediate_size=5632,
        num_hidden_layers=24, num_attention_heads=16, num_key_value_heads=16, head_dim=128,
        max_position_embeddings=128000, rms_norm_eps=1e-6, attention_bias=False, rope_theta=5000000.0,
        decoder_sparse_step=1, moe_intermediate_size=1408, num_experts_per_tok=4, num_experts=60,
        mlp_only_layers=[], tie_word_embeddings=True,
    ),
}  # fmt: skip


def text_config(cfg: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the language model's config as Qwen3-MoE's, with the top-k renormalized; vlm_config: the rest)."""
    text = qwen3_vl._raw_text(cfg)
    if text.get("model_type") != TEXT_MODEL_TYPE:
        raise refuse("text_config.model_type", text.get("model_type"), f"a Qwen3-VL-MoE language model is {TEXT_MODEL_TYPE!r}",
                     "convert a checkpoint saved by transformers' Qwen3VLMoeForConditionalGeneration")  # fmt: skip
    as_qwen3_vl = {
        **cfg,
        "text_config": {**CLASS_DEFAULTS[TEXT_MODEL_TYPE], **text, "model_type": qwen3_vl.TEXT_MODEL_TYPE},
    }
    out, rest = qwen3_vl.text_config(as_qwen3_vl)
    out = {**out, "model_type": "qwen3_moe", "norm_topk_prob": True}  # Qwen3VLMoeTextTopKRouter renormalizes
    return out, dict(rest, text_config={"model_type": TEXT_MODEL_TYPE})
