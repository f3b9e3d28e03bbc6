"""HF config -> GPTModelProvider fields (transformers 5 configs and 4.x-style dicts)."""

from __future__ import annotations

import pytest

from bridge.conversion.registry import family_for
from bridge.errors import ConfigError
from bridge.models.hf_translation.read import provider_fields
from tests.functional.workers.convert_models import FAMILIES as TINY_MODELS


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


def test_partially_dense_moe_maps_onto_a_moe_layer_freq_list():
    from transformers import Qwen2MoeConfig, Qwen3MoeConfig

    f = fields_of(
        Qwen3MoeConfig(architectures=["Qwen3MoeForCausalLM"], num_hidden_layers=4, mlp_only_layers=[0])
    )
    assert (
        f["moe_layer_freq"] == [0, 1, 1, 1] and f["ffn_hidden_size"] == 6144
    )  # dense layers: intermediate_size
    # HF decoder_sparse_step N: MoE where (layer + 1) % N == 0 (Megatron's integer N would start with MoE)
    f = fields_of(
        Qwen2MoeConfig(architectures=["Qwen2MoeForCausalLM"], num_hidden_layers=4, decoder_sparse_step=2)
    )
    assert f["moe_layer_freq"] == [0, 1, 0, 1]
    f = fields_of(Qwen3MoeConfig(architectures=["Qwen3MoeForCausalLM"], num_hidden_layers=4))
    assert "moe_layer_freq" not in f  # every layer MoE: the provider's default (1)


@pytest.mark.parametrize(
    "change, message",
    [
        (
            {"mlp_only_layers": [0, 1]},
            r"decoder_sparse_step/mlp_only_layers=\(1, \[0, 1\]\): leave no MoE layer",
        ),
        (
            {"mlp_only_layers": [2]},
            r"mlp_only_layers=\[2\]: holds \[2\], not layer indices of a 2-layer model",
        ),
        ({"decoder_sparse_step": 0}, r"decoder_sparse_step=0: must be a positive integer"),
    ],
)
def test_moe_layer_patterns_that_cannot_be_built_are_refused(change, message):
    from transformers import Qwen3MoeConfig

    cfg = Qwen3MoeConfig(architectures=["Qwen3MoeForCausalLM"], num_hidden_layers=2).to_dict()
    with pytest.raises(ConfigError, match=message):
        fields_of({**cfg, **change})


def test_qwen2_moe_gated_shared_expert_and_biases():
    from transformers import Qwen2MoeConfig

    f = fields_of(Qwen2MoeConfig(architectures=["Qwen2MoeForCausalLM"], shared_expert_intermediate_size=96))
    assert f["moe_shared_expert_intermediate_size"] == 96 and f["moe_shared_expert_gate"] is True
    assert f["add_qkv_bias"] and f["moe_router_pre_softmax"] is True  # norm_topk_prob defaults to False
    assert "window_size" not in f  # sliding_window only acts with use_sliding_window
    cfg = Qwen2MoeConfig(architectures=["Qwen2MoeForCausalLM"]).to_dict()
    with pytest.raises(
        ConfigError, match=r"HF config qkv_bias=False: the qwen2_moe mapping has q/k/v biases"
    ):
        fields_of({**cfg, "qkv_bias": False})
    with pytest.raises(ConfigError, match=r"shared_expert_intermediate_size=0: Qwen2-MoE builds a shared"):
        fields_of({**cfg, "shared_expert_intermediate_size": 0})


def test_qwen2_moe_is_refused_where_megatron_core_lacks_the_shared_expert_gate(monkeypatch):
    from transformers import Qwen2MoeConfig

    from bridge.models import transformer_fields

    without = tuple(f for f in transformer_fields.AVAILABLE_FIELDS if f != "moe_shared_expert_gate")
    monkeypatch.setattr(transformer_fields, "AVAILABLE_FIELDS", without)
    with pytest.raises(
        ConfigError, match=r"needs TransformerConfig.moe_shared_expert_gate, which megatron-core"
    ):
        fields_of(Qwen2MoeConfig(architectures=["Qwen2MoeForCausalLM"]))


def test_olmo2_post_norms_and_projection_qk_norms():
    from tests.functional.workers.convert_models import make_hf_config

    f = fields_of(make_hf_config("olmo2"))
    assert (f["layernorm_placement"], f["qk_layernorm"], f["qk_layernorm_scope"]) == (
        "post",
        True,
        "projection",
    )
    with pytest.raises(
        ConfigError, match=r"HF config attention_bias=True: the olmo2 mapping has no attention"
    ):
        fields_of(make_hf_config("olmo2", attention_bias=True))


