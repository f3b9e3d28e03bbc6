"""The one family registry: every folder under bridge/models that holds a `presets.py` is a family.

A family folder holds `presets.py` (provider factories with the published HF config values, named
by the folder's `__init__.__all__`) and, when the family converts to and from Hugging Face, `mapping.py` (the HF
mapping table as data: ARCHITECTURES, HF_MODEL_TYPE, PROVIDER_FIELDS, MAPPINGS) and `hf_config.py` (its
config.json rules: transformers' class defaults and the hooks bridge.models.hf_translation calls). Presets
(`bridge.models.preset`), conversion (`bridge.conversion.registry`), the planner (`bridge plan
--model <preset>`) and the recipes all read this registry, so adding a family is adding one folder.
Discovery reads the package's folders and imports each family's __init__ and presets.py (pure data).
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import pkgutil
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class FamilyInfo:
    name: str  # the folder under bridge/models
    presets: tuple[str, ...]  # preset factory names in bridge.models.<name>.presets
    mapping_module: str | None  # bridge.models.<name>.mapping, when the family converts to/from HF
    hf_config_module: str | None = None  # bridge.models.<name>.hf_config: its config.json rules
    # bridge.models.<name>.vision: a vision-language family's image side (bridge.models.vlm_provider)
    vision_module: str | None = None

    @property
    def presets_module(self) -> str:
        return f"bridge.models.{self.name}.presets"


def _has_module(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


@functools.cache
def families() -> dict[str, FamilyInfo]:
    """Family name -> FamilyInfo, in folder-name order."""
    package = Path(__file__).resolve().parent
    found: dict[str, FamilyInfo] = {}
    for info in sorted(pkgutil.iter_modules([str(package)]), key=lambda m: m.name):
        if not info.ispkg or not _has_module(f"bridge.models.{info.name}.presets"):
            continue
        package_module = importlib.import_module(f"bridge.models.{info.name}")  # imports presets.py
        mapping = f"bridge.models.{info.name}.mapping"
        hf_config = f"bridge.models.{info.name}.hf_config"
        vision = f"bridge.models.{info.name}.vision"
        found[info.name] = FamilyInfo(
            name=info.name,
            presets=tuple(package_module.__all__),
            mapping_module=mapping if _has_module(mapping) else None,
            hf_config_module=hf_config if _has_module(hf_config) else None,
            vision_module=vision if _has_module(vision) else None,
        )
    return found


@functools.cache
@functools.cache
def architecture_families() -> dict[str, str]:
    """HF architecture -> the family folder whose mapping.py converts it (its ARCHITECTURES)."""
    table: dict[str, str] = {}
    for info in families().values():
        if info.mapping_module is not None:
            for arch in importlib.import_module(info.mapping_module).ARCHITECTURES:
                table[arch] = info.name
    return table


def preset_families() -> dict[str, str]:
    """Preset name -> family name, over every family."""
    table: dict[str, str] = {}
    for family in families().values():
        for preset in family.presets:
            if preset in table:
                raise RuntimeError(
                    f"preset {preset!r} is declared by families {table[preset]} and {family.name}"
                )
            table[preset] = family.name
    return table


def preset_factory(name: str):
    """The factory of preset `name` (None when no family declares it)."""
    family = preset_families().get(name)
    if family is None:
        return None
    return getattr(importlib.import_module(families()[family].presets_module), name)


def mapping_modules() -> tuple[str, ...]:
    """The HF mapping tables of the families that convert."""
    return tuple(f.mapping_module for f in families().values() if f.mapping_module)
