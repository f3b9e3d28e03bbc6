"""Every name a recipe answers to is written literally in its module (found by grep and by an IDE), and
the written names are exactly the rows' names: scripts/dev/gen_recipe_names.py writes the block."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import recipes

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("gen_recipe_names", ROOT / "scripts/dev/gen_recipe_names.py")
gen = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gen)


def test_every_recipe_module_binds_every_name_of_its_rows():
    stale = [
        m.__name__ for m in gen.recipe_modules() if Path(m.__file__).read_text() != gen.expected_source(m)
    ]
    assert not stale, f"run `python scripts/dev/gen_recipe_names.py` (stale blocks in {stale})"


def test_every_name_and_alias_is_a_literal_module_attribute():
    source = "\n".join(p.read_text() for p in (ROOT / "recipes").glob("*.py"))
    bound = set(re.findall(r"^(\w+_config\w*) = ", source, flags=re.M))
    names = set(recipes.RECIPES) | set(recipes.ALIASES)
    assert names <= bound, sorted(names - bound)[:10]
    for name in names:
        info = recipes.recipe_info(name)
        assert getattr(importlib.import_module(f"recipes.{info.module}"), name) is info.factory


def test_no_recipe_module_generates_its_names_at_import():
    for path in (ROOT / "recipes").glob("*.py"):
        assert "globals()" not in path.read_text(), path.name
