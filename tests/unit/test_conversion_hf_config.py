"""HF config -> GPTModelProvider fields (transformers 5 configs and 4.x-style dicts)."""

from __future__ import annotations

import pytest

from bridge.conversion.hf_config import provider_fields
from bridge.conversion.registry import family_for
from bridge.errors import ConfigError


def fields_of(config):
    archs = config["architectures"] if isinstance(config, dict) else config.architectures
    return provider_fields(config, family_for(archs))


def test_llama31_style_rope_scaling_and_gqa():
    from transformers import LlamaConfig

    cfg = LlamaConfig(
        hidden_size=256,
        num_attention_heads=8,
        num_key_value_heads=2,
        intermediate_size=512,
        num_hidden_layers=3,
        vocab_size=1000,
        rms_norm_eps=1e-5,
        max_position_embeddings=4096,
        rope_scaling={
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 2048,
        },
        rope_theta=500000.0,
        tie_word_embeddings=True,
        architectures=["LlamaForCausalLM"],
        dtype="bfloat16",
    )
    f = fields_of(cfg)
    assert (f["num_layers"], f["hidden_size"], f["ffn_hidden_size"]) == (3, 256, 512)
    assert (f["num_attention_heads"], f["num_query_groups"], f["kv_channels"]) == (8, 2, 32)
    assert (f["rotary_base"], f["rope_scaling"], f["rope_scaling_factor"]) == (500000.0, True, 8.0)
    assert f["rope_scaling_original_max_position_embeddings"] == 2048
    assert f["layernorm_epsilon"] == 1e-5 and f["normalization"] == "RMSNorm"
    assert f["share_embeddings_and_output_weights"] and f["vocab_size"] == 1000
    assert (f["params_dtype"], f["bf16"]) == ("bf16", True)
    assert not f["add_qkv_bias"] and not f["qk_layernorm"] and "num_moe_experts" not in f


def test_transformers_4_style_dict():
    cfg = {
        "architectures": ["MistralForCausalLM"],
        "model_type": "mistral",
        "hidden_size": 64,
        "num_attention_heads": 4,
        "num_key_value_heads": 1,
        "intermediate_size": 96,
        "num_hidden_layers": 2,
        "vocab_size": 100,
        "rms_norm_eps": 1e-6,
        "max_position_embeddings": 128,
        "rope_theta": 1e6,
        "sliding_window": 32,
        "hidden_act": "silu",
        "torch_dtype": "float16",
    }
    f = fields_of(cfg)
    assert f["rotary_base"] == 1e6 and f["window_size"] == [31, 0] and f["params_dtype"] == "fp16"
    assert "rope_scaling" not in f


def test_family_specific_fields():
    from transformers import MixtralConfig, Qwen2Config, Qwen3Config, Qwen3MoeConfig

    assert fields_of(Qwen2Config(architectures=["Qwen2ForCausalLM"]))["add_qkv_bias"]
    q3 = fields_of(
        Qwen3Config(
            architectures=["Qwen3ForCausalLM"], head_dim=128, hidden_size=1024, num_attention_heads=16
        )
    )
    assert q3["qk_layernorm"] and q3["kv_channels"] == 128
    mx = fields_of(
        MixtralConfig(
            architectures=["MixtralForCausalLM"],
            num_local_experts=8,
            num_experts_per_tok=2,
            router_jitter_noise=0.1,
            router_aux_loss_coef=0.02,
            intermediate_size=300,
        )
    )
    assert (mx["num_moe_experts"], mx["moe_router_topk"], mx["moe_ffn_hidden_size"]) == (8, 2, 300)
    assert mx["moe_router_pre_softmax"] is False and mx["moe_input_jitter_eps"] == 0.1
    assert mx["moe_aux_loss_coeff"] == 0.02 and mx["moe_router_score_function"] == "softmax"
    qm = fields_of(
        Qwen3MoeConfig(
            architectures=["Qwen3MoeForCausalLM"],
            num_experts=16,
            num_experts_per_tok=4,
            moe_intermediate_size=48,
            norm_topk_prob=True,
        )
    )
    assert qm["moe_router_pre_softmax"] is False and qm["moe_ffn_hidden_size"] == 48 and qm["qk_layernorm"]
    qm = fields_of(Qwen3MoeConfig(architectures=["Qwen3MoeForCausalLM"], norm_topk_prob=False))
    assert qm["moe_router_pre_softmax"] is True


