"""What a Hugging Face model folder's config.json fixes about the model: its architecture fields.

A run starting from a Hugging Face folder (`checkpoint.pretrained_checkpoint=HF_DIR`) takes every
architecture field of its model section from here (what `AutoBridge.to_megatron_provider` reads; training
choices such as seq_length, dropout and dtypes stay the recipe's): bridge.config.compose fills the model
section, bridge.config.finetune_rules.check_hf_start refuses an override that contradicts the weights, and
bridge.training.hf_start streams the weights in. Pure Python (no torch), so the dry run stays light.
"""

from __future__ import annotations

import dataclasses
import json
from functools import lru_cache
from pathlib import Path

from bridge.models.gpt_provider import GPTModelProvider
from bridge.models.hf_translation import common, read, registry, vlm, write
from bridge.models.vlm_provider import VLMModelProvider


@lru_cache(maxsize=8)
def _fields(path: str) -> tuple[tuple[str, object], ...]:
    # what AutoBridge.from_hf_pretrained reads, without importing torch (the dry run stays light)

    config = common.read_config_json(Path(path) / "config.json")
    merged = registry.with_class_defaults(config)
    if merged is None:  # a model type without recorded defaults: transformers reads it
        # an architecture bridge cannot convert is refused first (transformers may not know it either,
        # and would raise its own error with a traceback)
        registry.hf_family_for(config.get("architectures"))
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(str(path))
    else:
        config = merged
    family = registry.hf_family_for(common.get(config, "architectures"))
    vlm_config = None
    if family.text_config_key is not None:  # a vision-language model: its language model's fields
        extra = vlm.vlm_fields(config, family)
        config, family, vlm_config = vlm.split(config, family)
    fields = read.provider_fields(config, family)
    if vlm_config is not None:
        fields |= extra
    math = {k: v for k, v in fields.items() if k not in write.NOT_MATH}
    defaults = {f.name: f.default for f in dataclasses.fields(GPTModelProvider)}
    for name in read.OPTIONAL_MATH_FIELDS:  # absent from this config.json: the provider's default
        if name not in math and name in defaults:
            math[name] = defaults[name]
    if vlm_config is not None:  # the image side, as JSON text: the cached value stays immutable
        math["vlm_config"] = json.dumps(vlm_config)
    return tuple(math.items())


def _as_declared(name: str, value: object) -> object:
    """The value in the provider field's declared type where that is exact (config.json writes
    rope_theta 10000.0 for an int field): the config tree type-checks every field."""
    declared = _DECLARED.get(name, "")
    if isinstance(value, tuple):
        return list(value)
    if declared.startswith("int") and isinstance(value, float) and value.is_integer():
        return int(value)
    return value


_DECLARED = {f.name: str(f.type) for f in dataclasses.fields(GPTModelProvider)}


def architecture_fields(path: str) -> dict[str, object]:
    """The model fields config.json fixes (the weights' shapes and the model's function)."""
    fields = {k: _as_declared(k, v) for k, v in _fields(str(path))}
    if "vlm_config" in fields:
        fields["vlm_config"] = json.loads(fields["vlm_config"])
    return fields


def model_from_hf(model: GPTModelProvider, path: str) -> GPTModelProvider:
    """A copy of `model` (the recipe's: parallel sizes, seq_length, recompute, ...) with the folder's
    architecture. Its vocabulary is not padded (the folder holds exactly vocab_size rows, and padding
    rows would enter Megatron-Core's softmax); an override of model.should_pad_vocab still wins."""
    fields = architecture_fields(path)
    if "vlm_config" in fields and not isinstance(model, VLMModelProvider):  # a text recipe's model section
        base = {f.name: getattr(model, f.name) for f in dataclasses.fields(GPTModelProvider)}
        model = VLMModelProvider(**base)
    return dataclasses.replace(model, **fields, should_pad_vocab=False)


def check_supported(architecture: str) -> None:
    """ConfigError, listing the supported architectures, unless `architecture` is one of them."""
    registry.hf_family_for([architecture])


def check_expressible(model: GPTModelProvider, architecture: str) -> None:
    """ConfigError unless the (supported) `architecture` can write `model` as its config.json."""
    write.hf_config_dict(model, registry.hf_family_for([architecture]), architecture)


def supported_architectures() -> list[str]:
    """The Hugging Face architecture names a folder or config.json can have."""
    return registry.supported_architectures()
