"""PEFT's memory: only the adapters train, so the plan counts gradients and optimizer state for them alone.

The adapter count is checked against Hugging Face peft on transformers' Phi-3, whose qkv_proj and
gate_up_proj are fused as Megatron-Core's linear_qkv and linear_fc1 are (one adapter each)."""

from __future__ import annotations

import pytest
import torch
import transformers

from bridge.config.run_plan import build_plan
from bridge.models import preset
from bridge.parallel.param_count import adapter_parameters, count_parameters
from tests.unit.test_presets import PUBLISHED

ALL_TARGETS = ["linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"]
PHI3_MODULES = {
    "linear_qkv": "qkv_proj",
    "linear_proj": "o_proj",
    "linear_fc1": "gate_up_proj",
    "linear_fc2": "down_proj",
}


@pytest.mark.parametrize(
    "targets,scheme",
    [(ALL_TARGETS, "lora"), (ALL_TARGETS, "dora"), (["linear_qkv", "linear_proj"], "lora")],
)
def test_adapter_count_equals_peft_on_fused_phi3(targets, scheme):
    import peft

    cls, values = PUBLISHED["phi3_mini_4k"]
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(getattr(transformers, cls)(**values))
        config = peft.LoraConfig(
            r=16, target_modules=[PHI3_MODULES[t] for t in targets], use_dora=scheme == "dora"
        )
        adapted = peft.get_peft_model(model, config)
    theirs = sum(p.numel() for p in adapted.parameters() if p.requires_grad)
    shape = preset("phi3_mini_4k").model_shape()
    assert adapter_parameters(shape, targets, 16, magnitude=scheme == "dora") == theirs


def test_a_peft_plan_counts_gradients_and_optimizer_state_for_the_adapters_only():
    from bridge.config.overrides import apply_overrides
    from recipes import get_recipe, recipe_info
    from recipes.dry_run import with_stand_ins
    from tests.unit.test_recipe_registry import H100

    peft_cfg = with_stand_ins(get_recipe("llama3_8b_peft_config")())
    full = apply_overrides(peft_cfg.copy(), ["peft.scheme=null"])
    world = recipe_info("llama3_8b_peft_config").default_world_size
    lora, every = (build_plan(cfg, world, env=H100).memory for cfg in (peft_cfg, full))
    shape = preset("llama3_8b").model_shape()
    trains = adapter_parameters(shape, peft_cfg.peft.target_modules, peft_cfg.peft.dim)
    assert 0 < trains < count_parameters(shape).total / 100
    assert lora.params == every.params and lora.activations == every.activations
    share = trains / count_parameters(shape).total
    assert lora.grads == pytest.approx(every.grads * share)
    assert lora.optimizer == pytest.approx(every.optimizer * share)
    assert lora.total < 80 < every.total  # GB: Megatron-Bridge runs it on H100s (80 GB)


MLA_MODULES = {
    "linear_q_proj": "q_proj",
    "linear_q_down_proj": "q_a_proj",
    "linear_q_up_proj": "q_b_proj",
    "linear_kv_down_proj": "kv_a_proj_with_mqa",
    "linear_kv_up_proj": "kv_b_proj",
    "linear_proj": "o_proj",
}


@pytest.mark.parametrize(
    "name,targets",
    [
        (
            "glm47_flash",
            ["linear_q_down_proj", "linear_q_up_proj", "linear_kv_down_proj", "linear_kv_up_proj"],
        ),
        ("moonlight_16b", ["linear_q_proj", "linear_kv_down_proj", "linear_kv_up_proj", "linear_proj"]),
    ],
)
def test_multi_latent_attention_adapter_count_equals_peft(name, targets):
    import peft

    cls, values = PUBLISHED[name]
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(getattr(transformers, cls)(**values))
        config = peft.LoraConfig(r=8, target_modules=[MLA_MODULES[t] for t in targets], use_dora=True)
        adapted = peft.get_peft_model(model, config)
    theirs = sum(p.numel() for p in adapted.parameters() if p.requires_grad)
    assert adapter_parameters(preset(name).model_shape(), targets, 8, magnitude=True) == theirs
