"""Every recipe whose name gives a published system (Megatron-Bridge's `<n>gpu_<system>` names) dry-runs on
that system at that GPU count (run_recipe.py --dry-run --gpu, in-process) and fits its usable memory by
the plan's own estimate (bridge/config/system_check.system_memory_check), except the recipes listed below,
each with why: the list is exact (a listed recipe that starts to fit, or an unlisted one that stops,
fails the test)."""

from __future__ import annotations

import re

import pytest

from bridge.config.environment import Environment
from bridge.config.run_plan import build_plan
from bridge.config.system_check import system_memory_check
from bridge.errors import ConfigError
from bridge.models.provider_checks import has_mla_qk_norm_resolver
from bridge.parallel.planner.request import USABLE_FRACTION
from bridge.parallel.planner.systems import SYSTEMS
from recipes import RECIPES, get_recipe
from recipes.dry_run import missing_inputs, with_stand_ins

# multi-latent attention without query compression: megatron-core 0.19.2 refuses it whatever the memory
NO_QUERY_COMPRESSION = ("deepseek_v2_lite", "moonlight_16b")
SYSTEM_IN_NAME = re.compile(r"_(\d+)gpu_(h100|h200|b200|gb200)_")
# Megatron-Bridge names MXFP8 recipes for the H100, whose compute capability 9.0 MXFP8 does not run on
# (bridge/config/checks/precision.py refuses it before launch, with the fix)
MXFP8_ON_HOPPER = "needs a GPU of compute capability >= 10.0"
# Recipes whose estimate exceeds their system's usable memory as Megatron-Bridge sets them:
# - "states": weights + gradients + optimizer state alone exceed it (no recomputation can make it fit:
#   Megatron-Bridge's GPU count there is the smallest a functional run names, e.g. Llama 3 8B on 2 H100);
# - "activations": the activations tip it over, and Megatron-Bridge's recipe recomputes nothing (or
#   only selectively, which the estimate sizes as full): kept as published, said by the dry run's
#   memory check with its fix;
# - "recomputed": the recipe already recomputes fully and its activations still tip it over (by about
#   1 GB: the 10 % of the GPU the budget keeps for the CUDA context and NCCL buffers).
OVER_MEMORY = {
    "moonlight_16b_pretrain_16gpu_h100_bf16_config": "activations",
    "moonlight_16b_sft_8gpu_h100_bf16_tp1_config": "activations",
    "gemma3_1b_pretrain_1gpu_h100_bf16_config": "activations",
    # K-EXAONE-236B-A23B: 72.3 GB of 72 usable with full recompute; SFT's fp32 Adam states alone 73.6 GB
    "exaone_moe_236b_a23b_pretrain_64gpu_h100_bf16_config": "recomputed",
    "exaone_moe_236b_a23b_sft_64gpu_h100_bf16_config": "states",
    "glm45_air_106b_pretrain_32gpu_h100_bf16_config": "activations",
    "glm45_355b_sft_128gpu_h100_bf16_config": "activations",
    "glm45_air_106b_sft_32gpu_h100_bf16_config": "states",
    "glm45_355b_peft_16gpu_h100_bf16_config": "activations",
    "gpt_oss_20b_sft_8gpu_h100_bf16_config": "states",
    "gpt_oss_20b_sft_8gpu_h100_bf16_32k_config": "states",
    "gpt_oss_20b_sft_8gpu_h100_fp8cs_config": "states",
    "gpt_oss_20b_sft_8gpu_h100_bf16_openmathinstruct2_thinking_packed_config": "states",
    "gpt_oss_120b_sft_32gpu_h100_bf16_config": "states",
    "gpt_oss_120b_sft_48gpu_h100_bf16_32k_config": "states",
    "llama32_3b_pretrain_1gpu_h100_bf16_config": "activations",
    "llama3_8b_pretrain_2gpu_h100_bf16_config": "states",
    "llama3_8b_pretrain_2gpu_h100_fp8cs_config": "states",
    "llama3_8b_pretrain_2gpu_h100_nvfp4_config": "states",
    "llama3_70b_pretrain_32gpu_h100_bf16_config": "activations",
    "llama3_70b_pretrain_32gpu_h100_bf16_deterministic_config": "activations",
    "llama3_70b_pretrain_32gpu_h100_bf16_16k_config": "activations",
    "llama31_8b_pretrain_2gpu_h100_bf16_config": "states",
    "llama31_70b_pretrain_32gpu_h100_bf16_config": "activations",
    "llama31_405b_pretrain_256gpu_h100_bf16_config": "activations",
    "llama31_405b_pretrain_256gpu_h100_bf16_deterministic_config": "activations",
    "llama3_8b_sft_2gpu_h100_bf16_config": "states",
    # Qwen3-VL 8B full SFT on TP=2 alone (DP=1): its fp32 grads and Adam states are 74.8 GB per rank
    "qwen3_vl_8b_sft_2gpu_h100_bf16_config": "states",
    "llama31_8b_sft_2gpu_h100_bf16_config": "states",
    "llama31_405b_sft_128gpu_h100_bf16_config": "activations",
    "qwen2_7b_pretrain_2gpu_h100_bf16_config": "activations",
    "qwen2_7b_sft_2gpu_h100_bf16_config": "activations",
    "qwen2_72b_pretrain_32gpu_h100_bf16_config": "activations",
    "qwen25_7b_pretrain_2gpu_h100_bf16_config": "activations",
    "qwen25_7b_sft_2gpu_h100_bf16_config": "activations",
    "qwen25_14b_pretrain_4gpu_h100_bf16_config": "activations",
    "qwen25_14b_sft_4gpu_h100_bf16_config": "activations",
    "qwen25_72b_pretrain_32gpu_h100_bf16_config": "activations",
    "qwen3_8b_pretrain_16gpu_h100_bf16_config": "activations",
    "qwen3_32b_peft_1gpu_h100_bf16_config": "recomputed",
    "qwen3_30b_a3b_pretrain_16gpu_h100_bf16_config": "activations",
    "qwen3_30b_a3b_pretrain_8gpu_gb200_fp8mx_functional_config": "activations",
    "qwen3_30b_a3b_sft_8gpu_h100_bf16_config": "activations",
    "qwen3_235b_a22b_sft_64gpu_h100_bf16_config": "activations",
    # Megatron-Bridge's hybrid and Qwen3-Next recipes at DP=1: the bf16 weights, fp32 gradients and
    # unsharded Adam states alone (counted per layer kind: Mamba-2, attention, MLP, MoE) exceed 72 GB
    # Nemotron 3 Nano on 8 H100: EP=8 leaves each rank's 3.7B expert weights unsharded over data
    # parallelism (expert DP 1): their fp32 main weights and Adam states alone are 44 GB (82.6 GB states)
    "nemotron_3_nano_pretrain_8gpu_h100_bf16_config": "states",
    "nemotron_3_nano_sft_8gpu_h100_bf16_config": "states",
    "nemotronh_4b_pretrain_1gpu_h100_bf16_config": "states",
    "nemotronh_4b_sft_1gpu_h100_bf16_config": "states",
    "nemotronh_8b_pretrain_2gpu_h100_bf16_config": "states",
    "nemotronh_8b_sft_2gpu_h100_bf16_config": "states",
    "nemotronh_47b_pretrain_8gpu_h100_bf16_config": "states",
    "nemotronh_47b_sft_16gpu_h100_bf16_config": "activations",
    "nemotronh_56b_pretrain_8gpu_h100_bf16_config": "states",
    "nemotronh_56b_sft_8gpu_h100_bf16_config": "states",
    "nemotron_nano_9b_v2_pretrain_2gpu_h100_bf16_config": "states",
    "nemotron_nano_9b_v2_sft_2gpu_h100_bf16_config": "states",
    "nemotron_nano_12b_v2_pretrain_4gpu_h100_bf16_config": "activations",
    "qwen3_next_80b_a3b_sft_16gpu_h100_bf16_config": "states",
    # Megatron-Bridge's Qwen2.5-VL recipes: 4096-token rows in micro batches of 2, nothing recomputed, the
    # vision tower trained (its activations: a 1280-token image per sample); its 72B LoRA names one GPU,
    # where the bf16 weights alone (145 GB) exceed it
    "qwen25_vl_3b_sft_1gpu_h100_bf16_config": "activations",
    "qwen25_vl_7b_peft_1gpu_h100_bf16_config": "activations",
    "qwen25_vl_7b_sft_2gpu_h100_bf16_config": "states",
    "qwen25_vl_32b_sft_16gpu_h100_bf16_config": "activations",
    "qwen25_vl_32b_peft_1gpu_h100_bf16_config": "activations",
    "qwen25_vl_72b_sft_32gpu_h100_bf16_config": "activations",
    "qwen25_vl_72b_peft_1gpu_h100_bf16_config": "states",
    # Megatron-Bridge's Gemma 3 VL recipes train the whole 4B on one H100 (fp32 Adam states of 4.3 B
    # parameters alone are 52 GB) and 12B at DP=1 without recomputation (4096 tokens, micro batch 2)
    "gemma3_vl_4b_sft_1gpu_h100_bf16_config": "states",
    "gemma3_vl_12b_sft_4gpu_h100_bf16_config": "activations",
    "gemma3_vl_12b_peft_1gpu_h100_bf16_config": "activations",
    "gemma3_vl_27b_sft_16gpu_h100_bf16_config": "activations",
    # Qwen3-VL 8B's LoRA on one H100 with the vision tower trained, as Qwen2.5-VL 7B's
    "qwen3_vl_8b_peft_1gpu_h100_bf16_config": "activations",
    # Qwen3-VL-MoE without recomputation: 8 routed experts per token keep ~47 hidden-widths of values per
    # token and layer (4096 tokens x micro batch 2); the SFTs' fp32 Adam states at EP alone (DP over the
    # attention) on top
    "qwen3_vl_30b_a3b_sft_8gpu_h100_bf16_config": "states",
    "qwen3_vl_30b_a3b_peft_4gpu_h100_bf16_config": "activations",
    "qwen3_vl_235b_a22b_sft_32gpu_h100_bf16_config": "states",
    "qwen3_vl_235b_a22b_peft_16gpu_h100_bf16_config": "activations",
    # Megatron-Bridge's Ministral 3 SFT recipes train every part with the distributed optimizer at DP=1:
    # the 3B's fp32 Adam states on one H100 (69 GB) and the 14B's at TP4 leave no room for a 1540-px
    # image's tower activations; the 8B's at TP2 (84 GB) exceed it alone
    "ministral3_3b_sft_1gpu_h100_bf16_config": "activations",
    "ministral3_8b_sft_2gpu_h100_bf16_config": "states",
    "ministral3_14b_sft_4gpu_h100_bf16_config": "activations",
}


