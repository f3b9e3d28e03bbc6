"""Qwen3 finetuning recipes: full SFT and PEFT (Megatron-Bridge's H100 finetuning layouts).

Qwen3 recipes train 100 iterations of global batch 32 on 2048-token packed rows (warmup 10); the
adapters are dim 8, alpha 16 on the attention (linear_qkv, linear_proj) only.
"""

from __future__ import annotations

from typing import Any

from bridge.config.container import ConfigContainer
from bridge.models.qwen3.presets import qwen3_8b
from bridge.models.qwen3_moe.presets import qwen3_30b_a3b
from recipes.common import RecipeInfo, finetune_config, lora
from recipes.performance import QWEN3, QWEN3_MOE, apply

QWEN_ITERS = dict(
    seq_length=2048, train_iters=100, global_batch_size=32, lr_warmup_iters=10, save_interval=100
)


def _attention_adapters(scheme: str):
    return lora(scheme, dim=8, alpha=16.0, target_modules=["linear_qkv", "linear_proj"])


def qwen3_8b_sft_config(tensor_model_parallel_size: int = 4, **kwargs: Any) -> ConfigContainer:
    """Qwen3 8B full SFT: TP4 (4 GPUs), the distributed optimizer, lr 5e-6."""
    kwargs = {**QWEN_ITERS, "use_distributed_optimizer": True, **kwargs}
    return finetune_config(
        apply(qwen3_8b(), QWEN3), tensor_model_parallel_size=tensor_model_parallel_size, **kwargs
    )


def qwen3_8b_peft_config(
    tensor_model_parallel_size: int = 1, peft_scheme: str = "lora", **kwargs: Any
) -> ConfigContainer:
    """Qwen3 8B LoRA on the attention: TP1 (1 GPU), lr 1e-4."""
    kwargs = {**QWEN_ITERS, "use_distributed_optimizer": True, **kwargs}
    return finetune_config(
        apply(qwen3_8b(), QWEN3),
        tensor_model_parallel_size=tensor_model_parallel_size,
        peft=_attention_adapters(peft_scheme),
        **kwargs,
    )


def qwen3_30b_a3b_sft_config(expert_model_parallel_size: int = 16, **kwargs: Any) -> ConfigContainer:
    """Qwen3-30B-A3B full SFT: EP16 (16 GPUs), TP1, lr 5e-6."""
    kwargs = {**QWEN_ITERS, "train_iters": 1000, "use_distributed_optimizer": True, **kwargs}
    kwargs.setdefault("tensor_model_parallel_size", 1)
    return finetune_config(
        apply(qwen3_30b_a3b(), QWEN3_MOE), expert_model_parallel_size=expert_model_parallel_size, **kwargs
    )


def qwen3_30b_a3b_peft_config(
    tensor_model_parallel_size: int = 4,
    expert_model_parallel_size: int = 4,
    sequence_parallel: bool = True,
    peft_scheme: str = "lora",
    **kwargs: Any,
) -> ConfigContainer:
    """Qwen3-30B-A3B LoRA on the attention (the experts take no adapters): TP4 EP4 SP (4 GPUs)."""
    kwargs = {**QWEN_ITERS, "lr_decay_iters": 100, "use_distributed_optimizer": True, **kwargs}
    return finetune_config(
        apply(qwen3_30b_a3b(), QWEN3_MOE),
        tensor_model_parallel_size=tensor_model_parallel_size,
        expert_model_parallel_size=expert_model_parallel_size,
        sequence_parallel=sequence_parallel,
        peft=_attention_adapters(peft_scheme),
        **kwargs,
    )


RECIPES = (
    RecipeInfo("qwen3_8b_sft_config", "qwen_finetune", "Qwen3 8B full SFT, TP4 (4 GPUs)", 4, "finetune"),
    RecipeInfo(
        "qwen3_8b_peft_config", "qwen_finetune", "Qwen3 8B LoRA dim 8 (attention), TP1 (1 GPU)", 1, "finetune"
    ),
    RecipeInfo(
        "qwen3_30b_a3b_sft_config", "qwen_finetune", "Qwen3-30B-A3B full SFT, EP16 (16 GPUs)", 16, "finetune"
    ),
    RecipeInfo(
        "qwen3_30b_a3b_peft_config",
        "qwen_finetune",
        "Qwen3-30B-A3B LoRA dim 8 (attention), TP4 EP4 SP (4 GPUs)",
        4,
        "finetune",
    ),
)
