"""Recipes: plain functions returning a ConfigContainer, found by name.

    from recipes import get_recipe, list_recipes
    cfg = get_recipe("llama32_1b_pretrain_config")(tensor_model_parallel_size=2)

A family's recipes are one table file (recipes.composition: a base per kind + the preset + a row of what
differs; docs/recipes.md). Each entry states the world size its published layout is meant for
(`default_world_size`: Megatron-Bridge's GPU count); tests dry-run every recipe there. A recipe answers to
its canonical name (Megatron-Bridge's, e.g. llama3_8b_pretrain_2gpu_h100_bf16_config) and its aliases
(Megatron-Bridge's short names, e.g. llama3_8b_pretrain_config).
"""

from __future__ import annotations

import difflib
import importlib
import pkgutil
from collections.abc import Callable

from bridge.errors import ConfigError
from recipes.common import RecipeInfo

# the modules every recipe module draws on, holding no recipe of their own
SHARED_MODULES = ("common", "composition", "dry_run", "gpu_settings", "listing", "runs")


def _discover() -> tuple[RecipeInfo, ...]:
    """Every recipe module under recipes/ (all but SHARED_MODULES) declares its RECIPES: adding a recipe
    file is all it takes. Modules in name order, recipes in the order each module lists them."""
    found: list[RecipeInfo] = []
    for module in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if module.name in SHARED_MODULES:
            continue
        found += importlib.import_module(f"recipes.{module.name}").RECIPES
    return tuple(found)


_TABLE = _discover()
RECIPES: dict[str, RecipeInfo] = {info.name: info for info in _TABLE}
# every other name a recipe answers to -> its canonical name
ALIASES: dict[str, str] = {alias: info.name for info in _TABLE for alias in info.aliases}


def list_recipes() -> list[tuple[str, str]]:
    """(name, one-line description) of every recipe, in a stable order."""
    return [(info.name, info.description) for info in _TABLE]


def recipe_info(name: str) -> RecipeInfo:
    """The recipe called `name` (canonical or alias; raises ConfigError with close matches if unknown)."""
    info = RECIPES.get(ALIASES.get(name, name))
    if info is None:
        close = difflib.get_close_matches(name, [*RECIPES, *ALIASES], n=3)
        hint = f"did you mean {', '.join(close)}? " if close else ""
        raise ConfigError(f"--recipe {name!r}: no such recipe. Fix: {hint}see --list-recipes.")
    return info


def get_recipe(name: str) -> Callable[..., object]:
    """The recipe function called `name` (raises ConfigError with close matches if unknown)."""
    info = recipe_info(name)
    if info.factory is not None:
        return info.factory
    return getattr(importlib.import_module(f"recipes.{info.module}"), info.name)


__all__ = ["ALIASES", "RECIPES", "RecipeInfo", "get_recipe", "list_recipes", "recipe_info"]
