"""Recipes: plain functions returning a ConfigContainer, found by name.

    from recipes import get_recipe, list_recipes
    cfg = get_recipe("llama32_1b_pretrain_config")(tensor_model_parallel_size=2)

Each entry states the world size its default layout is meant for (`default_world_size`: the published
layout's GPU count, at least its minimum); tests validate every recipe there.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

from bridge.errors import ConfigError


@dataclass(frozen=True)
class RecipeInfo:
    name: str
    module: str  # recipes.<module> holds a function called `name`
    description: str
    default_world_size: int


_TABLE = (
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
    RecipeInfo("qwen3_8b_pretrain_config", "qwen", "Qwen3 8B pretraining, TP4 PP1 (8 GPUs: DP2)", 8),
    RecipeInfo(
        "qwen3_30b_a3b_pretrain_config",
        "qwen",
        "Qwen3-30B-A3B MoE pretraining, TP4 PP2 EP4 SP (8 GPUs: DP1 EDP1)",
        8,
    ),
    RecipeInfo(
        "mixtral_8x7b_pretrain_config",
        "mixtral",
        "Mixtral 8x7B MoE pretraining, TP1 PP4 VPP8 EP8 (32 GPUs: DP8 EDP1)",
        32,
    ),
)
RECIPES: dict[str, RecipeInfo] = {info.name: info for info in _TABLE}


def list_recipes() -> list[tuple[str, str]]:
    """(name, one-line description) of every recipe, in a stable order."""
    return [(info.name, info.description) for info in _TABLE]


def recipe_info(name: str) -> RecipeInfo:
    info = RECIPES.get(name)
    if info is None:
        import difflib

        close = difflib.get_close_matches(name, RECIPES, n=3)
        hint = f"did you mean {', '.join(close)}? " if close else ""
        raise ConfigError(f"--recipe {name!r}: no such recipe. Fix: {hint}see --list-recipes.")
    return info


def get_recipe(name: str) -> Callable[..., object]:
    """The recipe function called `name` (raises ConfigError with close matches if unknown)."""
    info = recipe_info(name)
    return getattr(importlib.import_module(f"recipes.{info.module}"), info.name)


__all__ = ["RECIPES", "RecipeInfo", "get_recipe", "list_recipes", "recipe_info"]
