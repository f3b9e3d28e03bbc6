"""A family is one folder: no module under bridge/ outside bridge/models/<family>/, and no shared module of
recipes/, names a family.

Naming a family is importing bridge.models.<family>, or a string literal equal to a family folder's
name, to an HF model_type or to an architecture some family registers. Generic code branches on the
hooks and data a family declares (bridge.models.hf_translation.rules), never on which family it is.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

from bridge.models.families import families
from bridge.models.hf_translation.registry import hf_families

ROOT = Path(__file__).resolve().parents[2]
BRIDGE = ROOT / "bridge"


def _family_names() -> tuple[set[str], set[str]]:
    """(family folder names, every name that designates a family: folders, model types, architectures)."""
    folders = set(families())
    names = set(folders) | set(hf_families())
    for info in families().values():
        if info.mapping_module:
            mapping = importlib.import_module(info.mapping_module)
            names |= set(mapping.ARCHITECTURES) | set(getattr(mapping, "REFUSED_ARCHITECTURES", {}))
    return folders, names


def _generic_modules(folders: set[str]) -> list[Path]:
    """bridge/ outside the family folders, and the recipes' shared modules (a family's recipe module,
    recipes/<family>.py, names its family by design)."""
    import recipes

    family_dirs = {BRIDGE / "models" / name for name in folders}
    library = [p for p in sorted(BRIDGE.rglob("*.py")) if not any(d in p.parents for d in family_dirs)]
    shared = [ROOT / "recipes" / f"{name}.py" for name in (*recipes.SHARED_MODULES, "__init__")]
    return library + shared


def _mentions(source: str, label: str, folders: set[str], names: set[str]) -> list[str]:
    found = []
    family_modules = {f"bridge.models.{name}" for name in folders}
    for node in ast.walk(ast.parse(source)):
        imported: list[str] = []
        if isinstance(node, ast.Import):
            imported = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        for module in imported:
            if any(module == m or module.startswith(m + ".") for m in family_modules):
                found.append(f"{label}:{node.lineno} imports {module}")
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names:
            found.append(f"{label}:{node.lineno} names {node.value!r}")
    return found


def test_the_check_sees_the_families():
    folders, names = _family_names()
    assert len(folders) >= 12 and folders < names
    assert any(n.endswith("ForCausalLM") for n in names)


def test_no_generic_module_names_a_family():
    folders, names = _family_names()
    found = [
        mention
        for path in _generic_modules(folders)
        for mention in _mentions(
            path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)), folders, names
        )
    ]
    assert not found, "generic modules naming a family:\n" + "\n".join(found)


def test_the_check_catches_an_import_and_a_literal():
    folders, names = _family_names()
    family = sorted(folders)[0]
    architecture = sorted(n for n in names if n.endswith("ForCausalLM"))[0]
    code = f"from bridge.models.{family} import presets\nimport bridge.models.{family}.mapping\n"
    code += f"KIND = {family!r}\nARCH = {architecture!r}\nOTHER = 'a {family} model'\n"
    # the module and its member, the second import, the two literals; not a longer string
    assert len(_mentions(code, "probe.py", folders, names)) == 5
