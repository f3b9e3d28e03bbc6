"""Which Hugging Face architectures convert, and the family module (mapping table) of each."""

from __future__ import annotations

import dataclasses
import importlib
import re
from dataclasses import dataclass
from types import ModuleType

from bridge.conversion.mappings import Mapping, StackedView, make_mapping
from bridge.models.families import mapping_modules
from bridge.models.hf_translation.registry import rules_of, unsupported_error
from bridge.models.hf_translation.rules import FamilyRules


@dataclass(frozen=True)
class Rule:
    """A mapping table row compiled for matching canonical Megatron names."""

    kind: str
    megatron: str
    hf: tuple[str, ...]
    pattern: re.Pattern

    @property
    def is_expert(self) -> bool:
        return "{expert}" in self.megatron

    def resolve(self, name: str) -> Mapping | None:
        m = self.pattern.fullmatch(name)
        if m is None:
            return None
        values = m.groupdict()
        return make_mapping(self.kind, name, tuple(h.format(**values) for h in self.hf))


@dataclass(frozen=True)
class Family:
    name: str
    architectures: tuple[str, ...]
    model_type: str
    provider_fields: dict
    rules: tuple[Rule, ...]
    # The family's config.json rules (its folder's hf_config.py hooks, bridge.models.hf_translation).
    hf_config: FamilyRules = dataclasses.field(default_factory=FamilyRules)
    # Per-expert HF names cut out of tensors stacking a layer's experts (bridge.conversion.stacked_experts).
    stacked_experts: tuple[StackedView, ...] = ()
    # (HF template with {layer}, EMBEDDING | OUTPUT): tensors an MTP layer of the checkpoint repeats
    # (bridge.conversion.unmapped.copies).
    mtp_copies: tuple[tuple[str, str], ...] = ()
    # The provider kind the family builds (bridge.models.provider_kinds; mapping.py's PROVIDER_KIND).
    provider_kind: str = "gpt"

    def resolve(self, name: str) -> tuple[Rule, Mapping] | None:
        for rule in self.rules:
            mapping = rule.resolve(name)
            if mapping is not None:
                return rule, mapping
        return None


def _compile(row: tuple) -> Rule:
    kind, megatron, hf = row
    hf = (hf,) if isinstance(hf, str) else tuple(hf)
    regex = (
        re.escape(megatron)
        .replace(r"\{layer\}", r"(?P<layer>\d+)")
        .replace(r"\{expert\}", r"(?P<expert>\d+)")
    )
    make_mapping(kind, megatron, hf)  # validates kind and arity once, at load
    return Rule(kind, megatron, hf, re.compile(regex))


def _load(module_name: str) -> Family:
    module: ModuleType = importlib.import_module(module_name)
    name = module_name.split(".")[-2]
    return Family(
        name=name,
        architectures=tuple(module.ARCHITECTURES),
        model_type=module.HF_MODEL_TYPE,
        provider_fields=dict(module.PROVIDER_FIELDS),
        rules=tuple(_compile(row) for row in module.MAPPINGS),
        hf_config=rules_of(name),
        stacked_experts=tuple(StackedView(*row) for row in getattr(module, "STACKED_EXPERTS", ())),
        mtp_copies=tuple(tuple(row) for row in getattr(module, "MTP_COPIES", ())),
        provider_kind=getattr(module, "PROVIDER_KIND", "gpt"),
    )


_FAMILIES: dict[str, Family] | None = None


def families() -> dict[str, Family]:
    """Architecture name (HF `architectures[0]`) -> Family."""
    global _FAMILIES
    if _FAMILIES is None:
        table = {}
        for module_name in mapping_modules():
            family = _load(module_name)
            # A family converting several architectures may give each its model type (HF_MODEL_TYPES).
            types = getattr(importlib.import_module(module_name), "HF_MODEL_TYPES", {})
            for arch in family.architectures:
                table[arch] = dataclasses.replace(family, model_type=types[arch]) if arch in types else family
        _FAMILIES = table
    return _FAMILIES


def supported_architectures() -> list[str]:
    return sorted(families())


def family_for(architectures: list[str] | None) -> Family:
    table = families()
    for arch in architectures or ():
        if arch in table:
            return table[arch]
    raise unsupported_error(architectures)
