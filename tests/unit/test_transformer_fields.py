"""The provider's fields and defaults stay in step with the installed Megatron-Core's TransformerConfig."""

import dataclasses
import importlib.util
from pathlib import Path

import pytest

from bridge.errors import ConfigError
from bridge.models import transformer_fields
from bridge.models.gpt_provider import (
    ACTIVATIONS,
    DEFAULTS_DIFFERING_FROM_MCORE,
    GPTModelProvider,
    transformer_field_names,
)

tc_module = pytest.importorskip("megatron.core.transformer.transformer_config")
TransformerConfig = tc_module.TransformerConfig

ROOT = Path(__file__).resolve().parents[2]


def _load_generator():
    path = ROOT / "scripts" / "dev" / "snapshot_transformer_fields.py"
    spec = importlib.util.spec_from_file_location("snapshot_transformer_fields", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _mcore_default(f: dataclasses.Field):
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return f.default


def test_committed_snapshot_matches_installed_megatron_core():
    # Regenerating from the installed release must reproduce its committed file byte for byte.
    generator = _load_generator()
    text = generator.render()
    name = generator.module_name(transformer_fields.INSTALLED_RELEASE)
    committed = (ROOT / "bridge" / "models" / "transformer_fields" / f"{name}.py").read_text()
    assert committed == text, "run scripts/dev/snapshot_transformer_fields.py and commit the result"


def test_installed_release_has_its_own_snapshot():
    # The declared megatron-core range is the tested one: every release CI installs has a snapshot.
    assert transformer_fields.SNAPSHOT.RELEASE == transformer_fields.INSTALLED_RELEASE
    assert transformer_fields.SNAPSHOT.RELEASE in transformer_fields.TESTED_RELEASES


def test_every_transformer_config_field_is_a_provider_field_or_excluded_with_reason():
    mcore = {f.name for f in dataclasses.fields(TransformerConfig)}
    provider = {f.name for f in dataclasses.fields(GPTModelProvider)}
    excluded = set(transformer_fields.EXCLUDED_FIELDS)
    assert mcore - excluded <= provider
    assert set(transformer_field_names()) == mcore - excluded
    assert excluded <= mcore, "an excluded name no longer exists in TransformerConfig"
    assert all(reason for reason in transformer_fields.EXCLUDED_FIELDS.values())
    # The provider's other TransformerConfig-named fields are exactly those of other releases.
    assert set(transformer_fields.UNAVAILABLE_FIELDS).isdisjoint(mcore)


def test_fields_of_other_releases_are_kept_at_their_default_or_refused():
    unavailable = transformer_fields.UNAVAILABLE_FIELDS
    assert unavailable, "the two supported releases differ in their fields"
    name, releases = next(iter(unavailable.items()))
    provider = GPTModelProvider(num_layers=2, hidden_size=64, num_attention_heads=4)
    provider.finalize()  # at the default: accepted, and never passed to TransformerConfig
    assert name not in transformer_field_names()
    default = transformer_fields.field_default(name)
    setattr(provider, name, (not default) if isinstance(default, bool) else 3)
    with pytest.raises(ConfigError) as err:
        provider.finalize()
    message = str(err.value)
    assert f"model.{name}=" in message
    assert f"megatron-core {transformer_fields.INSTALLED_RELEASE}" in message
    assert all(release in message for release in releases)


def test_snapshot_choice_by_release():
    pick = transformer_fields.snapshot_for
    first, last = transformer_fields.SNAPSHOTS[0], transformer_fields.SNAPSHOTS[-1]
    assert pick(first.RELEASE) is first and pick(last.RELEASE) is last
    assert pick("0.16.3") is first
    assert pick("0.18.0") is first  # nearest older snapshot
    assert pick("0.20.0") is last
    assert pick("0.15.0") is first


def test_provider_defaults_map_to_transformer_config_defaults():
    provider = GPTModelProvider()
    differing = []
    for f in dataclasses.fields(TransformerConfig):
        if f.name in transformer_fields.EXCLUDED_FIELDS:
            continue
        ours, theirs = provider.megatron_value(f.name), _mcore_default(f)
        if f.name == "pipeline_dtype":
            # None = follow the training dtype (Megatron-LM's rule); with the defaults that is fp32.
            assert provider.pipeline_dtype is None and ours is not None
            continue
        if ours != theirs:
            differing.append(f.name)
    assert differing == list(DEFAULTS_DIFFERING_FROM_MCORE)


def test_literal_choices_match_transformer_config():
    import typing

    hints = typing.get_type_hints(TransformerConfig)
    for name, choices in transformer_fields.FIELD_CHOICES.items():
        if name in transformer_fields.UNAVAILABLE_FIELDS or name in transformer_fields.BY_NAME_FIELDS:
            continue  # not this release's, or an enum by member name (test_names_map_to_megatron_objects)
        assert set(choices) <= set(typing.get_args(hints[name])) | {
            a for arg in typing.get_args(hints[name]) for a in typing.get_args(arg)
        }


def test_names_map_to_megatron_objects():
    import enum

    from megatron.core.transformer.enums import AttnBackend

    assert transformer_fields.BY_NAME_FIELDS["attention_backend"].endswith("enums.AttnBackend")
    assert set(transformer_fields.FIELD_CHOICES["attention_backend"]) == {b.name for b in AttnBackend}
    provider = GPTModelProvider()
    for name, kind in transformer_fields.BY_NAME_FIELDS.items():
        if name not in transformer_field_names() or not kind.startswith("enum:"):
            continue
        for choice in transformer_fields.FIELD_CHOICES[name]:
            setattr(provider, name, choice)
            value = provider.megatron_value(name)
            assert isinstance(value, enum.Enum) and value.name == choice
        setattr(provider, name, transformer_fields.field_default(name))
    for name in ACTIVATIONS:
        provider.activation_func = name
        assert callable(provider.megatron_value("activation_func"))


def test_field_types_are_omegaconf_friendly():
    from omegaconf import OmegaConf

    cfg = OmegaConf.structured(GPTModelProvider)
    assert set(cfg.keys()) == {f.name for f in dataclasses.fields(GPTModelProvider)}
    back = OmegaConf.to_object(OmegaConf.merge(cfg, OmegaConf.create(OmegaConf.to_yaml(cfg))))
    assert back == GPTModelProvider()
