"""Nemotron 3's MoE layers (NemotronHForCausalLM with `moe` layers): what the conversion reads and refuses,
and the planner's parameter counts (total and active) against transformers' own model on the meta device
and against the Megatron-Core model bridge builds. Logits and exports: test_conversion_tp1.py (TP=1) and
tests/functional/test_conversion_parallel.py (TP=2, PP=2, EP=2), family `nemotron_h_moe`."""

from __future__ import annotations

import pytest

from bridge.conversion.registry import family_for
from bridge.errors import ConfigError
from bridge.models.hf_translation.read import provider_fields
from tests.functional.workers.convert_models import FAMILIES, make_hf_config

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

FAMILY = "nemotron_h_moe"


def _family():
    return family_for([FAMILIES[FAMILY][1]])


def fields_of(**overrides):
    return provider_fields(make_hf_config(FAMILY, **overrides), _family())


def test_reads_the_moe_layers_routing_and_latent_size():
    f = fields_of()
    assert f["hybrid_override_pattern"] == "ME*E" and f["num_moe_experts"] == 4
    assert (f["moe_ffn_hidden_size"], f["moe_shared_expert_intermediate_size"], f["moe_latent_size"]) == (
        32,
        48,
        32,
    )
    assert (f["moe_router_score_function"], f["moe_router_enable_expert_bias"]) == ("sigmoid", True)
    assert (f["moe_router_topk"], f["moe_router_topk_scaling_factor"]) == (2, 2.5)
    assert (f["moe_router_num_groups"], f["moe_router_group_topk"]) == (2, 1)
    assert not f["moe_shared_expert_gate"] and f["moe_router_dtype"] == "fp32"
    plain = fields_of(moe_latent_size=None, n_group=1, topk_group=1, routed_scaling_factor=1.0)
    assert plain["moe_latent_size"] is None and "moe_router_num_groups" not in plain
    assert plain["moe_router_topk_scaling_factor"] is None
    # a Nemotron-H without MoE layers gets no expert fields
    dense = provider_fields(make_hf_config("nemotron_h"), _family())
    assert "num_moe_experts" not in dense or not dense["num_moe_experts"]


@pytest.mark.parametrize(
    "overrides, field",
    [
        (dict(norm_topk_prob=False), "norm_topk_prob"),  # Megatron-Core renormalises top-k when k > 1
        (dict(n_group=2, topk_group=2), "n_group/topk_group"),  # 2 // 2 = 1: not transformers' top-2 sum
        (dict(mlp_bias=True), "mlp_bias"),  # expert, shared-expert and latent biases: not mapped
        (dict(num_nextn_predict_layers=1), "num_nextn_predict_layers"),  # no MTP layers in the hybrid
        (dict(moe_shared_expert_intermediate_size=0), "moe_shared_expert_intermediate_size"),
    ],
)
def test_refusals_name_the_field(overrides, field):
    with pytest.raises(ConfigError, match=f"HF config {field}="):
        fields_of(**overrides)


def _hf_counts(config) -> tuple[int, int]:
    """(total, active) of transformers' model built on the meta device: active = total less the routed
    experts a token is not sent to (the per-expert share of each MoE layer's stacked up / down weights)."""
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    total = sum(p.numel() for p in model.parameters())
    idle = 0
    for module in model.modules():
        if type(module).__name__ == "NemotronHExperts":
            per_expert = (module.up_proj.numel() + module.down_proj.numel()) // module.num_experts
            idle += (module.num_experts - config.num_experts_per_tok) * per_expert
    return total, total - idle


def test_parameter_counts_equal_transformers_and_the_built_model(single_process_groups):
    from bridge import AutoBridge
    from bridge.parallel.param_count import count_parameters

    config = make_hf_config(FAMILY)  # with latent projections
    provider = AutoBridge.from_hf_config(config).to_megatron_provider(load_weights=False)
    count = count_parameters(provider.model_shape())
    assert (count.total, count.active) == _hf_counts(config)
    assert count.latent_proj == 2 * 2 * 64 * 32  # two MoE layers, hidden 64 <-> latent 32
    from bridge.parallel.wrappers import unwrap

    (chunk,) = provider.provide_distributed_model(wrap_with_ddp=False, mixed_precision_wrapper=False)
    model = unwrap(chunk)
    built = sum(p.numel() for p in model.parameters())
    padding = (provider.padded_vocab_size() - provider.vocab_size) * provider.hidden_size * 2  # untied
    assert built - padding == count.total
    assert {n for n, _ in model.named_parameters() if "latent" in n} == {
        f"decoder.layers.{i}.mlp.{name}_latent_proj.weight" for i in (1, 3) for name in ("fc1", "fc2")
    }


def test_nano_preset_counts_equal_transformers():
    # nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B: "31.6B total, 3.6B active with embeddings" as published
    from bridge.models import preset
    from bridge.models.hf_translation.write import hf_config_dict
    from bridge.parallel.param_count import count_parameters

    p = preset("nemotron_3_nano_30b_a3b")
    out = hf_config_dict(p, _family(), "NemotronHForCausalLM")  # reads back to the same math fields
    config = transformers.NemotronHConfig(**{k: v for k, v in out.items() if k != "architectures"})
    count = count_parameters(p.model_shape())
    assert (count.total, count.active) == _hf_counts(config)
    assert (round(count.total / 1e9, 1), round(count.active / 1e9, 1)) == (31.6, 3.6)
