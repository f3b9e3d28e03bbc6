"""Mixtral pretraining recipe (NeMo's published Mixtral 8x7B layout)."""

from __future__ import annotations

from typing import Any

from bridge.config.container import ConfigContainer
from bridge.models.mixtral.presets import mixtral_8x7b
from recipes.common import RecipeInfo, pretrain_config
from recipes.performance import MIXTRAL, apply


def mixtral_8x7b_pretrain_config(
    tensor_model_parallel_size: int = 1,
    pipeline_model_parallel_size: int = 4,
    virtual_pipeline_model_parallel_size: int | None = 8,
    context_parallel_size: int = 1,
    expert_model_parallel_size: int = 8,
    sequence_parallel: bool = False,
    **kwargs: Any,
) -> ConfigContainer:
    """Mixtral 8x7B (8 experts, top-2): TP1 PP4 with 8 virtual stages, EP8.

    NeMo's recipe also lists sequence_parallel=True, which Megatron silently drops at TP=1; here SP
    without TP is an error, so it is off.
    """
    return pretrain_config(
        apply(mixtral_8x7b(), MIXTRAL),
        tensor_model_parallel_size=tensor_model_parallel_size,
        pipeline_model_parallel_size=pipeline_model_parallel_size,
        virtual_pipeline_model_parallel_size=virtual_pipeline_model_parallel_size,
        context_parallel_size=context_parallel_size,
        expert_model_parallel_size=expert_model_parallel_size,
        sequence_parallel=sequence_parallel,
        **kwargs,
    )


RECIPES = (
    RecipeInfo(
        "mixtral_8x7b_pretrain_config",
        "mixtral",
        "Mixtral 8x7B MoE pretraining, TP1 PP4 VPP8 EP8 (32 GPUs: DP8 EDP1)",
        32,
    ),
)
