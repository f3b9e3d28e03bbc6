"""ERNIE 4.5 (dense) config.json rules: Ernie4_5Config defaults; use_bias (biases on every linear of
attention and MLP) is refused, the published configs set it false; the generic translation does the rest."""

from __future__ import annotations

from typing import Any

from bridge.models.hf_translation.common import BASE_DEFAULTS, get, refuse

CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "ernie4_5": dict(
        {k: v for k, v in BASE_DEFAULTS.items() if k != "attention_dropout"},  # Ernie4_5Config has none
        hidden_size=1024,
        num_hidden_layers=18,
        intermediate_size=3072,
        num_attention_heads=16,
        num_key_value_heads=2,
        head_dim=128,
        max_position_embeddings=131072,
        vocab_size=103424,
        rms_norm_eps=1e-05,
        rope_theta=500000.0,
        tie_word_embeddings=True,
        use_bias=False,
    ),
}


def check(cfg: Any) -> None:
    if get(cfg, "use_bias"):
        raise refuse(
            "use_bias",
            True,
            "the ernie45 mapping has no linear biases",
            "convert a model with use_bias=false (the published dense ERNIE 4.5)",
        )


def hf_fields(p: Any) -> dict[str, Any]:
    return {"use_bias": False}
