"""A vision-language config.json split into its language model's config and the rest (pure data).

The VLM family's mapping module names the key of its language model's config (`TEXT_CONFIG_KEY`); that
part is read by the text family of its `model_type` (its class defaults and rules), and the rest becomes
VLMModelProvider.vlm_config (the image side, built by transformers from it).
"""

from __future__ import annotations

from typing import Any

from bridge.models.hf_translation.common import get, refuse
from bridge.models.hf_translation.registry import HfFamily, hf_families, with_class_defaults


def _as_dict(config: Any) -> dict[str, Any]:
    return dict(config) if isinstance(config, dict) else config.to_dict()


def split(config: Any, family: HfFamily) -> tuple[dict[str, Any], HfFamily, dict[str, Any]]:
    """(the language model's config completed with its class defaults, its text family, vlm_config)."""
    key = family.text_config_key
    if family.hf_config.text_config is not None:  # the family splits its config itself (its own layout)
        text, vlm_config = family.hf_config.text_config(_as_dict(config))
    else:
        text = get(config, key)
        if text is None:
            raise refuse(
                key,
                None,
                f"a {family.name} checkpoint describes its language model there",
                "save the model with transformers' save_pretrained",
            )
        text = _as_dict(text)
        rest = {k: v for k, v in _as_dict(config).items() if k != key}
        vlm_config = dict(rest, **{key: {"model_type": text.get("model_type")}})
    if "dtype" not in text and "torch_dtype" not in text:  # the checkpoint's dtype is the top-level one
        text["dtype"] = get(config, "dtype") or get(config, "torch_dtype")
    model_type = text.get("model_type")
    text_families = {t: f for t, f in hf_families().items() if f.text_config_key is None}
    if model_type not in text_families:
        raise refuse(
            f"{key}.model_type",
            model_type,
            f"no text family converts this model type (known: {', '.join(sorted(text_families))})",
            "convert a checkpoint whose language model is one of those",
        )
    completed = with_class_defaults(text)
    return completed if completed is not None else text, text_families[model_type], vlm_config


def vlm_fields(config: Any, family: Any) -> dict[str, Any]:
    """The provider fields a vision-language family reads from its whole config (its `provider_fields`
    hook: e.g. M-RoPE, which its text family does not express), beside its text family's. `family`:
    the VLM family (conversion's registry Family or an HfFamily: both carry its `hf_config` rules)."""
    hook = family.hf_config.provider_fields
    return {} if hook is None else dict(hook(config))
