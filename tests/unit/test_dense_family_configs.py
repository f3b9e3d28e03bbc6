"""The config.json rules of the dense families with their own keys and defaults: Nemotron's and
StarCoder2's epsilon keys, Nemotron's and GLM-4's default half rotary, Gemma's legacy activation, and
what each refuses (one ConfigError naming the HF field)."""

from __future__ import annotations

import pytest

from bridge.conversion.registry import family_for
from bridge.errors import ConfigError
from bridge.models.hf_translation.read import provider_fields
from bridge.models.hf_translation.registry import with_class_defaults


def fields_of(config):
    archs = config["architectures"] if isinstance(config, dict) else config.architectures
    return provider_fields(config, family_for(archs))


def test_dense_families_norm_keys_rotary_defaults_and_activations():
    """Nemotron / StarCoder2 read their own epsilon keys; Nemotron and GLM-4 rotate half of each head when
    the config names no share (their config classes' default); Gemma reads the legacy "gelu" as tanh GELU."""
    from transformers import Glm4Config, NemotronConfig

    nemotron = fields_of(NemotronConfig(architectures=["NemotronForCausalLM"], norm_eps=3e-5))
    assert (nemotron["layernorm_epsilon"], nemotron["rotary_percent"]) == (3e-5, 0.5)
    assert (nemotron["normalization"], nemotron["activation_func"], nemotron["gated_linear_unit"]) == (
        "LayerNorm", "squared_relu", False,
    )  # fmt: skip
    raw = {"architectures": ["NemotronForCausalLM"], "model_type": "nemotron"}
    assert fields_of(with_class_defaults(raw))["rotary_percent"] == 0.5
    assert fields_of(Glm4Config(architectures=["Glm4ForCausalLM"]))["rotary_percent"] == 0.5
    coder = fields_of(
        with_class_defaults(
            {"architectures": ["Starcoder2ForCausalLM"], "model_type": "starcoder2", "norm_epsilon": 2e-5}
        )
    )
    assert (coder["layernorm_epsilon"], coder["add_bias_linear"], coder["activation_func"]) == (
        2e-5,
        True,
        "gelu_tanh",
    )
    gemma = fields_of(
        with_class_defaults(
            {"architectures": ["GemmaForCausalLM"], "model_type": "gemma", "hidden_act": "gelu"}
        )
    )
    assert (gemma["activation_func"], gemma["gated_linear_unit"]) == ("gelu_tanh", True)


@pytest.mark.parametrize(
    "architecture, change, message",
    [
        ("GemmaForCausalLM", {"hidden_act": "silu"}, "hidden_act='silu': Gemma's GeGLU"),
        ("GemmaForCausalLM", {"attention_bias": True}, "attention_bias=True"),
        ("Glm4ForCausalLM", {"attention_bias": False}, "attention_bias=False: the GLM-4 mapping"),
        ("NemotronForCausalLM", {"hidden_act": "gelu"}, "hidden_act='gelu': Nemotron's MLP"),
        ("NemotronForCausalLM", {"mlp_bias": True}, "mlp_bias=True"),
        ("Starcoder2ForCausalLM", {"use_bias": False}, "use_bias=False: the StarCoder2 mapping"),
        ("Starcoder2ForCausalLM", {"hidden_act": "gelu"}, "hidden_act='gelu': StarCoder2's MLP"),
    ],
)
def test_dense_family_settings_the_mapping_cannot_express_are_refused(architecture, change, message):
    model_type = {"GemmaForCausalLM": "gemma", "Glm4ForCausalLM": "glm4"}.get(architecture)
    model_type = model_type or architecture.removesuffix("ForCausalLM").lower()
    with pytest.raises(ConfigError, match=message):
        fields_of(with_class_defaults({"architectures": [architecture], "model_type": model_type, **change}))