def test_gemma2_fields_and_refusals():
    from tests.functional.workers.convert_models import make_hf_config

    f = fields_of(make_hf_config("gemma2", num_hidden_layers=4))
    assert f["activation_func"] == "gelu_tanh" and f["gated_linear_unit"]
    assert f["softmax_scale"] == 24**-0.5 and f["kv_channels"] == 32
    assert (f["attn_logit_softcapping"], f["final_logit_softcapping"]) == (2.0, 3.0)
    assert f["window_size"] == [5, 0] and f["window_attn_skip_freq"] == 2  # layers 2 and 4 global
    assert f["layernorm_zero_centered_gamma"] and f["scale_embeddings_by_sqrt_hidden"]
    assert f["layernorm_placement"] == "sandwich" and f["share_embeddings_and_output_weights"]
    three = ["sliding_attention", "sliding_attention", "full_attention"] * 2
    assert (
        fields_of(make_hf_config("gemma2", num_hidden_layers=6, layer_types=three))["window_attn_skip_freq"]
        == 3
    )
    f = fields_of(make_hf_config("gemma2", layer_types=["full_attention"] * 2))
    assert f["window_size"] is None  # no sliding layer
    f = fields_of(make_hf_config("gemma2", attn_logit_softcapping=None, final_logit_softcapping=None))
    assert f["attn_logit_softcapping"] is None and f["final_logit_softcapping"] is None
    odd = ["full_attention", "sliding_attention"]
    with pytest.raises(ConfigError, match=r"HF config layer_types=.*window_attn_skip_freq N"):
        fields_of(make_hf_config("gemma2", layer_types=odd))
    with pytest.raises(ConfigError, match=r"HF config hidden_activation='silu': Gemma 2's GeGLU"):
        fields_of(make_hf_config("gemma2", hidden_activation="silu"))
    with pytest.raises(ConfigError, match=r"HF config use_bidirectional_attention=True"):
        fields_of(make_hf_config("gemma2", use_bidirectional_attention=True))


def test_gemma3_two_ropes_qk_norms_and_refusals():
    from tests.functional.workers.convert_models import make_hf_config

    f = fields_of(make_hf_config("gemma3"))
    assert (f["rotary_base"], f["seq_len_interpolation_factor"], f["local_rotary_base"]) == (500.0, 4.0, 50.0)
    assert f["qk_layernorm"] and "qk_layernorm_scope" not in f and f["layernorm_zero_centered_gamma"]
    assert f["window_size"] == [5, 0] and f["window_attn_skip_freq"] == 2
    assert f["attn_logit_softcapping"] is None and f["final_logit_softcapping"] is None
    # a window no shorter than the positions still marks the local layers (their RoPE differs)
    f = fields_of(make_hf_config("gemma3", sliding_window=64))
    assert f["window_size"] == [63, 0] and f["local_rotary_base"] == 50.0
    f = fields_of(make_hf_config("gemma3", layer_types=["full_attention"] * 2))
    assert f["window_size"] is None and f["local_rotary_base"] is None
    # an older config.json (read as JSON): rope_theta / rope_local_base_freq / rope_scaling, the
    # pattern as sliding_window_pattern
    legacy = {
        "architectures": ["Gemma3ForCausalLM"],
        "model_type": "gemma3_text",
        **{
            k: v
            for k, v in make_hf_config("gemma3").to_dict().items()
            if k not in ("rope_parameters", "layer_types")
        },
        "num_hidden_layers": 12,
        "rope_theta": 1e6,
        "rope_local_base_freq": 1e4,
        "rope_scaling": {"rope_type": "linear", "factor": 8.0},
        "sliding_window_pattern": 6,
    }
    f = fields_of(legacy)
    assert (f["rotary_base"], f["seq_len_interpolation_factor"], f["local_rotary_base"]) == (1e6, 8.0, 1e4)
    assert f["window_attn_skip_freq"] == 6
    f = fields_of(legacy | {"rope_scaling": None})  # gemma-3-1b: no scaling
    assert f["seq_len_interpolation_factor"] is None and f["rotary_percent"] == 1.0
    yarn = {"rope_type": "yarn", "factor": 8.0}
    with pytest.raises(
        ConfigError, match=r"HF config rope_parameters.full_attention.rope_type='yarn': Gemma 3's"
    ):
        fields_of(legacy | {"rope_scaling": yarn})
    with pytest.raises(ConfigError, match=r"HF config sliding_window=None: layer_types has sliding"):
        fields_of(legacy | {"sliding_window": None})


def test_gemma3_preset_config_json_reads_back():
    from bridge.models import preset
    from bridge.models.hf_translation.write import hf_config_dict

    for name in ("gemma3_1b", "gemma3_27b"):
        p = preset(name)
        family = family_for(["Gemma3ForCausalLM"])
        out = hf_config_dict(p, family, "Gemma3ForCausalLM")  # raises if a math field does not read back
        assert out["rope_parameters"]["sliding_attention"]["rope_theta"] == 10000.0
        assert out["layer_types"][:6] == ["sliding_attention"] * 5 + ["full_attention"]
        assert out["hidden_activation"] == out["hidden_act"] == "gelu_pytorch_tanh"


