"""The config.json rules of GLM-4.5, MiniMax-M2 and ERNIE 4.5 MoE: what they read, and each refusal
(routings Megatron-Core computes differently), against the tiny models' transformers configs."""

from __future__ import annotations

import pytest

from bridge.conversion.registry import family_for
from bridge.errors import ConfigError
from bridge.models.hf_translation.read import provider_fields
from tests.functional.workers.convert_models import FAMILIES, make_hf_config

pytest.importorskip("transformers")


def fields_of(family: str, **overrides):
    return provider_fields(make_hf_config(family, **overrides), family_for([FAMILIES[family][1]]))


def test_glm_reads_biases_qk_norms_partial_rope_groups_and_dense_layers():
    f = fields_of("glm4_moe")
    assert (f["add_qkv_bias"], f["qk_layernorm"], f["rotary_percent"]) == (True, True, 0.5)
    assert (f["moe_router_score_function"], f["moe_router_enable_expert_bias"]) == ("sigmoid", True)
    assert (f["moe_router_num_groups"], f["moe_router_group_topk"]) == (4, 2)
    assert f["moe_router_topk_scaling_factor"] == 2.5
    assert f["moe_shared_expert_intermediate_size"] == 64 and f["moe_layer_freq"] == [0, 1]
    plain = fields_of("glm4_moe", attention_bias=False, use_qk_norm=False, n_group=1, topk_group=1)
    assert not plain["add_qkv_bias"] and not plain["qk_layernorm"] and "moe_router_num_groups" not in plain


@pytest.mark.parametrize(
    "overrides, field",
    [
        (dict(n_group=4, topk_group=4), "n_group/topk_group"),  # 4 // 4 = 1 != the top-2 sum
        (dict(norm_topk_prob=False), "norm_topk_prob"),  # Megatron-Core renormalises k > 1
        (dict(n_shared_experts=0), "n_shared_experts"),
    ],
)
def test_glm_refusals(overrides, field):
    with pytest.raises(ConfigError, match=f"HF config {field}="):
        fields_of("glm4_moe", **overrides)


def test_minimax_reads_rotary_dim_and_refuses_other_routings():
    f = fields_of("minimax_m2")
    assert f["rotary_percent"] == 0.5 and f["qk_layernorm_scope"] == "projection"
    assert f["moe_router_topk_scaling_factor"] is None and f["moe_router_enable_expert_bias"]
    with pytest.raises(ConfigError, match="HF config num_experts_per_tok=1"):
        fields_of("minimax_m2", num_experts_per_tok=1)
    with pytest.raises(ConfigError, match="HF config scoring_func='softmax'"):
        fields_of("minimax_m2", scoring_func="softmax")


def test_ernie_reads_interleaved_rope_softmax_scores_and_layer_rule():
    f = fields_of("ernie4_5_moe")
    assert f["rotary_interleaved"] and f["moe_router_softmax_scores"]
    assert f["moe_router_score_function"] == "sigmoid" and f["moe_layer_freq"] == [0, 1]
    assert f["moe_shared_expert_intermediate_size"] == 32
    f = fields_of("ernie4_5_moe", num_hidden_layers=4, moe_layer_start_index=0, moe_layer_interval=2)
    assert f["moe_layer_freq"] == [0, 1, 0, 1]  # (i + 1) % interval == 0


@pytest.mark.parametrize(
    "overrides, field",
    [(dict(use_bias=True), "use_bias"), (dict(moe_k=1), "moe_k"), (dict(moe_norm_min=0.3), "moe_norm_min")],
)
def test_ernie_refusals(overrides, field):
    with pytest.raises(ConfigError, match=f"HF config {field}="):
        fields_of("ernie4_5_moe", **overrides)


def test_softmax_scores_need_the_sigmoid_router():
    from bridge.models import preset

    p = preset("ernie45_21b_a3b")
    p.moe_router_score_function = "softmax"
    with pytest.raises(ConfigError, match="model.moe_router_softmax_scores"):
        p.finalize()


def test_softmax_scores_are_the_sigmoid_of_the_router_logits():
    torch = pytest.importorskip("torch")
    from bridge.models.softmax_score_router import softmax_as_sigmoid_logits

    logits = torch.randn(5, 8, dtype=torch.float64) * 4
    assert torch.allclose(
        torch.sigmoid(softmax_as_sigmoid_logits(logits)), torch.softmax(logits, -1), atol=1e-12
    )


def test_glm47_flash_reads_mla_with_its_latent_norm_eps_and_refuses_a_disagreeing_dense_count():
    f = fields_of("glm4_moe_lite")
    assert (f["multi_latent_attention"], f["q_lora_rank"], f["kv_lora_rank"]) == (True, 24, 32)
    assert (f["layernorm_epsilon"], f["mla_latent_layernorm_epsilon"]) == (1e-5, 1e-6)
    assert (f["moe_router_num_groups"], f["moe_router_group_topk"], f["moe_layer_freq"]) == (4, 2, [0, 1])
    with pytest.raises(ConfigError, match="first_k_dense_replace=2: transformers' Glm4MoeLite ignores it"):
        fields_of("glm4_moe_lite", first_k_dense_replace=2)
    with pytest.raises(ConfigError, match="rope_interleave=False"):
        fields_of("glm4_moe_lite", rope_interleave=False)


def test_exaone_moe_reads_windows_nope_experts_and_refuses_what_transformers_ignores():
    f = fields_of("exaone_moe")
    assert (f["window_size"], f["window_attn_skip_freq"], f["no_rope_freq"]) == ([5, 0], 2, 2)
    assert (f["num_moe_experts"], f["moe_shared_expert_intermediate_size"], f["moe_layer_freq"]) == (
        8,
        64,
        [0, 1],
    )
    for key, value in (("swiglu_limits", [0.0, 7.0]), ("sliding_windows", [6, 0])):
        with pytest.raises(ConfigError, match=f"HF config {key}="):
            fields_of("exaone_moe", **{key: value})
