"""YAML in and out of a config tree.

`to_yaml` / `from_yaml` round-trip a tree without loss (run_config.yaml next to checkpoints).
`merge_yaml` applies a partial YAML file (`--config-file`) on top of a tree, in the tree's own shape or
in NeMo AutoModel's `distributed:` form (bridge.config.automodel), with the same strict key and type
checks as command-line overrides.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any, TypeVar

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from bridge.config import tree
from bridge.config.automodel import automodel_keys, translate_automodel, translate_automodel_deferred
from bridge.errors import ConfigError
from bridge.models.vlm_provider import VLMModelProvider

T = TypeVar("T")


def to_container_dict(obj: Any) -> dict[str, Any]:
    return OmegaConf.to_container(tree.structured(obj), resolve=True)


def to_yaml(obj: Any) -> str:
    return OmegaConf.to_yaml(tree.structured(obj), resolve=True)


def load_yaml_text(text: str, source: str = "YAML") -> dict[str, Any]:
    """Parse YAML text into plain dicts (OmegaConf's loader: `3e-4` is a float, as users expect)."""
    try:
        data = OmegaConf.create(text) if text.strip() else OmegaConf.create({})
    except (OmegaConfBaseException, ValueError) as e:  # yaml errors are ValueErrors here or subclasses
        raise ConfigError(f"{source}: not valid YAML ({tree._first_line(e)}).") from None
    except Exception as e:
        raise ConfigError(f"{source}: not valid YAML ({type(e).__name__}: {tree._first_line(e)}).") from None
    if not OmegaConf.is_dict(data):
        raise ConfigError(
            f"{source}: the top level must be a mapping of section names, not a list or a scalar."
        )
    return OmegaConf.to_container(data, resolve=False)


def from_yaml(cls: type[T], text: str, source: str = "YAML") -> T:
    """A full tree of type `cls` from YAML in its own shape; unset fields keep their defaults."""
    data = load_yaml_text(text, source)
    model = data.get("model") if isinstance(data, dict) else None
    if isinstance(model, dict) and "vlm_config" in model and "model" in {f.name for f in fields(cls)}:
        node = OmegaConf.structured(cls(model=VLMModelProvider()))  # a vision-language model section
    else:
        node = OmegaConf.structured(cls)
    tree.merge_dict(node, data, tree.dotted_keys(_defaults_for_keys(node)), source)
    return tree.to_object(node)


def merge_yaml(cfg: T, text: str, source: str = "config file") -> tuple[T, list[str]]:
    """`cfg` with a partial YAML merged on top (own shape or AutoModel form). Returns (tree, warnings)."""
    data = load_yaml_text(text, source)
    data, warnings = translate_automodel(data, cfg, source)
    node = tree.structured(cfg)
    # suggestions for a misspelt key come from both vocabularies
    tree.merge_dict(node, data, tree.dotted_keys(cfg) + automodel_keys(), source)
    return tree.to_object(node), warnings


def merge_yaml_deferred(cfg: T, text: str, source: str = "config file") -> tuple[T, list[str], Any]:
    """As merge_yaml, with the AutoModel values derived from other fields left for later: returns (tree,
    warnings, bridge.config.automodel.DerivedSettings), applied once the command line is merged too."""
    data = load_yaml_text(text, source)
    data, warnings, derived = translate_automodel_deferred(data, cfg, source)
    node = tree.structured(cfg)
    tree.merge_dict(node, data, tree.dotted_keys(cfg) + automodel_keys(), source)
    return tree.to_object(node), warnings, derived


def _defaults_for_keys(node) -> dict:
    return tree.to_object_lenient(node)
