"""Start a run from a Hugging Face model folder: `checkpoint.pretrained_checkpoint=HF_DIR`.

The model section takes every architecture field from the folder's config.json (what
`AutoBridge.to_megatron_provider` reads; training choices such as seq_length, dropout and dtypes stay
the recipe's), command-line overrides apply on top (bridge.config.compose), validation refuses an
override that contradicts the weights (bridge.config.finetune_rules.check_hf_start), and the weights
stream in through AutoBridge on every rank for its own shards while the model is built.
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache

from bridge.models.gpt_provider import GPTModelProvider


@lru_cache(maxsize=8)
def _fields(path: str) -> tuple[tuple[str, object], ...]:
    # what AutoBridge.from_hf_pretrained reads, without importing torch (the dry run stays light)
    from pathlib import Path

    from bridge.conversion import registry
    from bridge.models.hf_translation import common, read, write
    from bridge.models.hf_translation import registry as hf_registry

    config = common.read_config_json(Path(path) / "config.json")
    merged = hf_registry.with_class_defaults(config)
    if merged is None:  # a model type without recorded defaults: transformers reads it
        from bridge.conversion.auto_bridge import AutoBridge

        fields = AutoBridge.from_hf_pretrained(path)._provider_fields
    else:
        fields = read.provider_fields(merged, registry.family_for(merged.get("architectures")))
    math = {k: v for k, v in fields.items() if k not in write.NOT_MATH}
    defaults = {f.name: f.default for f in dataclasses.fields(GPTModelProvider)}
    for name in read.OPTIONAL_MATH_FIELDS:  # absent from this config.json: the provider's default
        if name not in math and name in defaults:
            math[name] = defaults[name]
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
    return {k: _as_declared(k, v) for k, v in _fields(str(path))}


def model_from_hf(model: GPTModelProvider, path: str) -> GPTModelProvider:
    """A copy of `model` (the recipe's: parallel sizes, seq_length, recompute, ...) with the folder's
    architecture."""
    return dataclasses.replace(model, **architecture_fields(path))


def stream_hf_weights(provider: GPTModelProvider, path: str) -> None:
    """Load the folder's safetensors into each chunk as it is built (this rank's shards only)."""
    from bridge.conversion.auto_bridge import AutoBridge

    provider.register_post_build_hook(
        AutoBridge.from_hf_pretrained(path).load_hf_weights, replaces_weights=True
    )
