"""Llama 3.1 / 3.2 pretraining recipes (published Megatron-Bridge layouts)."""

from __future__ import annotations

from typing import Any

from bridge.config.container import ConfigContainer
from bridge.models.llama import presets
from recipes.common import RecipeInfo, pretrain_config
from recipes.performance import LLAMA, LLAMA_70B, USERBUFFERS_BF16_H100_H8192_TP4_MBS1_SEQ8192, apply


def llama32_1b_pretrain_config(
    tensor_model_parallel_size: int = 1,
    pipeline_model_parallel_size: int = 1,
    virtual_pipeline_model_parallel_size: int | None = None,
    context_parallel_size: int = 1,
    sequence_parallel: bool = False,
    **kwargs: Any,
) -> ConfigContainer:
    """Llama 3.2 1B: TP1 PP1 CP1 (one node, all data parallel). Other kwargs: see recipes.common."""
    return pretrain_config(
        apply(presets.llama32_1b(), LLAMA),
        tensor_model_parallel_size=tensor_model_parallel_size,
        pipeline_model_parallel_size=pipeline_model_parallel_size,
        virtual_pipeline_model_parallel_size=virtual_pipeline_model_parallel_size,
        context_parallel_size=context_parallel_size,
        sequence_parallel=sequence_parallel,
        **kwargs,
    )


def llama32_3b_pretrain_config(
    tensor_model_parallel_size: int = 1,
    pipeline_model_parallel_size: int = 1,
    virtual_pipeline_model_parallel_size: int | None = None,
    context_parallel_size: int = 1,
    sequence_parallel: bool = False,
    **kwargs: Any,
) -> ConfigContainer:
    """Llama 3.2 3B: TP1 PP1 CP1."""
    return pretrain_config(
        apply(presets.llama32_3b(), LLAMA),
        tensor_model_parallel_size=tensor_model_parallel_size,
        pipeline_model_parallel_size=pipeline_model_parallel_size,
        virtual_pipeline_model_parallel_size=virtual_pipeline_model_parallel_size,
        context_parallel_size=context_parallel_size,
        sequence_parallel=sequence_parallel,
        **kwargs,
    )


def llama31_8b_pretrain_config(
    tensor_model_parallel_size: int = 1,
    pipeline_model_parallel_size: int = 1,
    virtual_pipeline_model_parallel_size: int | None = None,
    context_parallel_size: int = 2,
    sequence_parallel: bool = False,
    **kwargs: Any,
) -> ConfigContainer:
    """Llama 3.1 8B: TP1 PP1 CP2 (context parallel for the 8K sequence)."""
    return pretrain_config(
        apply(presets.llama31_8b(), LLAMA),
        tensor_model_parallel_size=tensor_model_parallel_size,
        pipeline_model_parallel_size=pipeline_model_parallel_size,
        virtual_pipeline_model_parallel_size=virtual_pipeline_model_parallel_size,
        context_parallel_size=context_parallel_size,
        sequence_parallel=sequence_parallel,
        **kwargs,
    )


def llama31_70b_pretrain_config(
    tensor_model_parallel_size: int = 4,
    pipeline_model_parallel_size: int = 4,
    virtual_pipeline_model_parallel_size: int | None = 5,
    context_parallel_size: int = 2,
    sequence_parallel: bool = True,
    **kwargs: Any,
) -> ConfigContainer:
    """Llama 3.1 70B, multi-node: TP4 PP4 with 5 virtual stages (interleaved 1F1B), CP2, SP on; TP
    communication overlapped with userbuffers (Megatron-Bridge's H100 settings for this shape)."""
    cfg = pretrain_config(
        apply(presets.llama31_70b(), LLAMA_70B),
        tensor_model_parallel_size=tensor_model_parallel_size,
        pipeline_model_parallel_size=pipeline_model_parallel_size,
        virtual_pipeline_model_parallel_size=virtual_pipeline_model_parallel_size,
        context_parallel_size=context_parallel_size,
        sequence_parallel=sequence_parallel,
        **kwargs,
    )
    cfg.distributed.tp_comm_overlap_cfg = dict(USERBUFFERS_BF16_H100_H8192_TP4_MBS1_SEQ8192)
    return cfg


RECIPES = (
    RecipeInfo("llama32_1b_pretrain_config", "llama", "Llama 3.2 1B pretraining, TP1 PP1 (8 GPUs: DP8)", 8),
    RecipeInfo("llama32_3b_pretrain_config", "llama", "Llama 3.2 3B pretraining, TP1 PP1 (8 GPUs: DP8)", 8),
    RecipeInfo(
        "llama31_8b_pretrain_config", "llama", "Llama 3.1 8B pretraining, TP1 PP1 CP2 (8 GPUs: DP4)", 8
    ),
    RecipeInfo(
        "llama31_70b_pretrain_config",
        "llama",
        "Llama 3.1 70B pretraining, TP4 PP4 VPP5 CP2 SP (64 GPUs: DP2)",
        64,
    ),
)