@pytest.mark.parametrize(
    "change, message",
    [
        ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, "only 'default' and 'llama3'"),
        ({"hidden_act": "gelu"}, "hidden_act='gelu'"),
        ({"mlp_bias": True}, "mlp_bias=True"),
        ({"attention_bias": True}, "attention_bias=True"),
    ],
)
def test_settings_the_provider_cannot_express_are_refused(change, message):
    cfg = {
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": 64,
        "num_attention_heads": 4,
        "intermediate_size": 96,
        "num_hidden_layers": 2,
        "vocab_size": 100,
        "rms_norm_eps": 1e-6,
        "max_position_embeddings": 128,
        **change,
    }
    with pytest.raises(ConfigError, match=message):
        fields_of(cfg)


def test_partially_dense_moe_is_refused():
    from transformers import Qwen3MoeConfig

    with pytest.raises(ConfigError, match="mlp_only_layers"):
        fields_of(Qwen3MoeConfig(architectures=["Qwen3MoeForCausalLM"], mlp_only_layers=[0]))


@pytest.mark.parametrize("family", ["llama", "qwen2", "qwen3", "mistral", "mixtral", "qwen3_moe"])
def test_provider_to_config_json_and_back(family):
    import transformers

    from bridge.conversion.hf_config import hf_config_dict
    from bridge.models.gpt_provider import GPTModelProvider
    from tests.functional.workers.convert_models import make_hf_config

    hf = make_hf_config(family)
    fam = family_for(hf.architectures)
    fields = provider_fields(hf, fam)
    provider = GPTModelProvider(**fields)
    written = hf_config_dict(provider, fam, hf.architectures[0])
    # transformers reads what we wrote, and it translates back to the same provider
    reread = getattr(transformers, type(hf).__name__)(**written)
    assert provider_fields(reread, fam) == fields


def test_provider_the_architecture_cannot_express_is_refused():
    from bridge.conversion.hf_config import hf_config_dict
    from bridge.models.gpt_provider import GPTModelProvider
    from tests.functional.workers.convert_models import make_hf_config

    hf = make_hf_config("llama")
    fam = family_for(hf.architectures)
    provider = GPTModelProvider(**{**provider_fields(hf, fam), "qk_layernorm": True})
    with pytest.raises(
        ConfigError, match="model.qk_layernorm=True: a LlamaForCausalLM checkpoint cannot express it"
    ):
        hf_config_dict(provider, fam, "LlamaForCausalLM")


_ARCH = {
    "llama": "LlamaForCausalLM",
    "mistral": "MistralForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "mixtral": "MixtralForCausalLM",
    "qwen3_moe": "Qwen3MoeForCausalLM",
}


@pytest.mark.parametrize("model_type", list(_ARCH))
def test_config_json_without_transformers_reads_like_autoconfig(model_type, tmp_path):
    """config.json read as JSON + CLASS_DEFAULTS gives the provider transformers' AutoConfig gives."""
    import json

    from transformers import AutoConfig

    from bridge.conversion.hf_config import CLASS_DEFAULTS, with_class_defaults
    from tests.functional.workers.convert_models import make_hf_config

    cls_defaults = AutoConfig.for_model(model_type)
    for key, value in CLASS_DEFAULTS[model_type].items():
        have = getattr(cls_defaults, key, None)
        if key == "rope_theta":
            have = cls_defaults.rope_parameters["rope_theta"]
        assert have == value, (model_type, key, have, value)
    family = family_for([_ARCH[model_type]])
    full = make_hf_config(next(f for f in _ARCH if f == model_type))
    full.save_pretrained(tmp_path / "full")
    minimal = {"architectures": [_ARCH[model_type]], "model_type": model_type}
    (tmp_path / "minimal").mkdir()
    (tmp_path / "minimal" / "config.json").write_text(json.dumps(minimal))
    for folder in ("full", "minimal"):
        raw = json.loads((tmp_path / folder / "config.json").read_text())
        ours = provider_fields(with_class_defaults(raw), family)
        theirs = provider_fields(AutoConfig.from_pretrained(tmp_path / folder), family)
        assert ours == theirs, (model_type, folder)


def test_malformed_config_json_is_one_error_naming_the_file(tmp_path):
    from bridge import AutoBridge

    (tmp_path / "config.json").write_text('{"architectures": ["LlamaForCausalLM"],\n "hidden_size": 64,,}')
    with pytest.raises(
        ConfigError, match=r"config\.json: not valid JSON \(line 2 column 20: Expecting property name"
    ):
        AutoBridge.from_hf_pretrained(tmp_path)
    (tmp_path / "config.json").write_text("[1, 2]")
    with pytest.raises(ConfigError, match=r"config\.json: a config.json holds a JSON object"):
        AutoBridge.from_hf_pretrained(tmp_path)
