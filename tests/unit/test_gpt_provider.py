"""GPTModelProvider: pure-data behaviour (no torch) and, further down, building real Megatron-Core models."""

import dataclasses
import subprocess
import sys

import pytest

from bridge.errors import ConfigError
from bridge.models import PRESETS, GPTModelProvider, preset


def tiny(**overrides) -> GPTModelProvider:
    fields = dict(
        num_layers=2,
        hidden_size=64,
        ffn_hidden_size=128,
        num_attention_heads=4,
        num_query_groups=2,
        vocab_size=100,
        seq_length=16,
        make_vocab_size_divisible_by=8,
        normalization="RMSNorm",
        activation_func="silu",
        gated_linear_unit=True,
        add_bias_linear=False,
        position_embedding_type="rope",
        hidden_dropout=0.0,
        attention_dropout=0.0,
    )
    fields.update(overrides)
    return GPTModelProvider(**fields)


# ---- pure data -------------------------------------------------------------------------------------


def test_import_build_override_validate_serialise_imports_neither_torch_nor_megatron():
    code = (
        "import sys, dataclasses, bridge.models.gpt_provider as m\n"
        "from bridge.models import preset\n"
        "p = m.GPTModelProvider()\n"
        "q = preset('qwen3_30b_a3b'); q.tensor_model_parallel_size = 2; q.sequence_parallel = True\n"
        "q.finalize(); q.padded_vocab_size(); q.layout(8)\n"
        "from omegaconf import OmegaConf\n"
        "OmegaConf.to_yaml(OmegaConf.structured(q))\n"
        "bad = [n for n in ('torch', 'megatron', 'megatron.core') if n in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_unknown_field_fails_with_suggestion():
    provider = GPTModelProvider()
    with pytest.raises(ConfigError, match="num_layer.*did you mean num_layers"):
        provider.num_layer = 4
    with pytest.raises(TypeError):
        GPTModelProvider(num_layer=4)


def test_any_transformer_config_field_can_be_set_by_name():
    provider = tiny(moe_router_score_function="sigmoid", recompute_granularity="full", window_size=[4, 0])
    assert provider.moe_router_score_function == "sigmoid"
    assert provider.megatron_value("window_size") == (4, 0)


def test_yaml_round_trip_is_lossless():
    from omegaconf import OmegaConf

    for name in PRESETS:
        original = preset(name)
        text = OmegaConf.to_yaml(OmegaConf.structured(original))
        merged = OmegaConf.merge(OmegaConf.structured(GPTModelProvider), OmegaConf.create(text))
        assert OmegaConf.to_object(merged) == original, name


def test_omegaconf_type_checks_values():
    from omegaconf import OmegaConf
    from omegaconf.errors import ValidationError

    cfg = OmegaConf.structured(tiny())
    with pytest.raises(ValidationError):
        cfg.num_layers = "two"


@pytest.mark.parametrize(
    "overrides, field",
    [
        (dict(num_layers=0), "num_layers"),
        (dict(hidden_size=66), "hidden_size"),
        (dict(num_query_groups=3), "num_query_groups"),
        (dict(activation_func="swish"), "activation_func"),
        (dict(normalization="BatchNorm"), "normalization"),
        (dict(params_dtype="bfloat16"), "params_dtype"),
        (dict(recompute_granularity="everything"), "recompute_granularity"),
        (dict(position_embedding_type="alibi"), "position_embedding_type"),
        (dict(fp16=True, bf16=True), "fp16"),
        (dict(rope_scaling=True, position_embedding_type="learned_absolute"), "rope_scaling"),
        (dict(rope_scaling=True, rope_scaling_low_freq_factor=4.0), "rope_scaling_low_freq_factor"),
        (dict(num_moe_experts=0), "num_moe_experts"),
        (dict(num_moe_experts=4, moe_router_topk=5), "moe_router_topk"),
        (dict(attention_backend="magic"), "attention_backend"),
    ],
)
def test_finalize_rejects_bad_fields_naming_field_and_fix(overrides, field):
    with pytest.raises(ConfigError, match=rf"model\.{field}=.*Fix: "):
        tiny(**overrides).finalize()


def test_kv_channels_allows_heads_not_dividing_hidden():
    tiny(hidden_size=66, kv_channels=16).finalize()


def test_padded_vocab_size_follows_megatron_rule():
    # 100 rounded up to a multiple of 8 * tp.
    assert tiny().padded_vocab_size() == 104
    assert tiny(tensor_model_parallel_size=2).padded_vocab_size() == 112
    assert tiny(make_vocab_size_divisible_by=1).padded_vocab_size() == 100
    assert preset("llama32_1b").padded_vocab_size() == 128256
    with pytest.raises(ConfigError, match="vocab_size"):
        tiny(vocab_size=None).padded_vocab_size()


def test_model_shape_and_layout():
    p = preset("qwen3_30b_a3b")
    shape = p.model_shape()
    assert (shape.num_layers, shape.num_attention_heads, shape.num_query_groups) == (48, 32, 4)
    assert (shape.num_moe_experts, shape.moe_router_topk, shape.moe_ffn_hidden_size) == (128, 8, 768)
    assert shape.kv_channels == 128 and shape.qk_layernorm
    p.tensor_model_parallel_size = 2
    p.sequence_parallel = True
    p.expert_model_parallel_size = 8
    layout = p.layout(8)
    assert (layout.tp, layout.ep, layout.etp, layout.dp, layout.edp) == (2, 8, 1, 4, 1)
    # ETP None is Megatron-Core's "same as TP".
    p.expert_tensor_parallel_size = None
    p.expert_model_parallel_size = 4
    assert p.layout(8).etp == 2
    # Layout rules come from bridge.parallel.layout: MoE with TP>1 needs sequence parallelism.
    p.sequence_parallel = False
    with pytest.raises(ConfigError, match="sequence_parallel"):
        p.layout(8)


def test_ffn_hidden_size_none_follows_transformer_config_rule():
    p = tiny(ffn_hidden_size=None)
    assert p.model_shape().ffn_hidden_size == 4 * 64


def test_provider_is_a_plain_dataclass_copy():
    p = preset("llama31_8b")
    q = dataclasses.replace(p, num_layers=2)
    assert q.num_layers == 2 and p.num_layers == 32
