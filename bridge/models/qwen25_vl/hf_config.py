"""Qwen2.5-VL config.json rules: transformers' Qwen2_5_VLConfig / Qwen2_5_VLTextConfig defaults, the
language model read as Qwen2, and M-RoPE (`mrope_section`) as the provider's
position_embedding_type='mrope' with its sections.

Two layouts are read, as transformers' Qwen2_5_VLConfig reads them: transformers 5 saves the language model
under `text_config` (model_type qwen2_5_vl_text, `rope_parameters` with `mrope_section`); the published
checkpoints' config.json is flat (its keys at the top level, `rope_scaling` {"type": "mrope", ...})."""

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
    # Qwen2_5_VLTextConfig's defaults (a 72B shape), read when a text config omits a key.
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
# The keys transformers' Qwen2_5_VLConfig moves from a flat config.json into text_config (the text config
# class's fields and the RoPE keys; tie_word_embeddings stays outside).
FLAT_TEXT_KEYS = (
    "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "hidden_act", "max_position_embeddings", "initializer_range", "rms_norm_eps",
    "use_cache", "use_sliding_window", "sliding_window", "max_window_layers", "layer_types",
    "attention_dropout", "rope_parameters", "rope_scaling", "rope_theta", "bos_token_id", "eos_token_id",
    "pad_token_id",
)  # fmt: skip


def _raw_text(cfg: Any) -> dict[str, Any]:
    """The language model's keys as the checkpoint holds them (nested or flat)."""
    text = get(cfg, "text_config")
    if text is not None:
        return dict(text) if isinstance(text, dict) else text.to_dict()
    flat = {k: get(cfg, k) for k in FLAT_TEXT_KEYS if get(cfg, k) is not None}
    return dict(flat, model_type=TEXT_MODEL_TYPE)


def _mrope_section(text: dict[str, Any]) -> list[int] | None:
    params = {**(text.get("rope_scaling") or {}), **(text.get("rope_parameters") or {})}
    section = params.get("mrope_section")
    return None if section is None else [int(s) for s in section]


def text_config(cfg: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the language model's config as Qwen2's: Qwen2_5_VLTextConfig's defaults filled in, M-RoPE's
    sections taken out of the RoPE keys (provider_fields carries them), model_type qwen2; vlm_config: the
    rest of the config, text keys out)."""
    text = _raw_text(cfg)
    if text.get("model_type") != TEXT_MODEL_TYPE:
        raise refuse("text_config.model_type", text.get("model_type"), f"a Qwen2.5-VL language model is {TEXT_MODEL_TYPE!r}",
                     "convert a checkpoint saved by transformers' Qwen2_5_VLForConditionalGeneration")  # fmt: skip
    out = {**CLASS_DEFAULTS[TEXT_MODEL_TYPE], **text, "model_type": "qwen2"}
    for key in ("rope_parameters", "rope_scaling"):
        if isinstance(out.get(key), dict):
            rope = {k: v for k, v in out[key].items() if k != "mrope_section"}
            if rope.get("rope_type", rope.get("type")) == "mrope":  # the flat spelling of default + sections
                rope = {k: v for k, v in rope.items() if k not in ("type", "rope_type")} | {
                    "rope_type": "default"
                }
            out[key] = rope
    rest = {k: v for k, v in cfg.items() if k != "text_config" and k not in FLAT_TEXT_KEYS}
    return out, dict(rest, text_config={"model_type": TEXT_MODEL_TYPE})


def provider_fields(cfg: Any) -> dict[str, Any]:
    """M-RoPE: GPTModel's 'mrope' with the checkpoint's sections (transformers' default [16, 24, 24]); tied
    embeddings as transformers 5 decides them: the outer tie_word_embeddings, or the text config's (earlier
    saves put it there)."""
    text = _raw_text(cfg)
    tied = bool(get(cfg, "tie_word_embeddings", False) or text.get("tie_word_embeddings", False))
    return {
        "position_embedding_type": "mrope",
        "mrope_section": _mrope_section(text) or [16, 24, 24],
        "share_embeddings_and_output_weights": tied,
    }
