"""The provider's fields and defaults stay in step with the installed Megatron-Core's TransformerConfig."""

import dataclasses
import importlib.util
from pathlib import Path

import pytest

from bridge.models import transformer_fields
from bridge.models.gpt_provider import (
    ACTIVATIONS,
    ATTENTION_BACKENDS,
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
    # Regenerating from the installed release must reproduce the committed file byte for byte.
    text = _load_generator().render()
    committed = (ROOT / "bridge" / "models" / "transformer_fields.py").read_text()
    assert committed == text, "run scripts/dev/snapshot_transformer_fields.py and commit the result"


def test_every_transformer_config_field_is_a_provider_field_or_excluded_with_reason():
    mcore = {f.name for f in dataclasses.fields(TransformerConfig)}
    provider = {f.name for f in dataclasses.fields(GPTModelProvider)}
    excluded = set(transformer_fields.EXCLUDED_FIELDS)
    assert mcore - excluded <= provider
    assert set(transformer_field_names()) == mcore - excluded
    assert excluded <= mcore, "an excluded name no longer exists in TransformerConfig"
    assert all(reason for reason in transformer_fields.EXCLUDED_FIELDS.values())


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
        assert set(choices) <= set(typing.get_args(hints[name])) | {
            a for arg in typing.get_args(hints[name]) for a in typing.get_args(arg)
        }


def test_names_map_to_megatron_objects():
    from megatron.core.transformer.enums import AttnBackend

    assert set(ATTENTION_BACKENDS) == {b.name for b in AttnBackend}
    provider = GPTModelProvider()
    for name in ACTIVATIONS:
        provider.activation_func = name
        assert callable(provider.megatron_value("activation_func"))


def test_field_types_are_omegaconf_friendly():
    from omegaconf import OmegaConf

    cfg = OmegaConf.structured(GPTModelProvider)
    assert set(cfg.keys()) == {f.name for f in dataclasses.fields(GPTModelProvider)}
    back = OmegaConf.to_object(OmegaConf.merge(cfg, OmegaConf.create(OmegaConf.to_yaml(cfg))))
    assert back == GPTModelProvider()