def test_phi3_sliding_window_partial_rotary_and_longrope():
    from transformers import Phi3Config

    def phi3(**kw):
        return Phi3Config(architectures=["Phi3ForCausalLM"], pad_token_id=0, **kw)

    f = fields_of(phi3(sliding_window=2047, max_position_embeddings=4096, partial_rotary_factor=0.75))
    assert f["window_size"] == [2046, 0] and f["rotary_percent"] == 0.75
    # a window of at least max_position_embeddings keys masks nothing (Phi-3.5-mini: 262144 vs 131072)
    assert "window_size" not in fields_of(phi3(sliding_window=262144, max_position_embeddings=131072))
    assert "window_size" not in fields_of(phi3(sliding_window=None))
    longrope = {"rope_type": "longrope", "short_factor": [1.0] * 48, "long_factor": [2.0] * 48}
    cfg = phi3(max_position_embeddings=131072, original_max_position_embeddings=4096, rope_scaling=longrope)
    with pytest.raises(
        ConfigError,
        match=r"HF config rope_parameters.rope_type='longrope': only 'default' and 'llama3' RoPE are "
        r"supported \(Phi-3 128k / Phi-3.5 LongRoPE.*Fix: .*Phi-3-mini-4k-instruct",
    ):
        fields_of(cfg)


@pytest.mark.parametrize("family", list(TINY_MODELS))  # every family's tiny-model test data
def test_provider_to_config_json_and_back(family):
    import transformers

    from bridge.models.hf_translation.write import hf_config_dict
    from bridge.models.provider_kinds import provider_class
    from tests.functional.workers.convert_models import make_hf_config

    hf = make_hf_config(family)
    fam = family_for(hf.architectures)
    fields = provider_fields(hf, fam)
    provider = provider_class(fam.provider_kind)(**fields)
    written = hf_config_dict(provider, fam, hf.architectures[0])
    # transformers reads what we wrote, and it translates back to the same provider
    reread = getattr(transformers, type(hf).__name__)(**written)
    assert provider_fields(reread, fam) == fields


def test_provider_the_architecture_cannot_express_is_refused():
    from bridge.models.gpt_provider import GPTModelProvider
    from bridge.models.hf_translation.write import hf_config_dict
    from tests.functional.workers.convert_models import make_hf_config

    hf = make_hf_config("llama")
    fam = family_for(hf.architectures)
    provider = GPTModelProvider(**{**provider_fields(hf, fam), "qk_layernorm": True})
    with pytest.raises(
        ConfigError, match="model.qk_layernorm=True: a LlamaForCausalLM checkpoint cannot express it"
    ):
        hf_config_dict(provider, fam, "LlamaForCausalLM")


@pytest.mark.parametrize("tiny_model", list(TINY_MODELS))  # one per HF model type
def test_config_json_without_transformers_reads_like_autoconfig(tiny_model, tmp_path):
    """config.json read as JSON + CLASS_DEFAULTS gives the provider transformers' AutoConfig gives."""
    import json

    from transformers import AutoConfig

    from bridge.models.hf_translation.registry import CLASS_DEFAULTS, with_class_defaults
    from tests.functional.workers.convert_models import make_hf_config

    full = make_hf_config(tiny_model)
    model_type, architecture = full.model_type, TINY_MODELS[tiny_model][1]
    cls_defaults = AutoConfig.for_model(model_type)
    for key, value in CLASS_DEFAULTS[model_type].items():
        have = getattr(cls_defaults, key, None)
        if key == "rope_theta":
            have = cls_defaults.rope_parameters["rope_theta"]
        assert have == value, (model_type, key, have, value)
    family = family_for([architecture])
    full.save_pretrained(tmp_path / "full")
    minimal = {"architectures": [architecture], "model_type": model_type}
    (tmp_path / "minimal").mkdir()
    (tmp_path / "minimal" / "config.json").write_text(json.dumps(minimal))
    for folder in ("full", "minimal"):
        raw = json.loads((tmp_path / folder / "config.json").read_text())
        if model_type == "deepseek_v2" and folder == "minimal":
            # DeepseekV2Config's num_experts_per_tok defaults to None: refused alike from both
            for cfg in (with_class_defaults(raw), AutoConfig.from_pretrained(tmp_path / folder)):
                with pytest.raises(ConfigError, match="HF config num_experts_per_tok=0"):
                    provider_fields(cfg, family)
            continue
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


# ---- DeepSeek (bridge.models.deepseek.hf_config) --------------------------------------------------


