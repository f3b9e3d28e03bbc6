"""Phi-3 config.json rules: Phi3Config defaults; every layer windowed by `sliding_window`; LongRoPE
(the 128k variants) refused with the reason."""

from __future__ import annotations

from typing import Any

from bridge.models.hf_translation.common import BASE_DEFAULTS
from bridge.models.hf_translation.write import sliding_window_hf_fields as hf_fields  # noqa: F401

CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "phi3": dict(
        BASE_DEFAULTS,
        hidden_size=3072,
        num_hidden_layers=32,
        intermediate_size=8192,
        num_attention_heads=32,
        max_position_embeddings=4096,
        vocab_size=32064,
        rms_norm_eps=1e-05,
        sliding_window=None,
    ),
}

_LONGROPE = (
    "Phi-3 128k / Phi-3.5 LongRoPE: per-dimension short/long factors switched at "
    "original_max_position_embeddings, which Megatron-Core's rotary embedding does not implement",
    "convert a model with default or llama3 RoPE (for Phi-3: a 4k-context variant such as "
    "microsoft/Phi-3-mini-4k-instruct)",
)
ROPE_TYPE_NOTES = {"longrope": _LONGROPE, "su": _LONGROPE, "yarn": _LONGROPE}
