"""Recipes: plain functions returning a ConfigContainer, found by name.

    from recipes import get_recipe, list_recipes
    cfg = get_recipe("llama32_1b_pretrain_config")(tensor_model_parallel_size=2)

Each entry states the world size its default layout is meant for (`default_world_size`: the published
layout's GPU count, at least its minimum); tests validate every recipe there.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable

from bridge.errors import ConfigError
from recipes.common import RecipeInfo

# the modules every recipe module draws on, holding no recipe of their own
SHARED_MODULES = ("common", "performance")


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
