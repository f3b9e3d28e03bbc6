"""Edits of a dataclass tree through OmegaConf, with ConfigError messages users can act on.

Overrides (bridge.config.overrides) and YAML merges (bridge.config.yaml_io) both go through here, so a
wrong key or a wrong type reads the same wherever it came from. The tree is turned into an OmegaConf
structured config (which type-checks every assignment against the dataclass field types), edited, then
turned back into dataclasses with OmegaConf.to_object.

Semantics of the edit kinds (Hydra's override grammar):
- set `key=value`: the key must exist; a dict value merges into a dataclass section (only the keys given
  change), any other value replaces.
- add `+key=value`: only where adding makes sense, i.e. a new key inside a dict-typed (or Any) field;
  dataclass sections have a fixed set of fields. Adding a key that already exists is an error.
- force-add `++key=value`: set if the key exists, add otherwise.
- delete `~key`: inside a dict-typed field the key is removed; a dataclass field is reset to its
  dataclass default (e.g. `~checkpoint.save` -> None, `~train.micro_batch_size` -> 1), not to the recipe's
  value. `~key=value` deletes only if the current value equals `value`.
"""

from __future__ import annotations

import dataclasses
import difflib
import typing
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, MissingMandatoryValue, OmegaConfBaseException, ValidationError

from bridge.errors import ConfigError

_ABSENT = object()


def structured(obj: Any) -> DictConfig:
    """The OmegaConf view of a dataclass instance (a copy: editing it leaves `obj` alone)."""
    try:
        return OmegaConf.structured(obj)
    except OmegaConfBaseException as e:  # a field value that does not fit its declared type
        raise ConfigError(
            f"{_full_key(e)}: {_first_line(e)}. Fix: give a value of the declared type."
        ) from None


def to_object(node: DictConfig) -> Any:
    """Back to the dataclass tree; required fields left unset are reported by name."""
    try:
        return OmegaConf.to_object(node)
    except MissingMandatoryValue as e:
        raise ConfigError(f"{_full_key(e)} is required but not set. Fix: give it a value.") from None
    except ConfigError:
        raise
    except OmegaConfBaseException as e:  # e.g. a ${...} interpolation that points nowhere
        raise ConfigError(
            f"{_full_key(e)}: {_first_line(e)}. Fix: correct that value (or the ${{...}} reference in it)."
        ) from None


# ---- keys --------------------------------------------------------------------------------------


def dotted_keys(obj: Any, prefix: str = "") -> list[str]:
    """Every settable dotted key of a dataclass tree (dict fields contribute their current keys)."""
    keys = []
    if dataclasses.is_dataclass(obj):
        items = ((f.name, getattr(obj, f.name)) for f in dataclasses.fields(obj))
    elif isinstance(obj, dict):
        items = obj.items()
    else:
        return keys
    for name, value in items:
        key = f"{prefix}{name}"
        keys.append(key)
        if dataclasses.is_dataclass(value) or isinstance(value, dict):
            keys.extend(dotted_keys(value, key + "."))
    return keys


def suggest(key: str, keys: list[str], n: int = 3) -> str:
    """' Did you mean a.b, a.c?' for the closest existing keys (by full key, then by last component)."""
    keys = [k for k in keys if not key.startswith(k + ".")]  # "model" is no suggestion for "model.foo"
    close = difflib.get_close_matches(key, keys, n=n, cutoff=0.6)
    if not close:
        leaf = key.rsplit(".", 1)[-1]
        by_leaf: dict[str, list[str]] = {}
        for k in keys:
            by_leaf.setdefault(k.rsplit(".", 1)[-1], []).append(k)
        for match in difflib.get_close_matches(leaf, list(by_leaf), n=n, cutoff=0.7):
            close.extend(by_leaf[match])
        close = close[:n]
    return f" Did you mean {', '.join(close)}?" if close else ""


def _split(key: str) -> tuple[str, str]:
    parent, _, leaf = key.rpartition(".")
    return parent, leaf


def _get(node: DictConfig, key: str) -> Any:
    if key == "":
        return node
    return OmegaConf.select(node, key, default=_ABSENT, throw_on_missing=False)


def _is_section(value: Any) -> bool:
    """A dataclass-backed node: fixed fields, nothing can be added."""
    return isinstance(value, DictConfig) and OmegaConf.get_type(value) not in (dict, None)


def _unknown_key(node: DictConfig, key: str, known: list[str], source: str, hint: str = "") -> ConfigError:
    parent_key, _ = _split(key)
    parent = _get(node, parent_key)
    where = f"'{parent_key}'" if parent_key else "the config"
    if _is_section(parent):
        what = f"{where} has no field '{_split(key)[1]}'"
    elif parent is _ABSENT:
        what = f"no such key ('{parent_key}' does not exist)"
    else:
        what = f"{where} has no key '{_split(key)[1]}'"
    msg = f"{source}: unknown key {key}: {what}.{suggest(key, known)}"
    return ConfigError(msg + (f" {hint}" if hint else ""))


def _field_type(node: DictConfig, key: str) -> str:
    """The declared type of `key` as users write it (int, float | None, list[str], ...)."""
    parent_key, leaf = _split(key)
    parent = _get(node, parent_key)
    cls = OmegaConf.get_type(parent) if isinstance(parent, DictConfig) else None
    if cls is None or not dataclasses.is_dataclass(cls):
        return "a value"
    hint = typing.get_type_hints(cls).get(leaf)
    if hint is None:
        return "a value"
    text = getattr(hint, "__name__", None) if isinstance(hint, type) else None
    text = text or str(hint).replace("typing.", "").replace("NoneType", "None")
    if text.startswith("Optional[") and text.endswith("]"):
        text = f"{text[len('Optional[') : -1]} | None"
    return text


