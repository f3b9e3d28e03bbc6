"""Qwen3 pretraining recipes (published Megatron-Bridge layouts)."""

from __future__ import annotations

from typing import Any

from bridge.config.container import ConfigContainer
from bridge.models.qwen3.presets import qwen3_8b
from bridge.models.qwen3_moe.presets import qwen3_30b_a3b
from recipes.common import RecipeInfo, pretrain_config
from recipes.performance import QWEN3, QWEN3_MOE, apply


def qwen3_8b_pretrain_config(
    tensor_model_parallel_size: int = 4,
    pipeline_model_parallel_size: int = 1,
    virtual_pipeline_model_parallel_size: int | None = None,
    context_parallel_size: int = 1,
    sequence_parallel: bool = False,
    **kwargs: Any,
) -> ConfigContainer:
    """Qwen3 8B: TP4 PP1."""
    return pretrain_config(
        apply(qwen3_8b(), QWEN3),
        tensor_model_parallel_size=tensor_model_parallel_size,
        pipeline_model_parallel_size=pipeline_model_parallel_size,
        virtual_pipeline_model_parallel_size=virtual_pipeline_model_parallel_size,
        context_parallel_size=context_parallel_size,
        sequence_parallel=sequence_parallel,
        **kwargs,
    )


def qwen3_30b_a3b_pretrain_config(
    tensor_model_parallel_size: int = 4,
    pipeline_model_parallel_size: int = 2,
    virtual_pipeline_model_parallel_size: int | None = None,
    context_parallel_size: int = 1,
    expert_model_parallel_size: int = 4,
    sequence_parallel: bool = True,
    **kwargs: Any,
) -> ConfigContainer:
    """Qwen3-30B-A3B MoE (128 experts, top-8): TP4 PP2 EP4, SP on (MoE with TP > 1 needs it)."""
    return pretrain_config(
        apply(qwen3_30b_a3b(), QWEN3_MOE),
        tensor_model_parallel_size=tensor_model_parallel_size,
        pipeline_model_parallel_size=pipeline_model_parallel_size,
        virtual_pipeline_model_parallel_size=virtual_pipeline_model_parallel_size,
        context_parallel_size=context_parallel_size,
        expert_model_parallel_size=expert_model_parallel_size,
        sequence_parallel=sequence_parallel,
        **kwargs,
    )


RECIPES = (
    RecipeInfo("qwen3_8b_pretrain_config", "qwen", "Qwen3 8B pretraining, TP4 PP1 (8 GPUs: DP2)", 8),
    RecipeInfo(
        "qwen3_30b_a3b_pretrain_config",
        "qwen",
        "Qwen3-30B-A3B MoE pretraining, TP4 PP2 EP4 SP (8 GPUs: DP1 EDP1)",
        8,
    ),
)
