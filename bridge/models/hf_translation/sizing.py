"""config.json -> the ModelShape the planner counts, through the provider the translation makes.

Sizes only: RoPE settings (which never change a size) are left out, and a family whose translation
refuses configs it can still size (a routing Megatron-Core computes differently) declares
`sizing_fields`. A model type no family registers is read by the generic rules as a plain decoder:
its activation gates the MLP when it is SwiGLU, attention_bias gives q/k/v biases.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from bridge.models.hf_translation.common import BASE_DEFAULTS, get
from bridge.models.hf_translation.read import provider_fields
from bridge.models.hf_translation.registry import HfFamily, hf_families
from bridge.models.hf_translation.rules import FamilyRules
from bridge.models.provider_kinds import class_of_fields
from bridge.parallel.layout import ModelShape

_ROPE_KEYS = ("rope_scaling", "rope_parameters")
_GATED_ACTIVATIONS = ("silu", "swish", "swiglu")
# Stands in for a missing context length: the planner plans for --seq-length, never the model's window.
_ANY_CONTEXT = 4096


def _plain_decoder(cfg: dict[str, Any]) -> HfFamily:
    def mlp_fields(c: Any) -> dict[str, Any]:
        return {"gated_linear_unit": get(c, "hidden_act", "silu") in _GATED_ACTIVATIONS}

    rules = FamilyRules(own_activation=True, provider_fields=mlp_fields)
    model_type = str(cfg.get("model_type", ""))
    return HfFamily("decoder", model_type, {"add_qkv_bias": bool(cfg.get("attention_bias", False))}, rules)


def sizing_provider_fields(cfg: dict[str, Any]) -> dict[str, Any]:
    """The provider fields of config.json `cfg` that the sizes follow from."""
    family = hf_families().get(cfg.get("model_type")) or _plain_decoder(cfg)
    rules = family.hf_config
    defaults = rules.class_defaults.get(family.model_type, BASE_DEFAULTS)
    full = {"max_position_embeddings": _ANY_CONTEXT, **defaults, **cfg}
    for key in _ROPE_KEYS:
        full.pop(key, None)
    if rules.sizing_fields is not None:
        # no linear biases unless the family's fields say so, as the translation's base fields
        return {"add_bias_linear": False} | rules.sizing_fields(full) | family.provider_fields
    return provider_fields(full, family)


def model_shape(cfg: dict[str, Any]) -> ModelShape:
    """The ModelShape of config.json `cfg` (no seq_length: a config's context is not a training length)."""
    fields = sizing_provider_fields(cfg)
    return replace(class_of_fields(fields)(**fields).model_shape(), seq_length=None)
