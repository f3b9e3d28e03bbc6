"""What every family's config.json translation shares: reading a field from a config object or dict,
the refusal message, and transformers' class defaults common to the decoder families."""

from __future__ import annotations

from typing import Any

from bridge.errors import ConfigError

# transformers' config-class defaults shared by every family read here (checked against transformers
# in tests/unit/test_conversion_hf_config.py, with each family's own defaults).
BASE_DEFAULTS: dict[str, Any] = dict(
    hidden_act="silu",
    attention_dropout=0.0,
    initializer_range=0.02,
    tie_word_embeddings=False,
    rope_theta=10000.0,
    rms_norm_eps=1e-06,
)


def get(cfg: Any, name: str, default: Any = None) -> Any:
    """`cfg.name` of a PretrainedConfig or `cfg[name]` of a config.json dict."""
    return getattr(cfg, name, default) if not isinstance(cfg, dict) else cfg.get(name, default)


def refuse(field: str, value: Any, rule: str, fix: str) -> ConfigError:
    """The one error for an HF config value a family cannot express."""
    return ConfigError(f"HF config {field}={value!r}: {rule}. Fix: {fix}.")
