"""Finding each family's config.json rules: the family registry (bridge.models.families) names the
folders; a folder's `hf_config.py` holds its rules and its `mapping.py` its architectures, model type(s)
and the provider fields its mapping implies. Pure data imports only."""

from __future__ import annotations

import functools
import importlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from bridge.errors import ConfigError
from bridge.models.families import families
from bridge.models.hf_translation.rules import FamilyRules


@dataclass(frozen=True)
class HfFamily:
    """A converting family as the translator sees it, for one model type."""

    name: str
    model_type: str
    provider_fields: dict = field(default_factory=dict)
    hf_config: FamilyRules = field(default_factory=FamilyRules)
    # A vision-language family: the config key of its language model (bridge.models.hf_translation.vlm).
    text_config_key: str | None = None


@functools.cache
def rules_of(family: str) -> FamilyRules:
    """The config.json rules of family folder `family` (the generic rules when it has no hf_config.py)."""
    module_name = families()[family].hf_config_module
    if module_name is None:
        return FamilyRules()
    return FamilyRules.from_module(importlib.import_module(module_name))


@functools.cache
def hf_families() -> dict[str, HfFamily]:
    """HF model_type -> HfFamily, over the families with a mapping table."""
    table: dict[str, HfFamily] = {}
    for info in families().values():
        if info.mapping_module is None:
            continue
        mapping = importlib.import_module(info.mapping_module)
        types = {mapping.HF_MODEL_TYPE, *getattr(mapping, "HF_MODEL_TYPES", {}).values()}
        for model_type in sorted(types):
            table[model_type] = HfFamily(
                info.name,
                model_type,
                dict(mapping.PROVIDER_FIELDS),
                rules_of(info.name),
                getattr(mapping, "TEXT_CONFIG_KEY", None),
            )
    return table


class _ClassDefaults(Mapping[str, Mapping[str, Any]]):
    """model_type -> transformers' class defaults, over every family's CLASS_DEFAULTS (read lazily)."""

    @functools.cached_property
    def _table(self) -> dict[str, Mapping[str, Any]]:
        table: dict[str, Mapping[str, Any]] = {}
        for name in families():
            table |= rules_of(name).class_defaults
        return table

    def __getitem__(self, model_type: str) -> Mapping[str, Any]:
        return self._table[model_type]

    def __iter__(self) -> Iterator[str]:
        return iter(self._table)

    def __len__(self) -> int:
        return len(self._table)


CLASS_DEFAULTS: Mapping[str, Mapping[str, Any]] = _ClassDefaults()


def with_class_defaults(config: dict[str, Any]) -> dict[str, Any] | None:
    """`config` completed with its transformers class defaults, or None for a model type not listed."""
    defaults = CLASS_DEFAULTS.get(config.get("model_type"))
    if defaults is None:
        return None
    return {**defaults, **config}


@functools.cache
def _by_architecture() -> dict[str, HfFamily]:
    table: dict[str, HfFamily] = {}
    types = hf_families()
    for info in families().values():
        if info.mapping_module is None:
            continue
        mapping = importlib.import_module(info.mapping_module)
        per_arch = getattr(mapping, "HF_MODEL_TYPES", {})
        for arch in mapping.ARCHITECTURES:
            table[arch] = types[per_arch.get(arch, mapping.HF_MODEL_TYPE)]
    return table


def supported_architectures() -> list[str]:
    """The Hugging Face architecture names that convert, sorted."""
    return sorted(_by_architecture())


def refused_architectures() -> dict[str, str]:
    """Architecture -> why it does not convert (a family's mapping module's REFUSED_ARCHITECTURES)."""
    table: dict[str, str] = {}
    for info in families().values():
        if info.mapping_module is not None:
            table |= getattr(importlib.import_module(info.mapping_module), "REFUSED_ARCHITECTURES", {})
    return table


def unsupported_error(architectures: list[str] | None) -> ConfigError:
    """The one error for a config.json whose architectures no family converts."""
    refused = refused_architectures()
    for arch in architectures or ():
        if arch in refused:
            return ConfigError(f"architectures={architectures!r}: {refused[arch]}")
    return ConfigError(
        f"architectures={architectures!r}: no conversion is registered for it; supported architectures "
        f"are {', '.join(supported_architectures())}. Fix: convert a checkpoint of one of those, or add "
        "a family folder with a mapping.py under bridge/models (bridge.models.families finds it)"
    )


def hf_family_for(architectures: list[str] | None) -> HfFamily:
    """The family (as the translator sees it) of the first architecture that converts; else ConfigError."""
    table = _by_architecture()
    for arch in architectures or ():
        if arch in table:
            return table[arch]
    raise unsupported_error(architectures)
