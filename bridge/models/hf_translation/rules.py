"""The hooks a family folder's `hf_config.py` declares, read into one typed object.

Every hook is optional; the generic translator (`read`, `write`, `sizing`) branches on which ones a
family declares, never on its name. Module attributes of `bridge/models/<family>/hf_config.py`:

data
  CLASS_DEFAULTS    {model_type: {field: transformers' class default}} for the fields the translation
                    reads whose default is not derived from other fields (a config.json is read as JSON
                    with these; transformers is imported only for a model type missing from every family)
  OWN_ACTIVATION    True: the family reads its activation itself (the generic silu check is skipped)
  OWN_ATTENTION_BIAS  True: the family reads attention_bias itself (a switch for q/k/v biases, set by
                    its provider_fields), so the generic refusal of attention biases is skipped
  ROPE_TYPE_NOTES   {rope_type: (why, fix)}: what the generic RoPE refusal adds for those rope types
  NORM_EPS_KEY      the config key of the norms' epsilon, read and written (default "rms_norm_eps")
  PARTIAL_ROTARY_DEFAULT  the share of each head RoPE rotates when the config names no
                    partial_rotary_factor (the config class's default; 1.0 unless declared)
functions (cfg: a config.json dict or a PretrainedConfig; p: a GPTModelProvider)
  check(cfg)              extra refusals, before anything is read
  rope_fields(cfg)        replaces the generic RoPE translation (one RoPE for every layer)
  provider_fields(cfg)    extra provider fields, after the generic ones
  translate(cfg, base)    replaces everything past the common sizes, norms and dtype (`base`)
  sizing_fields(cfg)      the provider fields the planner sizes a config.json with, without the
                          refusals of `translate` that leave the sizes alone (default: the translation)
  hf_fields(p)            extra config.json keys, after the generic ones
  moe_hf_fields(p)        replaces the generic expert keys of config.json
  config_dict(p, model_type, architecture)  replaces the generic size and expert keys of config.json
  text_config(cfg)        a vision-language family that splits its config.json itself (a flat layout,
                          a language model of its own model type): (the language model's config in its
                          text family's terms, vlm_config: the rest); the VLM's own
                          provider_fields(cfg) (the whole config) add what that family does not read
  mtp_hf_tensors(cfg, names, keep)  the checkpoint tensors of the multi-token-prediction layers of
                          depth >= keep (left out, listed, when a model is built with mtp_num_layers=keep
                          below the checkpoint's count)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Protocol

Fields = dict[str, Any]


@dataclass(frozen=True)
class FamilyRules:
    """A family's config.json knowledge (see the module docstring for each hook)."""

    module: str | None = None  # the hf_config module they come from (None: the generic rules only)
    class_defaults: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    own_activation: bool = False
    own_attention_bias: bool = False
    rope_type_notes: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    norm_eps_key: str = "rms_norm_eps"
    partial_rotary_default: float = 1.0
    check: Callable[[Any], None] | None = None
    rope_fields: Callable[[Any], Fields] | None = None
    provider_fields: Callable[[Any], Fields] | None = None
    translate: Callable[[Any, Fields], Fields] | None = None
    sizing_fields: Callable[[Any], Fields] | None = None
    hf_fields: Callable[[Any], Fields] | None = None
    moe_hf_fields: Callable[[Any], Fields] | None = None
    config_dict: Callable[[Any, str, str], Fields] | None = None
    mtp_hf_tensors: Callable[[Any, set[str], int], set[str]] | None = None
    text_config: Callable[[dict[str, Any]], tuple[dict[str, Any], dict[str, Any]]] | None = None

    @classmethod
    def from_module(cls, module: ModuleType) -> FamilyRules:
        hooks = (
            "check",
            "rope_fields",
            "provider_fields",
            "translate",
            "sizing_fields",
            "hf_fields",
            "moe_hf_fields",
            "config_dict",
            "mtp_hf_tensors",
            "text_config",
        )
        return cls(
            module=module.__name__,
            class_defaults=dict(getattr(module, "CLASS_DEFAULTS", {})),
            own_activation=bool(getattr(module, "OWN_ACTIVATION", False)),
            own_attention_bias=bool(getattr(module, "OWN_ATTENTION_BIAS", False)),
            rope_type_notes=dict(getattr(module, "ROPE_TYPE_NOTES", {})),
            norm_eps_key=str(getattr(module, "NORM_EPS_KEY", "rms_norm_eps")),
            partial_rotary_default=float(getattr(module, "PARTIAL_ROTARY_DEFAULT", 1.0)),
            **{name: getattr(module, name, None) for name in hooks},
        )

    def mtp_tensors(self, cfg: Any, names: set[str], keep: int) -> set[str]:
        """The checkpoint's MTP-layer tensors of depth >= keep (none unless the family declares MTP layers)."""
        return set() if self.mtp_hf_tensors is None else set(self.mtp_hf_tensors(cfg, names, keep))


class TranslatedFamily(Protocol):
    """What the translator needs of a family (conversion's registry Family and `registry.HfFamily`)."""

    @property
    def name(self) -> str: ...

    @property
    def model_type(self) -> str: ...

    @property
    def provider_fields(self) -> dict: ...

    @property
    def hf_config(self) -> FamilyRules: ...