def _type_error(node: DictConfig, key: str, value: Any, err: Exception, source: str) -> ConfigError:
    current = _get(node, key)
    if isinstance(current, (DictConfig, ListConfig)):
        current = OmegaConf.to_container(current)
    now = "" if current is _ABSENT else f" (current value: {current!r})"
    return ConfigError(
        f"{source}: {key} expects {_field_type(node, key)}, got {value!r} ({type(value).__name__}){now}. "
        f"Fix: give {_field_type(node, key)}. [{_first_line(err)}]"
    )


# ---- edits -------------------------------------------------------------------------------------


def set_key(node: DictConfig, key: str, value: Any, known: list[str], source: str) -> None:
    if _get(node, key) is _ABSENT:
        parent = _get(node, _split(key)[0])
        hint = "" if _is_section(parent) or parent is _ABSENT else f"To add a new key use +{key}=..."
        raise _unknown_key(node, key, known, source, hint)
    _assign(node, key, value, source, merge=isinstance(value, dict) and _is_section(_get(node, key)))


def add_key(node: DictConfig, key: str, value: Any, known: list[str], source: str, force: bool) -> None:
    current = _get(node, key)
    if current is not _ABSENT:
        if force:
            set_key(node, key, value, known, source)
            return
        raise ConfigError(
            f"{source}: cannot add {key}: it already exists (value {_plain(current)!r}). "
            f"Fix: use {key}=... to change it (or ++{key}=... to set-or-add)."
        )
    parent_key, leaf = _split(key)
    parent = _get(node, parent_key)
    if parent is _ABSENT or _is_section(parent):
        raise _unknown_key(
            node,
            key,
            known,
            source,
            "Only dict-typed fields take new keys; sections have a fixed set of fields.",
        )
    if parent is None:  # an unset Any / Optional[dict] field: it becomes a dict holding this key
        _assign(node, parent_key, {leaf: value}, source, merge=False)
        return
    if not isinstance(parent, DictConfig):
        raise ConfigError(f"{source}: cannot add {key}: {parent_key} holds {_plain(parent)!r}, not a dict.")
    _assign(node, key, value, source, merge=False, add=True)


def delete_key(node: DictConfig, key: str, value: Any, known: list[str], source: str) -> None:
    current = _get(node, key)
    if current is _ABSENT:
        raise _unknown_key(node, key, known, source)
    if value is not None and _plain(current) != value:
        raise ConfigError(
            f"{source}: ~{key}={value!r} deletes only when the current value matches, "
            f"but it is {_plain(current)!r}. Fix: use ~{key} to delete unconditionally."
        )
    parent_key, leaf = _split(key)
    parent = _get(node, parent_key)
    if _is_section(parent):
        cls = OmegaConf.get_type(parent)
        (f,) = [f for f in dataclasses.fields(cls) if f.name == leaf]
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            raise ConfigError(
                f"{source}: cannot delete {key}: it is required and has no default. Fix: set it."
            )
        _assign(node, key, default, source, merge=False)
    else:
        del parent[leaf]


def _assign(node: DictConfig, key: str, value: Any, source: str, merge: bool, add: bool = False) -> None:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = OmegaConf.structured(value)
    try:
        OmegaConf.update(node, key, value, merge=merge, force_add=add)
    except ConfigKeyError as e:  # a dict merged into a section with a key the section lacks
        bad = _full_key(e)
        raise _unknown_key(node, bad, dotted_keys(to_object_lenient(node)), source) from None
    except (ValidationError, OmegaConfBaseException) as e:
        bad = _full_key(e) or key
        shown = value.get(bad[len(key) + 1 :], value) if isinstance(value, dict) and bad != key else value
        raise _type_error(node, bad, shown, e, source) from None


def to_object_lenient(node: DictConfig) -> Any:
    """Best effort tree for key listings in error messages (never raises)."""
    try:
        return OmegaConf.to_container(node, resolve=False)
    except Exception:
        return {}


def _plain(value: Any) -> Any:
    if isinstance(value, (DictConfig, ListConfig)):
        return OmegaConf.to_container(value)
    return value


def _full_key(e: Exception) -> str:
    return str(getattr(e, "full_key", "") or "")


def _first_line(e: Exception) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__


def merge_dict(node: DictConfig, data: dict, known: list[str], source: str, prefix: str = "") -> None:
    """Merge a nested dict (e.g. parsed YAML) key by key, so errors name the exact key.

    Descends into dataclass sections; any other value (including a dict for a dict-typed field)
    replaces the field. A section left unset (a required field such as `model`) is created from the dict.
    """
    for name, value in data.items():
        key = f"{prefix}{name}"
        if not isinstance(name, str):
            raise ConfigError(f"{source}: key {key!r} is not a string. Fix: use field names as keys.")
        parent = _get(node, prefix[:-1]) if prefix else node
        if isinstance(parent, DictConfig) and name in parent.keys() and OmegaConf.is_missing(parent, name):
            _assign(node, key, value, source, merge=isinstance(value, dict))
            continue
        target = _get(node, key)
        if isinstance(value, dict) and _is_section(target):
            merge_dict(node, value, known, source, prefix=key + ".")
        else:
            set_key(node, key, value, known, source)
