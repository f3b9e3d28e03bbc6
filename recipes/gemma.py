"""Gemma 2 pretraining recipes (Megatron-Bridge's gemma2_*_pretrain_config layouts and batch sizes).

Megatron-Bridge's Gemma 2 recipes train 4096-token sequences, global batch 32 of micro batches of 2,
for 300,000 iterations; the optimizer and schedule are the shared pretraining values (recipes.common).
"""

from __future__ import annotations

from typing import Any

from bridge.config.container import ConfigContainer
from bridge.models.gemma2.presets import gemma2_2b, gemma2_9b, gemma2_27b
from recipes.common import RecipeInfo, pretrain_config
from recipes.performance import GEMMA2, apply

GEMMA2_RUN = dict(seq_length=4096, train_iters=300_000, global_batch_size=32, micro_batch_size=2)


def _gemma2(model, **layout: Any) -> ConfigContainer:
    return pretrain_config(model, **{**GEMMA2_RUN, **layout})


def gemma2_2b_pretrain_config(
    tensor_model_parallel_size: int = 2,
    pipeline_model_parallel_size: int = 1,
    virtual_pipeline_model_parallel_size: int | None = None,
    context_parallel_size: int = 1,
    sequence_parallel: bool = False,
    **kwargs: Any,
) -> ConfigContainer:
    """Gemma 2 2B: TP2."""
    return _gemma2(
        apply(gemma2_2b(), GEMMA2),
        tensor_model_parallel_size=tensor_model_parallel_size,
        pipeline_model_parallel_size=pipeline_model_parallel_size,
        virtual_pipeline_model_parallel_size=virtual_pipeline_model_parallel_size,
        context_parallel_size=context_parallel_size,
        sequence_parallel=sequence_parallel,
        **kwargs,
    )


def gemma2_9b_pretrain_config(
    tensor_model_parallel_size: int = 8,
    pipeline_model_parallel_size: int = 1,
    virtual_pipeline_model_parallel_size: int | None = None,
    context_parallel_size: int = 1,
    sequence_parallel: bool = False,
    **kwargs: Any,
) -> ConfigContainer:
    """Gemma 2 9B: TP8."""
    return _gemma2(
        apply(gemma2_9b(), GEMMA2),
        tensor_model_parallel_size=tensor_model_parallel_size,
        pipeline_model_parallel_size=pipeline_model_parallel_size,
        virtual_pipeline_model_parallel_size=virtual_pipeline_model_parallel_size,
        context_parallel_size=context_parallel_size,
        sequence_parallel=sequence_parallel,
        **kwargs,
    )


def gemma2_27b_pretrain_config(
    tensor_model_parallel_size: int = 8,
    pipeline_model_parallel_size: int = 2,
    virtual_pipeline_model_parallel_size: int | None = None,
    context_parallel_size: int = 1,
    sequence_parallel: bool = False,
    **kwargs: Any,
) -> ConfigContainer:
    """Gemma 2 27B: TP8 PP2 (46 layers, 23 per stage)."""
    return _gemma2(
        apply(gemma2_27b(), GEMMA2),
        tensor_model_parallel_size=tensor_model_parallel_size,
        pipeline_model_parallel_size=pipeline_model_parallel_size,
        virtual_pipeline_model_parallel_size=virtual_pipeline_model_parallel_size,
        context_parallel_size=context_parallel_size,
        sequence_parallel=sequence_parallel,
        **kwargs,
    )


RECIPES = (
    RecipeInfo("gemma2_2b_pretrain_config", "gemma", "Gemma 2 2B pretraining, TP2 (8 GPUs: DP4)", 8),
    RecipeInfo("gemma2_9b_pretrain_config", "gemma", "Gemma 2 9B pretraining, TP8 (8 GPUs: DP1)", 8),
    RecipeInfo("gemma2_27b_pretrain_config", "gemma", "Gemma 2 27B pretraining, TP8 PP2 (16 GPUs: DP1)", 16),
)
