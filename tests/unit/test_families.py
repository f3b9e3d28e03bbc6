"""One family registry (bridge.models.families): presets, conversion, the planner and recipes read it."""

from __future__ import annotations

import importlib
from pathlib import Path

from bridge.models import PRESETS, families, preset

MODELS = Path(__file__).resolve().parents[2] / "bridge" / "models"


def test_every_family_folder_is_registered_once_with_its_presets():
    folders = sorted(p.parent.name for p in MODELS.glob("*/presets.py"))
    registry = families.families()
    assert list(registry) == folders
    for name, family in registry.items():
        module = importlib.import_module(family.presets_module)
        assert family.presets and all(callable(getattr(module, p)) for p in family.presets), name
    listed = [p for f in registry.values() for p in f.presets]
    assert len(listed) == len(set(listed)) and set(listed) == set(PRESETS)
    assert all(PRESETS[p] == f.name for f in registry.values() for p in f.presets)


def test_presets_conversion_and_planner_read_the_registry():
    from bridge.cli.plan import resolve_model
    from bridge.conversion import registry as conversion

    converting = [f for f in families.families().values() if f.mapping_module]
    architectures = {
        arch for f in converting for arch in importlib.import_module(f.mapping_module).ARCHITECTURES
    }
    assert set(conversion.supported_architectures()) == architectures
    assert {conversion.family_for([a]).name for a in architectures} == {f.name for f in converting}
    for name in PRESETS:
        shape, _ = resolve_model(name)  # the planner finds every preset by name
        assert shape.num_layers == preset(name).num_layers


def test_recipes_build_on_registered_presets():
    from recipes import get_recipe, list_recipes

    known = {(p.num_layers, p.hidden_size, p.vocab_size) for p in map(preset, PRESETS)}
    for name, _ in list_recipes():
        m = get_recipe(name)().model
        assert (m.num_layers, m.hidden_size, m.vocab_size) in known, name


def test_every_converting_model_type_has_class_defaults_and_a_tiny_model():
    """A converting family declares its rules in its folder and gets the family-parametrised suites
    through one entry of tiny-model test data (tests/functional/workers/convert_models.py)."""
    import pytest

    pytest.importorskip("transformers")
    import transformers

    from bridge.models.hf_translation.registry import CLASS_DEFAULTS, hf_families
    from tests.functional.workers.convert_models import FAMILIES, make_hf_config
    from tests.functional.workers.vlm_models import OWN_SUITE_VLM_FAMILIES, VLM_FAMILIES  # their own suites

    converting = hf_families()
    assert set(converting) <= set(CLASS_DEFAULTS)
    assert all(families.families()[f.name].hf_config_module for f in converting.values())
    vlm = {
        getattr(transformers, cls).model_type for cls, _ in (VLM_FAMILIES | OWN_SUITE_VLM_FAMILIES).values()
    }
    assert {make_hf_config(name).model_type for name in FAMILIES} | vlm == set(converting)
