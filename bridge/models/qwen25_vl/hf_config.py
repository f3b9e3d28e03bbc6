"""Qwen2.5-VL config.json rules: transformers' Qwen2_5_VLConfig / Qwen2_5_VLTextConfig defaults, the
language model read as Qwen2 (`text_config`), and M-RoPE (`rope_parameters.mrope_section`) as the
provider's position_embedding_type='mrope' with its mrope_section."""

from __future__ import annotations

from typing import Any

from bridge.models.hf_translation.common import BASE_DEFAULTS, get, refuse

TEXT_MODEL_TYPE = "qwen2_5_vl_text"

CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "qwen2_5_vl": dict(
        image_token_id=151655,
        video_token_id=151656,
        vision_start_token_id=151652,
        vision_end_token_id=151653,
        tie_word_embeddings=False,
    ),
    # Qwen2_5_VLTextConfig's defaults (a 72B shape), read when a text_config omits a key.
    TEXT_MODEL_TYPE: dict(
        BASE_DEFAULTS,
        vocab_size=152064,
        hidden_size=8192,
        intermediate_size=29568,
        num_hidden_layers=80,
        num_attention_heads=64,
        num_key_value_heads=8,
        max_position_embeddings=32768,
        rms_norm_eps=1e-5,
        use_sliding_window=False,
        sliding_window=4096,
        rope_theta=1000000.0,
    ),
}


def _mrope_section(text: Any) -> list[int] | None:
    params = {**(get(text, "rope_scaling") or {}), **(get(text, "rope_parameters") or {})}
    section = params.get("mrope_section")
    return None if section is None else [int(s) for s in section]


def _text(cfg: Any) -> Any:
    text = get(cfg, "text_config")
    if text is None:
        raise refuse("text_config", None, "a Qwen2.5-VL config describes its language model there",
                     "save the model with transformers 5's save_pretrained")  # fmt: skip
    return text


def text_config(text: dict[str, Any]) -> dict[str, Any]:
    """The language model's config as Qwen2's: Qwen2_5_VLTextConfig's defaults filled in, M-RoPE's
    sections taken out of the RoPE keys (provider_fields carries them), model_type qwen2."""
    if text.get("model_type") != TEXT_MODEL_TYPE:
        raise refuse("text_config.model_type", text.get("model_type"), f"a Qwen2.5-VL language model is {TEXT_MODEL_TYPE!r}",
                     "convert a checkpoint saved by transformers' Qwen2_5_VLForConditionalGeneration")  # fmt: skip
    out = {**CLASS_DEFAULTS[TEXT_MODEL_TYPE], **text, "model_type": "qwen2"}
    for key in ("rope_parameters", "rope_scaling"):
        if isinstance(out.get(key), dict):
            rope = {k: v for k, v in out[key].items() if k != "mrope_section"}
            if rope.get("rope_type", rope.get("type")) == "mrope":  # 4.x spelling of default + sections
                rope = {k: v for k, v in rope.items() if k != "type"} | {"rope_type": "default"}
            out[key] = rope
    return out


def provider_fields(cfg: Any) -> dict[str, Any]:
    """M-RoPE: GPTModel's 'mrope' with the checkpoint's sections (transformers' default [16, 24, 24])."""
    section = _mrope_section(_text(cfg))
    return {"position_embedding_type": "mrope", "mrope_section": section or [16, 24, 24]}
