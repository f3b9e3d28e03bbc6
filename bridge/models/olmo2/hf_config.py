"""OLMo 2 config.json rules: Olmo2Config defaults (its norm placement and q/k norms are the mapping's
PROVIDER_FIELDS); the generic translation does the rest."""

from __future__ import annotations

from typing import Any

from bridge.models.hf_translation.common import BASE_DEFAULTS

CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "olmo2": dict(
        BASE_DEFAULTS,
        hidden_size=4096,
        num_hidden_layers=32,
        intermediate_size=11008,
        num_attention_heads=32,
        max_position_embeddings=2048,
        vocab_size=50304,
        rms_norm_eps=1e-05,
        attention_bias=False,
    ),
}
