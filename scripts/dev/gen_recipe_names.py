"""Write, at the end of every recipe module, the block that binds each name its recipes answer to.

A recipe module declares its recipes as table rows (recipes.composition.Row); this block makes every
canonical name and alias a literal module attribute, so a name a user types is found by grep and by an
IDE. tests/unit/test_recipe_names.py checks each block against the rows; after changing a row, run
`python scripts/dev/gen_recipe_names.py`.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MARKER = "# ---- the recipe functions by every name they answer to"


def names_block(module) -> str:
    lines = [
        f"{MARKER} (generated from the rows by scripts/dev/gen_recipe_names.py;",
        "# tests/unit/test_recipe_names.py checks it) ----",
        "RECIPES, _functions = register(ROWS, __name__)",
        "# fmt: off",
    ]
    from recipes.composition import register

    infos, _ = register(module.ROWS, module.__name__)
    for info in infos:
        lines.append(f'{info.name} = _functions["{info.name}"]')
        lines += [f"{alias} = {info.name}" for alias in info.aliases]
    return "\n".join([*lines, "# fmt: on"]) + "\n"


def recipe_modules():
    sys.path.insert(0, str(ROOT))
    from recipes import SHARED_MODULES

    folder = ROOT / "recipes"
    for info in sorted(pkgutil.iter_modules([str(folder)]), key=lambda m: m.name):
        if info.name not in SHARED_MODULES:
            yield importlib.import_module(f"recipes.{info.name}")


def expected_source(module) -> str:
    source = Path(module.__file__).read_text()
    head = source.split(MARKER)[0] if MARKER in source else source
    return head.rstrip("\n") + "\n\n\n" + names_block(module)


def main() -> None:
    for module in recipe_modules():
        path = Path(module.__file__)
        new = expected_source(module)
        if path.read_text() != new:
            path.write_text(new)
            print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
