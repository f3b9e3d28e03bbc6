"""SmolLM3 config.json rules: SmolLM3Config defaults and its RoPE-less layers.

no_rope_layers (1: the layer rotates q/k, 0: it does not; transformers' default skips RoPE where
(i + 1) % no_rope_layer_interval == 0) -> Megatron-Core's no_rope_freq N (the same every-N-th pattern).
Its sliding window acts only with use_sliding_window, which the generic translation refuses.
"""

from __future__ import annotations

from typing import Any

from bridge.models.hf_translation.common import BASE_DEFAULTS, get
from bridge.models.hf_translation.layer_pattern import no_rope_freq, pattern_from_every_nth

CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "smollm3": dict(
        BASE_DEFAULTS,
        hidden_size=2048,
        num_hidden_layers=36,
        intermediate_size=11008,
        num_attention_heads=16,
        num_key_value_heads=4,
        max_position_embeddings=32768,
        vocab_size=128256,
        tie_word_embeddings=True,
        use_sliding_window=False,
        sliding_window=None,
        no_rope_layer_interval=4,
        rope_theta=2000000.0,
        attention_bias=False,
        mlp_bias=False,
    ),
}


def provider_fields(cfg: Any) -> dict[str, Any]:
    layers = int(get(cfg, "num_hidden_layers"))
    uses_rope = get(cfg, "no_rope_layers")
    if uses_rope is None:
        interval = int(get(cfg, "no_rope_layer_interval"))
        uses_rope = [int((i + 1) % interval != 0) for i in range(layers)]
    return {"no_rope_freq": no_rope_freq("no_rope_layers", uses_rope, [bool(f) for f in uses_rope])}


_DEFAULT_PAD_TOKEN_ID = 128004  # SmolLM3Config's


def hf_fields(p: Any) -> dict[str, Any]:
    skipped = pattern_from_every_nth(p.num_layers, p.no_rope_freq)
    out: dict[str, Any] = {
        "no_rope_layers": [int(not s) for s in skipped],
        "no_rope_layer_interval": p.no_rope_freq or p.num_layers + 1,
        "use_sliding_window": False,
    }
    if p.vocab_size is not None and p.vocab_size <= _DEFAULT_PAD_TOKEN_ID:
        # transformers checks pad_token_id against the vocabulary: no class-default id past a smaller one
        out["pad_token_id"] = None
    return out
