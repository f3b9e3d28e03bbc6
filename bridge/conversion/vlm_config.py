"""A vision-language checkpoint's config.json split into its text model and its image side.

The VLM family's mapping module names the text model's config key (`TEXT_CONFIG_KEY`); the text part is
read by the text family of its `model_type` (its rules, class defaults and rows, moved under the VLM's
checkpoint prefixes: registry.with_text_family), the rest becomes VLMModelProvider.vlm_config.
"""

from __future__ import annotations

from typing import Any

from bridge.conversion import registry
from bridge.errors import ConfigError
from bridge.models.hf_translation import common as hf_common
from bridge.models.hf_translation import registry as hf_registry


def _as_dict(config: Any) -> dict[str, Any]:
    return dict(config) if isinstance(config, dict) else config.to_dict()


def split(hf_config: Any, family: registry.Family) -> tuple[registry.Family, Any, registry.Family, dict]:
    """(the checkpoint's conversion family, the text config, the text family, vlm_config)."""
    key = family.text_config_key
    text = hf_common.get(hf_config, key)
    if text is None:
        raise ConfigError(
            f"HF config {key}=None: a {family.name} checkpoint describes its language model there. "
            "Fix: save the model with transformers' save_pretrained"
        )
    text = _as_dict(text)
    if "dtype" not in text and "torch_dtype" not in text:  # the checkpoint's dtype is the top-level one
        text["dtype"] = hf_common.get(hf_config, "dtype") or hf_common.get(hf_config, "torch_dtype")
    model_type = text.get("model_type")
    text_family = registry.family_for_model_type(model_type, f"{key}.model_type")
    completed = hf_registry.with_class_defaults(text)
    text_config = completed if completed is not None else text
    rest = {k: v for k, v in _as_dict(hf_config).items() if k != key}
    vlm_config = dict(rest, **{key: {"model_type": model_type}})
    return registry.with_text_family(family, text_family), text_config, text_family, vlm_config
