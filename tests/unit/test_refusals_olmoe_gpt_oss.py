"""Config.json settings of the OLMoE and GPT-OSS families that Megatron-Core cannot compute as
transformers does: each is one ConfigError naming the HF field, never a model computing something else."""

import pytest

from bridge.errors import ConfigError
from tests.functional.workers.convert_models import make_hf_config

pytest.importorskip("transformers")


def fields_of(config):
    from bridge.conversion.registry import family_for
    from bridge.models.hf_translation.read import provider_fields

    if isinstance(config, dict):
        return provider_fields(config, family_for(config["architectures"]))
    return provider_fields(config, family_for(config.architectures))


_YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16, "rope_theta": 1e4}


@pytest.mark.parametrize(
    "family,change,message",
    [
        ("olmoe", dict(clip_qkv=8.0), "clip_qkv=8.0"),
        ("olmoe", dict(mlp_only_layers=[1]), r"mlp_only_layers=\[1\]"),
        ("olmoe", dict(decoder_sparse_step=2), "decoder_sparse_step=2"),
        ("gpt_oss", dict(swiglu_alpha=1.5), "swiglu_alpha=1.5: Megatron-Core's quick_gelu GLU"),
        ("gpt_oss", dict(attention_bias=False), "attention_bias=False"),
        ("gpt_oss", dict(rope_parameters={"rope_type": "linear", "factor": 2.0}), "rope_type='linear'"),
        ("gpt_oss", dict(rope_parameters={**_YARN, "partial_rotary_factor": 0.5}), "partial_rotary_factor"),
        ("gpt_oss", dict(rope_parameters={**_YARN, "attention_factor": 2.0}), "attention_factor=2.0"),
    ],
)
def test_refused(family, change, message):
    with pytest.raises(ConfigError, match=message):
        fields_of(make_hf_config(family, **change))


def test_gpt_oss_quantized_checkpoint_is_refused():
    config = make_hf_config("gpt_oss").to_dict() | {"quantization_config": {"quant_method": "mxfp4"}}
    with pytest.raises(ConfigError, match="quantization_config='mxfp4'.*bf16 checkpoint"):
        fields_of(config)


def test_gpt_oss_reads_yarn_sinks_windows_and_the_clamped_glu():
    fields = fields_of(make_hf_config("gpt_oss"))
    assert fields["position_embedding_type"] == "yarn" and fields["softmax_type"] == "learnable"
    assert (fields["yarn_rotary_scaling_factor"], fields["yarn_original_max_position_embeddings"]) == (
        4.0,
        16,
    )
    assert fields["yarn_correction_range_round_to_int"] is False  # truncate false
    assert (fields["yarn_mscale"], fields["yarn_mscale_all_dim"]) == (None, None)  # 0.1 ln(factor) + 1
    assert (fields["window_size"], fields["window_attn_skip_freq"]) == (
        [5, 0],
        2,
    )  # layer 1 (1-based) windowed
    assert (
        fields["activation_func"],
        fields["activation_func_clamp_value"],
        fields["glu_linear_offset"],
    ) == (
        "quick_gelu",
        0.5,
        1.0,
    )
    assert fields["add_bias_linear"] and fields["moe_router_pre_softmax"] is False  # top-k, then softmax
    plain = fields_of(make_hf_config("gpt_oss", rope_parameters={"rope_type": "default", "rope_theta": 1e4}))
    assert plain["position_embedding_type"] == "rope"


def test_olmoe_reads_its_published_routing():
    fields = fields_of(make_hf_config("olmoe"))
    assert fields["moe_router_pre_softmax"] is True  # softmax over all experts, top-k not renormalised
    assert (fields["qk_layernorm"], fields["qk_layernorm_scope"]) == (True, "projection")
    assert "moe_layer_freq" not in fields  # every layer MoE