def _published():
    for name in RECIPES:
        found = SYSTEM_IN_NAME.search(name)
        if found:
            yield name, int(found.group(1)), found.group(2)


def test_every_recipe_with_a_published_system_fits_it():
    # Transformer Engine as on the published systems (the fp8 recipes need it; memory does not depend on it)
    systems = {
        key: Environment(
            cuda=True, device_name=s.device_name, compute_capability=s.compute_capability,
            packages={"transformer_engine": "2.8.0"},
        )
        for key, s in SYSTEMS.items()
    }  # fmt: skip
    over, fits, skipped = {}, 0, set()
    for name, gpus, gpu in _published():
        if name.startswith(NO_QUERY_COMPRESSION) and has_mla_qk_norm_resolver():
            skipped.add(name)  # refused by megatron-core 0.19's attention rules (test_recipe_registry.py)
            continue
        cfg = get_recipe(name)()
        if missing_inputs(cfg):
            cfg = with_stand_ins(cfg)
        try:
            plan = build_plan(cfg, gpus, env=systems[gpu])
        except ConfigError as err:
            assert MXFP8_ON_HOPPER in str(err) and gpu == "h100" and "fp8mx" in name, (name, err)
            continue
        budget = SYSTEMS[gpu].memory_gb * USABLE_FRACTION
        mem = plan.memory
        if mem.total <= budget:
            assert system_memory_check(plan, gpu).startswith(f"memory check ({gpu}): {mem.total:.2f} GB")
            fits += 1
            continue
        with pytest.raises(ConfigError, match=r"does not fit .* usable on a "):
            system_memory_check(plan, gpu)
        states = mem.total - mem.activations
        full = cfg.model.recompute_granularity == "full" or cfg.distributed.activation_checkpointing
        over[name] = "states" if states > budget else "recomputed" if full else "activations"
    assert over == {name: why for name, why in OVER_MEMORY.items() if name not in skipped}
    assert fits >= 90  # of the 144 published recipes


def test_deepseek_v3_fits_1024_h100_with_full_recompute():
    """Megatron-Bridge's published 1,024-GPU H100 DeepSeek-V3 run: without recomputation the first 1F1B
    stage holds 16 micro batches of activations (~90.6 GB per rank); with full recompute it fits."""
    name = "deepseek_v3_pretrain_1024gpu_h100_bf16_config"
    cfg = get_recipe("deepseek_v3_pretrain_config")()
    assert RECIPES[name].default_world_size == 1024 and cfg.model.recompute_granularity == "full"
    env = Environment(cuda=True, device_name=SYSTEMS["h100"].device_name, compute_capability=(9, 0))
    plan = build_plan(cfg, 1024, env=env)
    assert "fits 72.0 GB usable on a h100" in system_memory_check(plan, "h100")
    cfg.model.recompute_granularity = cfg.model.recompute_method = cfg.model.recompute_num_layers = None
    with pytest.raises(
        ConfigError, match=r"= 90\.\d+ GB: does not fit 72\.0 GB usable on a h100.*Fix: model"
    ):
        system_memory_check(build_plan(cfg, 1024, env=env), "h100")
