"""The provider kinds and which one a family or a model section is (pure data, no torch).

`gpt` (GPTModelProvider, Megatron-Core's GPTModel) is every family's kind unless its mapping.py
declares `PROVIDER_KIND`; `hybrid` (MambaModelProvider, Megatron-Core's MambaModel) is the kind of a
layer pattern of Mamba, attention, MLP and MoE layers; `vlm` (VLMModelProvider) a vision-language
checkpoint's (the text model's fields with the vision side's config). A saved model section
(run_config.yaml) says its kind by its fields: a `vlm_config` makes it the vlm kind, a hybrid layer
pattern the hybrid kind.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bridge.errors import ConfigError
from bridge.models.gpt_provider import GPTModelProvider
from bridge.models.hybrid_provider import MambaModelProvider
from bridge.models.vlm_provider import VLMModelProvider

PROVIDER_KINDS: dict[str, type[GPTModelProvider]] = {
    "gpt": GPTModelProvider,
    "hybrid": MambaModelProvider,
    "vlm": VLMModelProvider,
}


def provider_class(kind: str) -> type[GPTModelProvider]:
    if kind not in PROVIDER_KINDS:
        raise ConfigError(f"provider kind {kind!r} is unknown. Fix: use one of {sorted(PROVIDER_KINDS)}")
    return PROVIDER_KINDS[kind]


def class_of_fields(fields: Mapping[str, Any]) -> type[GPTModelProvider]:
    """The provider class a model section's fields describe."""
    if fields.get("vlm_config") is not None:
        return VLMModelProvider
    return MambaModelProvider if fields.get("hybrid_override_pattern") is not None else GPTModelProvider
