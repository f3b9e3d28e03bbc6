"""A vision-language checkpoint's conversion family: its text family's rows moved under its prefixes.

The config.json split is bridge.models.hf_translation.vlm's; here the text family's mapping rows are
composed with the VLM family's own (registry.with_text_family).
"""

from __future__ import annotations

from typing import Any

from bridge.conversion import registry
from bridge.models.hf_translation import registry as hf_registry
from bridge.models.hf_translation.vlm import split as split_config


def split(hf_config: Any, family: registry.Family) -> tuple[registry.Family, Any, Any, dict]:
    """(the checkpoint's conversion family, the text config, the text family, vlm_config)."""
    text_config, text_family, vlm_config = split_config(
        hf_config, hf_registry.hf_families()[family.model_type]
    )
    text = registry.family_named(text_family.name, text_family.model_type)
    return registry.with_text_family(family, text), text_config, text, vlm_config
