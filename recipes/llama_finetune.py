"""Llama 3.1 / 3.2 finetuning recipes: full SFT and PEFT (Megatron-Bridge's H100 finetuning layouts)."""

from __future__ import annotations

from typing import Any

from bridge.config.container import ConfigContainer
from bridge.models.llama import presets
from recipes.common import RecipeInfo, finetune_config, lora
from recipes.performance import LLAMA, apply

LLAMA_SEQ_LENGTH = 4096


def llama32_1b_sft_config(tensor_model_parallel_size: int = 1, **kwargs: Any) -> ConfigContainer:
    """Llama 3.2 1B full SFT: TP1, 4096-token packed rows, lr 5e-6. Other kwargs: recipes.common."""
    kwargs.setdefault("seq_length", LLAMA_SEQ_LENGTH)
    return finetune_config(
        apply(presets.llama32_1b(), LLAMA), tensor_model_parallel_size=tensor_model_parallel_size, **kwargs
    )


def llama32_1b_peft_config(
    tensor_model_parallel_size: int = 1, peft_scheme: str = "lora", **kwargs: Any
) -> ConfigContainer:
    """Llama 3.2 1B LoRA (or peft_scheme="dora"): dim 32, alpha 32 on all four linear layers, lr 1e-4."""
    kwargs.setdefault("seq_length", LLAMA_SEQ_LENGTH)
    return finetune_config(
        apply(presets.llama32_1b(), LLAMA),
        tensor_model_parallel_size=tensor_model_parallel_size,
        peft=lora(peft_scheme),
        **kwargs,
    )


def llama31_8b_sft_config(tensor_model_parallel_size: int = 2, **kwargs: Any) -> ConfigContainer:
    """Llama 3.1 8B full SFT: TP2 (2 GPUs), 4096-token packed rows, lr 5e-6."""
    kwargs.setdefault("seq_length", LLAMA_SEQ_LENGTH)
    return finetune_config(
        apply(presets.llama31_8b(), LLAMA), tensor_model_parallel_size=tensor_model_parallel_size, **kwargs
    )


def llama31_8b_peft_config(
    tensor_model_parallel_size: int = 1, peft_scheme: str = "lora", **kwargs: Any
) -> ConfigContainer:
    """Llama 3.1 8B LoRA: dim 8, alpha 16 on all four linear layers, TP1 (1 GPU), lr 1e-4."""
    kwargs.setdefault("seq_length", LLAMA_SEQ_LENGTH)
    return finetune_config(
        apply(presets.llama31_8b(), LLAMA),
        tensor_model_parallel_size=tensor_model_parallel_size,
        peft=lora(peft_scheme, dim=8, alpha=16.0),
        **kwargs,
    )


RECIPES = (
    RecipeInfo(
        "llama32_1b_sft_config", "llama_finetune", "Llama 3.2 1B full SFT, TP1 (1 GPU)", 1, "finetune"
    ),
    RecipeInfo(
        "llama32_1b_peft_config", "llama_finetune", "Llama 3.2 1B LoRA dim 32, TP1 (1 GPU)", 1, "finetune"
    ),
    RecipeInfo(
        "llama31_8b_sft_config", "llama_finetune", "Llama 3.1 8B full SFT, TP2 (2 GPUs)", 2, "finetune"
    ),
    RecipeInfo(
        "llama31_8b_peft_config", "llama_finetune", "Llama 3.1 8B LoRA dim 8, TP1 (1 GPU)", 1, "finetune"
    ),
)
