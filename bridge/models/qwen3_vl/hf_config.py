"""Qwen3-VL config.json rules: transformers' Qwen3VLConfig / Qwen3VLTextConfig defaults, the language model
read as Qwen3 (q/k norms), and interleaved M-RoPE (`mrope_section`, `mrope_interleaved`) as the provider's
position_embedding_type='mrope' with mrope_interleaved. transformers 5 saves the language model under
`text_config` (model_type qwen3_vl_text)."""

from __future__ import annotations

from typing import Any

from bridge.models.hf_translation.common import BASE_DEFAULTS, get, refuse

TEXT_MODEL_TYPE = "qwen3_vl_text"
MROPE_KEYS = ("mrope_section", "mrope_interleaved")

CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "qwen3_vl": dict(image_token_id=151655, video_token_id=151656, vision_start_token_id=151652,
                     vision_end_token_id=151653, tie_word_embeddings=False),
    # Qwen3VLTextConfig's defaults, read when a text config omits a key.
    TEXT_MODEL_TYPE: dict(
        BASE_DEFAULTS, vocab_size=151936, hidden_size=4096, intermediate_size=22016, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=32, head_dim=128, max_position_embeddings=128000,
        rms_norm_eps=1e-6, attention_bias=False, rope_theta=5000000.0,
    ),
}  # fmt: skip


def _raw_text(cfg: Any) -> dict[str, Any]:
    text = get(cfg, "text_config")
    if text is None:
        return {}
    return dict(text) if isinstance(text, dict) else text.to_dict()


def _rope(text: dict[str, Any]) -> dict[str, Any]:
    return {**(text.get("rope_scaling") or {}), **(text.get("rope_parameters") or {})}


def text_config(cfg: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the language model's config as Qwen3's: Qwen3VLTextConfig's defaults filled in, the M-RoPE keys
    taken out of the RoPE keys (provider_fields carries them), model_type qwen3; vlm_config: the rest)."""
    text = _raw_text(cfg)
    if text.get("model_type") != TEXT_MODEL_TYPE:
        raise refuse("text_config.model_type", text.get("model_type"), f"a Qwen3-VL language model is {TEXT_MODEL_TYPE!r}",
                     "convert a checkpoint saved by transformers' Qwen3VLForConditionalGeneration")  # fmt: skip
    rope = _rope(text)
    if rope.get("rope_type", rope.get("type", "default")) != "default":
        raise refuse("text_config.rope_parameters.rope_type", rope.get("rope_type"),
                     "Qwen3-VL's M-RoPE is converted with default (unscaled) frequencies",
                     "convert a checkpoint whose rope_parameters.rope_type is 'default'")  # fmt: skip
    out = {**CLASS_DEFAULTS[TEXT_MODEL_TYPE], **text, "model_type": "qwen3"}
    for key in ("rope_parameters", "rope_scaling"):
        if isinstance(out.get(key), dict):
            out[key] = {k: v for k, v in out[key].items() if k not in MROPE_KEYS}
    rest = {k: v for k, v in cfg.items() if k != "text_config"}
    return out, dict(rest, text_config={"model_type": TEXT_MODEL_TYPE})


def provider_fields(cfg: Any) -> dict[str, Any]:
    """Interleaved M-RoPE with the checkpoint's sections (transformers' default [24, 20, 20]); tied
    embeddings from the outer tie_word_embeddings or the text config's."""
    text = _raw_text(cfg)
    rope = _rope(text)
    tied = bool(get(cfg, "tie_word_embeddings", False) or text.get("tie_word_embeddings", False))
    return {
        "position_embedding_type": "mrope",
        "mrope_section": [int(s) for s in rope.get("mrope_section", [24, 20, 20])],
        "mrope_interleaved": bool(rope.get("mrope_interleaved", True)),
        "share_embeddings_and_output_weights": tied,
    }
