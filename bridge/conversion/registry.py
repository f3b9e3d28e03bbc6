"""Which Hugging Face architectures convert, and the family module (mapping table) of each."""

from __future__ import annotations

import dataclasses
import importlib
import re
from dataclasses import dataclass
from types import ModuleType

from bridge.conversion.mappings import Mapping, StackedView, make_mapping
from bridge.errors import ConfigError
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
    # transformers' model holds those stacked tensors with the last two dims swapped against the views, so
    # a checkpoint may be stored either way (mapping.py's STACKED_TRANSPOSED_IN_MODEL; stacked_experts).
    stacked_transposed_in_model: bool = False
    # (HF template with {layer}, EMBEDDING | OUTPUT): tensors an MTP layer of the checkpoint repeats
    # (bridge.conversion.unmapped.copies).
    mtp_copies: tuple[tuple[str, str], ...] = ()
    # (regex, reason): why the family maps no parameter to the checkpoint tensors the regex matches (e.g.
    # an MTP layer Megatron-Core computes differently); the unmapped-tensor error says it (mapping.py's
    # UNMAPPED_WHY).
    unmapped_why: tuple[tuple[re.Pattern, str], ...] = ()
    # Where the checkpoint keeps its MTP layers when not in DeepSeek-V3's layout (the rows' layout,
    # model.layers.<num_layers + k>.<rest>): (rest, name) pairs, rest "" naming the prefix of the layer's other
    # tensors ({k} its depth); bridge.conversion.model_params.mtp_hf_name applies them (mapping.py's
    # MTP_HF_NAMES).
    mtp_hf_names: tuple[tuple[str, str], ...] = ()
    # The provider kind the family builds (bridge.models.provider_kinds; mapping.py's PROVIDER_KIND).
    provider_kind: str = "gpt"
    # A vision-language family: the config key of its text model, and where the text family's HF names
    # move in its checkpoint ((text prefix, checkpoint prefix) pairs); `with_text_family` composes them.
    text_config_key: str | None = None
    text_hf_prefixes: tuple[tuple[str, str], ...] = ()
    # HF module names (the last part) peft does not adapt on this model type, with why (mapping.py's
    # PEFT_REFUSED_MODULES): save_hf_adapter refuses adapters on them
    peft_refused_modules: tuple[tuple[str, str], ...] = ()

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
        .replace(r"\{rest\}", r"(?P<rest>.+)")  # a whole module copied by name (a VLM's image side)
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
        stacked_transposed_in_model=getattr(module, "STACKED_TRANSPOSED_IN_MODEL", False),
        mtp_copies=tuple(tuple(row) for row in getattr(module, "MTP_COPIES", ())),
        unmapped_why=tuple((re.compile(rx), why) for rx, why in getattr(module, "UNMAPPED_WHY", ())),
        mtp_hf_names=tuple(tuple(row) for row in getattr(module, "MTP_HF_NAMES", ())),
        provider_kind=getattr(module, "PROVIDER_KIND", "gpt"),
        text_config_key=getattr(module, "TEXT_CONFIG_KEY", None),
        text_hf_prefixes=tuple(tuple(pair) for pair in getattr(module, "TEXT_HF_PREFIXES", ())),
        peft_refused_modules=tuple(getattr(module, "PEFT_REFUSED_MODULES", {}).items()),
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


def family_named(name: str, model_type: str) -> Family:
    """The conversion family of folder `name` for HF `model_type` (a VLM's text family)."""
    return next(f for f in families().values() if f.name == name and f.model_type == model_type)


def _moved(name: str, prefixes: tuple[tuple[str, str], ...]) -> str:
    for text_prefix, checkpoint_prefix in prefixes:
        if name.startswith(text_prefix):
            return checkpoint_prefix + name[len(text_prefix) :]
    raise ConfigError(f"HF tensor {name!r} has no prefix among {[p for p, _ in prefixes]} (TEXT_HF_PREFIXES)")


def with_text_family(vlm: Family, text: Family) -> Family:
    """The conversion family of a vision-language checkpoint whose language model is `text`: the
    text family's rows (their HF names under the VLM's prefixes) after the VLM's own image-side rows;
    the text family's config.json rules and provider fields."""
    if text.stacked_experts:
        raise ConfigError(
            f"text family {text.name} stores stacked experts, which {vlm.name}'s checkpoint prefixes "
            "do not cover. Fix: use a language model without stacked expert tensors"
        )
    moved = tuple(
        dataclasses.replace(rule, hf=tuple(_moved(h, vlm.text_hf_prefixes) for h in rule.hf))
        for rule in text.rules
    )
    return dataclasses.replace(
        vlm, provider_fields=dict(text.provider_fields), rules=vlm.rules + moved, hf_config=text.hf_config
    )
