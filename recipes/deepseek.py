"""DeepSeek-V3, Kimi-K2 and DeepSeek-V2-Lite recipes (Megatron-Bridge's H100 layouts and values).

DeepSeek-V3 (TP2 PP16 EP64, 1024 GPUs) and Kimi-K2 (TP2 PP16 EP32, 512 GPUs) split their 61 layers over 16
pipeline stages with Megatron-Bridge's layout for PP16 without virtual stages: the embedding and 4 layers,
fourteen stages of 4, then 1 layer and the loss (bridge.parallel.stages). Megatron-Bridge's V3 layout puts
the multi-token-prediction layer on the last stage too; bridge leaves MTP out of the model (the presets'
mtp_num_layers is None), so that stage holds the layer and the loss. Both train on 4096-token sequences,
global batch 4096, 1M iterations, Adam 3e-4 -> 3e-5 after 2000 warmup iterations; Kimi-K2 recomputes the
core attention (selective). DeepSeek-V2-Lite pretrains at EP8 on 8 GPUs (global batch 512, full
recompute). Megatron-Bridge publishes no DeepSeek-V2-Lite finetuning recipe: its SFT / PEFT recipes here
are the shared finetuning values (recipes.common.finetune_config) at the pretraining layout's EP8, and
LoRA on the attention output projection (multi-latent attention has no linear_qkv; the routed experts
take no adapters).
"""

from __future__ import annotations

from typing import Any

from bridge.config.container import ConfigContainer
from bridge.models.deepseek.presets import deepseek_v2_lite, deepseek_v3, kimi_k2
from bridge.models.gpt_provider import GPTModelProvider
from recipes.common import RecipeInfo, finetune_config, lora, pretrain_config
from recipes.performance import COMMON, MOE_KERNELS, TE_CROSS_ENTROPY, apply

# Megatron-Bridge's DeepSeek / Kimi bridges and recipes: grouped GEMM, fused permutation, TE cross-entropy
DEEPSEEK = {**COMMON, **MOE_KERNELS, **TE_CROSS_ENTROPY}
# Megatron-Bridge's PP16 layout without virtual stages (MTP left out): 4 + 14 x 4 + 1 = 61 layers
PP16_LAYOUT = "Et*4|(t*4|)*14tL"
# the run values Megatron-Bridge's DeepSeek / Kimi recipes set (not the shared base's 500 / 500 / 500)
LARGE_RUN = dict(
    seq_length=4096,
    global_batch_size=4096,
    train_iters=1_000_000,
    micro_batch_size=1,
    lr_warmup_iters=2000,
    eval_interval=2000,
    save_interval=2000,
)


def _pp16(
    model: GPTModelProvider, expert_model_parallel_size: int, kwargs: dict[str, Any]
) -> ConfigContainer:
    layout = kwargs.pop("pipeline_model_parallel_layout", PP16_LAYOUT)
    cfg = pretrain_config(
        apply(model, DEEPSEEK),
        **{
            "tensor_model_parallel_size": 2,
            "pipeline_model_parallel_size": 16,
            "virtual_pipeline_model_parallel_size": None,
            "context_parallel_size": 1,
            "expert_model_parallel_size": expert_model_parallel_size,
            "sequence_parallel": True,
            **LARGE_RUN,
            **kwargs,
        },
    )
    cfg.model.pipeline_model_parallel_layout = layout
    return cfg


def deepseek_v3_pretrain_config(expert_model_parallel_size: int = 64, **kwargs: Any) -> ConfigContainer:
    """DeepSeek-V3 (671B): TP2 PP16 EP64 SP on 1024 GPUs, 61 layers on uneven stages (PP16_LAYOUT)."""
    return _pp16(deepseek_v3(), expert_model_parallel_size, kwargs)


def kimi_k2_pretrain_config(expert_model_parallel_size: int = 32, **kwargs: Any) -> ConfigContainer:
    """Kimi-K2 (1T): TP2 PP16 EP32 SP on 512 GPUs, 61 layers on uneven stages, selective recompute."""
    cfg = _pp16(kimi_k2(), expert_model_parallel_size, kwargs)
    cfg.model.recompute_granularity = "selective"
    return cfg


def deepseek_v2_lite_pretrain_config(expert_model_parallel_size: int = 8, **kwargs: Any) -> ConfigContainer:
    """DeepSeek-V2-Lite (16B): EP8 on 8 GPUs, full recompute of every layer."""
    cfg = pretrain_config(
        apply(deepseek_v2_lite(), DEEPSEEK),
        **{
            "tensor_model_parallel_size": 1,
            "pipeline_model_parallel_size": 1,
            "virtual_pipeline_model_parallel_size": None,
            "context_parallel_size": 1,
            "expert_model_parallel_size": expert_model_parallel_size,
            "sequence_parallel": False,
            **LARGE_RUN,
            "global_batch_size": 512,
            **kwargs,
        },
    )
    m = cfg.model
    m.recompute_granularity, m.recompute_method, m.recompute_num_layers = "full", "uniform", 1
    return cfg


def deepseek_v2_lite_sft_config(expert_model_parallel_size: int = 8, **kwargs: Any) -> ConfigContainer:
    """DeepSeek-V2-Lite full SFT: EP8 (8 GPUs), the distributed optimizer, lr 5e-6."""
    kwargs = {"use_distributed_optimizer": True, **kwargs}
    kwargs.setdefault("tensor_model_parallel_size", 1)
    return finetune_config(
        apply(deepseek_v2_lite(), DEEPSEEK), expert_model_parallel_size=expert_model_parallel_size, **kwargs
    )


def deepseek_v2_lite_peft_config(
    expert_model_parallel_size: int = 8, peft_scheme: str = "lora", **kwargs: Any
) -> ConfigContainer:
    """DeepSeek-V2-Lite LoRA (dim 32, alpha 32) on the attention output projection: EP8 (8 GPUs), lr 1e-4."""
    kwargs.setdefault("tensor_model_parallel_size", 1)
    return finetune_config(
        apply(deepseek_v2_lite(), DEEPSEEK),
        expert_model_parallel_size=expert_model_parallel_size,
        peft=lora(peft_scheme, target_modules=["linear_proj"]),
        **kwargs,
    )


RECIPES = (
    RecipeInfo(
        "deepseek_v3_pretrain_config",
        "deepseek",
        "DeepSeek-V3 671B MoE pretraining, TP2 PP16 (uneven: 4+4x14+1 layers) EP64 (1024 GPUs: DP32 EDP1)",
        1024,
    ),
    RecipeInfo(
        "kimi_k2_pretrain_config",
        "deepseek",
        "Kimi-K2 1T MoE pretraining, TP2 PP16 (uneven: 4+4x14+1 layers) EP32 (512 GPUs: DP16 EDP1)",
        512,
    ),
    RecipeInfo(
        "deepseek_v2_lite_pretrain_config",
        "deepseek",
        "DeepSeek-V2-Lite 16B MoE pretraining, EP8 (8 GPUs: DP8 EDP1), full recompute",
        8,
    ),
    RecipeInfo(
        "deepseek_v2_lite_sft_config", "deepseek", "DeepSeek-V2-Lite full SFT, EP8 (8 GPUs)", 8, "finetune"
    ),
    RecipeInfo(
        "deepseek_v2_lite_peft_config",
        "deepseek",
        "DeepSeek-V2-Lite LoRA dim 32 (attention output), EP8 (8 GPUs)",
        8,
        "finetune",
    ),
)
