"""Imports inside functions are for a lighter import path only.

`import bridge`, the dry run, `bridge plan` and the config tree run without torch, Megatron-Core or
transformers (about a second instead of 10), and a conversion that never reads a config through
transformers does not import it. So a function may import a module that brings a HEAVY package its own
module does not import at its top: that import is the point of the function-level import. Every other
import is at the top of its module: a function-level import of a light module, of the standard library,
or of what the module imports anyway only hides a dependency (and, before the acyclic contract, hid
import cycles).

The heavy packages a module brings are computed from the source: those its top-level imports (outside
functions and `if TYPE_CHECKING:`) reach, directly or through other bridge modules.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Packages that cost seconds to import (or pull those that do), or that a CPU-only install lacks.
HEAVY = {
    "torch",
    # torch's own subpackages that `import torch` does not load (each a few tenths of a second)
    "torch.distributed.checkpoint",
    "torch.distributed.pipelining",
    "torch.distributed.fsdp",
    "torch.distributed.tensor",
    "megatron",
    "transformers",
    "transformer_engine",
    "apex",
    "triton",
    "safetensors",
    "datasets",
    "peft",
    "accelerate",
    "huggingface_hub",
    "tensorboard",
    "wandb",
    "lm_eval",
    "fastapi",
    "uvicorn",
    "jsonschema",
    "psutil",
    "numpy",
    "pyarrow",
    "omegaconf",
    "hydra",
    "tqdm",
}
# Megatron-Core is imported after bridge.parallel.megatron_import.import_megatron() has run (it defers
# torch.compile, about 3 CPU-seconds per rank, and hides warnings Megatron-Core prints on import): the
# runtime and conversion call it first, and every other import of megatron sits in the function that
# needs it, after that call, even in modules that are heavy anyway.
ORDERED_AFTER_SETUP = {"megatron"}
# (importer, imported module) -> why it stays inside the function although the rules above say otherwise
EXCEPTIONS: dict[tuple[str, str], str] = {}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def _modules() -> dict[str, Path]:
    return {_module_name(p): p for folder in ("bridge", "recipes") for p in (ROOT / folder).rglob("*.py")}


def _resolve(importer: str, node: ast.ImportFrom | ast.Import) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    base = node.module or ""
    if node.level:
        package = importer.split(".")
        is_package = _modules()[importer].name == "__init__.py"
        package = package if is_package else package[:-1]
        package = package[: len(package) - (node.level - 1)]
        base = ".".join([*package, base] if base else package)
    names = [f"{base}.{a.name}" for a in node.names]
    return [n if n in _modules() else _lazy_exports(base).get(n.rpartition(".")[2], base) for n in names]


@cache
def _lazy_exports(package: str) -> dict[str, str]:
    """A package's `_LAZY = {name: module}` table (its __getattr__ imports `module` on first use of name)."""
    path = _modules().get(package)
    if path is None or path.name != "__init__.py":
        return {}
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "_LAZY" for t in node.targets):
            return {k: v for k, v in ast.literal_eval(node.value).items() if isinstance(v, str)}
    return {}


def _is_type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


@cache
def _imports(module: str) -> tuple[tuple[str, ...], tuple[tuple[str, int, str], ...]]:
    """(top-level imports, function-level imports as (imported, line, function))."""
    tree = ast.parse(_modules()[module].read_text(encoding="utf-8"))
    top: list[str] = []
    inner: list[tuple[str, int, str]] = []

    def walk(node: ast.AST, function: str | None) -> None:
        for child in ast.iter_child_nodes(node):
            if _is_type_checking(child):
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                for name in _resolve(module, child):
                    (top.append(name) if function is None else inner.append((name, child.lineno, function)))
            here = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else function
            walk(child, here)

    walk(tree, None)
    return tuple(top), tuple(inner)


def _package_chain(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


def _heavy_package(name: str) -> str | None:
    """The HEAVY entry `name` belongs to (the longest that prefixes it), None for any other module."""
    within = [h for h in _package_chain(name) if h in HEAVY]
    return within[-1] if within else None


@cache
def _closure() -> dict[str, frozenset[str]]:
    """Every bridge module -> the HEAVY packages importing it imports: its top-level imports, those of
    the packages it sits in, and (to a fixpoint) those of the bridge modules they import."""
    edges = {
        m: {t for chain in _package_chain(m) if chain in _modules() for t in _imports(chain)[0]}
        for m in _modules()
    }
    found = {m: {_heavy_package(t) for t in ts} - {None} for m, ts in edges.items()}
    changed = True
    while changed:
        changed = False
        for m, ts in edges.items():
            more = set().union(*(found.get(t, ()) for t in ts)) - found[m]
            if more:
                found[m] |= more
                changed = True
    return {m: frozenset(v) for m, v in found.items()}


def heavy_packages(name: str) -> frozenset[str]:
    """The HEAVY packages importing `name` imports."""
    package = _heavy_package(name)
    if package is not None:
        return frozenset({package})
    return _closure().get(name, frozenset())


def is_heavy(name: str) -> bool:
    return bool(heavy_packages(name))


def violations() -> list[str]:
    found = []
    for module in sorted(_modules()):
        has = heavy_packages(module)
        for imported, line, function in _imports(module)[1]:
            if heavy_packages(imported) - has:
                continue  # the point: the module does not import these until this function runs
            if imported.split(".")[0] in ORDERED_AFTER_SETUP:
                continue
            if (module, imported) in EXCEPTIONS:
                continue
            why = "a light module" if not is_heavy(imported) else f"{module} imports its packages anyway"
            found.append(
                f"{_modules()[module].relative_to(ROOT)}:{line} ({function}) imports {imported}: {why}"
            )
    return found


def test_function_level_imports_keep_a_lighter_import_path():
    found = violations()
    assert not found, "move these imports to the top of their module:\n" + "\n".join(found)


# What runs before torch is imported: the config tree, the dry run, the planner, a run's plan.
LIGHT = (
    "bridge",
    "bridge.config.run_plan",
    "bridge.models.gpt_provider",
    "bridge.parallel.planner.search",
    "bridge.training.process_plan",
    "recipes",
)


def test_the_light_modules_are_light_and_the_analysis_sees_what_python_imports():
    for module in LIGHT:
        assert not is_heavy(module), module
    assert is_heavy("bridge.training.train") and is_heavy("bridge.conversion.weight_loader")
    # the analysis against the interpreter: importing each light module imports no heavy package
    code = f"import importlib, sys\nfor m in {LIGHT!r}: importlib.import_module(m)\n"
    code += f"print(sorted(set(sys.modules) & set({sorted(HEAVY)!r})))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stdout + out.stderr


def test_exceptions_are_still_needed():
    listed = {(m, i) for m in _modules() for i, _, _ in _imports(m)[1]}
    assert set(EXCEPTIONS) <= listed, set(EXCEPTIONS) - listed