def test_deepseek_fields_mla_yarn_and_routing():
    from tests.functional.workers.convert_models import make_hf_config

    v2 = fields_of(make_hf_config("deepseek_v2"))
    assert v2["multi_latent_attention"] and v2["q_lora_rank"] is None and v2["kv_lora_rank"] == 32
    assert (v2["qk_head_dim"], v2["qk_pos_emb_head_dim"], v2["v_head_dim"]) == (16, 8, 12)
    assert (v2["rope_type"], v2["rotary_scaling_factor"], v2["original_max_position_embeddings"]) == (
        "yarn",
        4.0,
        16,
    )
    assert (v2["mscale"], v2["mscale_all_dim"]) == (0.707, 0.707)
    assert (v2["moe_router_score_function"], v2["moe_router_pre_softmax"]) == ("softmax", True)
    assert v2["moe_router_topk_scaling_factor"] == 1.5 and v2["moe_shared_expert_intermediate_size"] == 64
    assert v2["moe_layer_freq"] == [0, 1] and "moe_router_num_groups" not in v2
    v3 = fields_of(make_hf_config("deepseek_v3"))
    assert v3["q_lora_rank"] == 24 and v3["moe_router_enable_expert_bias"]
    assert (v3["moe_router_score_function"], v3["moe_router_num_groups"], v3["moe_router_group_topk"]) == (
        "sigmoid",
        4,
        2,
    )
    assert (v3["mscale"], v3["mscale_all_dim"], v3["moe_router_topk_scaling_factor"]) == (1.0, 0.8, 2.5)
    plain = fields_of(make_hf_config("deepseek_v3", rope_scaling=None))
    assert (plain["rope_type"], plain["mscale_all_dim"]) == ("rope", 0.0)  # softmax scale 1/sqrt(24)


@pytest.mark.parametrize(
    "family,change,message",
    [
        ("deepseek_v2", dict(topk_method="group_limited_greedy", n_group=2, topk_group=1), "n_group/topk_group"),
        ("deepseek_v2", dict(norm_topk_prob=True), "norm_topk_prob=True"),
        ("deepseek_v2", dict(topk_method="noaux_tc"), "topk_method='noaux_tc'"),
        ("deepseek_v3", dict(topk_group=1), "n_group/topk_group"),
        ("deepseek_v3", dict(norm_topk_prob=False), "norm_topk_prob=False"),
        ("deepseek_v3", dict(rope_interleave=False), "rope_interleave=False"),
        ("deepseek_v3", dict(rms_norm_eps=1e-5), "rms_norm_eps=1e-05"),
        ("deepseek_v3", dict(num_key_value_heads=2), "num_key_value_heads=2"),
        ("deepseek_v3", dict(first_k_dense_replace=2), "first_k_dense_replace=2"),
        ("deepseek_v3", dict(attention_bias=True), "attention_bias=True"),
        (
            "deepseek_v3",
            dict(rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16,
                               "truncate": False}),
            "truncate=False",
        ),
        (
            "deepseek_v3",
            dict(rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16,
                               "mscale": 0.0, "mscale_all_dim": 1.0}),
            "attention_factor/mscale",
        ),
        ("deepseek_v3", dict(rope_scaling={"rope_type": "linear", "factor": 2.0}), "'default' or 'yarn'"),
    ],
)  # fmt: skip
def test_deepseek_settings_megatron_core_computes_differently_are_refused(family, change, message):
    from tests.functional.workers.convert_models import make_hf_config

    with pytest.raises(ConfigError, match=message):
        fields_of(make_hf_config(family, **change))


@pytest.mark.parametrize("family", ["deepseek_v3", "glm4_moe"])
def test_mtp_layers_read_as_mtp_num_layers_and_written_back(family):
    from bridge.models.gpt_provider import GPTModelProvider
    from bridge.models.hf_translation.write import hf_config_dict
    from tests.functional.workers.convert_models import make_hf_config

    hf = make_hf_config(family, num_nextn_predict_layers=1)
    fields = fields_of(hf)
    assert fields["mtp_num_layers"] == 1 and fields_of(make_hf_config(family))["mtp_num_layers"] is None
    rules = family_for(hf.architectures).hf_config
    names = {"model.layers.1.mlp.gate.weight", "model.layers.2.eh_proj.weight", "model.layers.2.enorm.weight"}
    # the MTP layer's tensors (layer num_hidden_layers + k) a model with fewer MTP layers leaves out
    assert rules.mtp_tensors(hf, names, keep=0) == names - {"model.layers.1.mlp.gate.weight"}
    assert rules.mtp_tensors(hf, names, keep=1) == set()
    assert rules.mtp_tensors(make_hf_config(family), names, keep=0) == set()  # no MTP in the config
    arch = hf.architectures[0]
    out = hf_config_dict(GPTModelProvider(**fields), family_for(hf.architectures), arch)
    assert out["num_nextn_predict_layers"] == 1
