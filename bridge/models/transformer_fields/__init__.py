"""TransformerConfig's fields as data, following the installed Megatron-Core release.

Each supported release has a generated snapshot (`mcore_<major>_<minor>.py`, written by
scripts/dev/snapshot_transformer_fields.py). The installed release is read from the package metadata,
never by importing megatron.core, so this stays pure data. `TransformerFields` holds:

- every field of the installed release's snapshot, with that release's default and in its order;
- then MLATransformerConfig's own fields (multi-latent attention: q_lora_rank, kv_lora_rank, ...,
  `MLA_FIELDS`), passed to Megatron-Core only when multi_latent_attention is set;
- then the fields only other supported releases have, with their default there. Those are listed in
  `UNAVAILABLE_FIELDS`: the provider never passes them to TransformerConfig, and a non-default value
  is a ConfigError naming the field and the releases that have it (`unavailable_field_error`).

A release with no snapshot of its own (outside the tested range) uses the nearest older snapshot;
`transformer_config()` passes only the fields the live TransformerConfig declares.
"""

from __future__ import annotations

import dataclasses
from importlib import metadata
from types import ModuleType
from typing import Any

from bridge.models.transformer_fields import mcore_0_16, mcore_0_19

# Oldest first; the releases CI tests (pyproject's megatron-core range).
SNAPSHOTS: tuple[ModuleType, ...] = (mcore_0_16, mcore_0_19)
TESTED_RELEASES: tuple[str, ...] = tuple(s.RELEASE for s in SNAPSHOTS)


def _release_key(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int("".join(ch for ch in minor if ch.isdigit()) or 0)


def installed_release() -> str | None:
    """The installed megatron-core version (package metadata; no import), or None when absent."""
    try:
        return metadata.version("megatron-core")
    except metadata.PackageNotFoundError:
        return None


def snapshot_for(version: str | None) -> ModuleType:
    """The snapshot of `version`'s major.minor, else the nearest older one (else the oldest)."""
    if version is None:
        return SNAPSHOTS[-1]
    key = _release_key(version)
    older = [s for s in SNAPSHOTS if _release_key(s.RELEASE) <= key]
    return older[-1] if older else SNAPSHOTS[0]


INSTALLED_RELEASE: str | None = installed_release()
SNAPSHOT: ModuleType = snapshot_for(INSTALLED_RELEASE)
MEGATRON_CORE_VERSION: str = SNAPSHOT.RELEASE

EXCLUDED_FIELDS: dict[str, str] = dict(SNAPSHOT.EXCLUDED_FIELDS)
NARROWED_FIELDS: dict[str, str] = dict(SNAPSHOT.NARROWED_FIELDS)

# name -> the supported releases whose TransformerConfig has it (fields the installed one lacks).
UNAVAILABLE_FIELDS: dict[str, tuple[str, ...]] = {}
_specs: dict[str, tuple[str, Any]] = dict(SNAPSHOT.FIELDS) | dict(SNAPSHOT.MLA_FIELDS)
FIELD_CHOICES: dict[str, tuple] = dict(SNAPSHOT.FIELD_CHOICES)
BY_NAME_FIELDS: dict[str, str] = dict(SNAPSHOT.BY_NAME_FIELDS)
for _other in SNAPSHOTS:
    for _name, _spec in (_other.FIELDS | _other.MLA_FIELDS).items():
        if _name in SNAPSHOT.FIELDS or _name in SNAPSHOT.MLA_FIELDS or _name in SNAPSHOT.EXCLUDED_FIELDS:
            continue
        UNAVAILABLE_FIELDS[_name] = (*UNAVAILABLE_FIELDS.get(_name, ()), _other.RELEASE)
        _specs.setdefault(_name, _spec)
        if _name in _other.FIELD_CHOICES:
            FIELD_CHOICES.setdefault(_name, _other.FIELD_CHOICES[_name])
        if _name in _other.BY_NAME_FIELDS:
            BY_NAME_FIELDS.setdefault(_name, _other.BY_NAME_FIELDS[_name])

# The fields passed to TransformerConfig, in its order.
AVAILABLE_FIELDS: tuple[str, ...] = tuple(SNAPSHOT.FIELDS)
# The installed MLATransformerConfig's own fields (passed with multi_latent_attention).
MLA_FIELDS: tuple[str, ...] = tuple(SNAPSHOT.MLA_FIELDS)

_ANNOTATION_NAMES = {"int": int, "float": float, "bool": bool, "str": str, "list": list, "Any": Any}


def _field(name: str, annotation: str, default: Any) -> tuple[str, Any, dataclasses.Field]:
    tp = eval(annotation, {"__builtins__": {}}, _ANNOTATION_NAMES)  # e.g. "list[int] | None"
    if isinstance(default, (list, dict)):
        factory = type(default)
        return name, tp, dataclasses.field(default_factory=factory)
    return name, tp, dataclasses.field(default=default)


TransformerFields = dataclasses.make_dataclass(
    "TransformerFields",
    [_field(name, ann, default) for name, (ann, default) in _specs.items()],
    namespace={
        "__doc__": "TransformerConfig's fields as data; dtypes, enums and the activation by name.",
        "__module__": __name__,
    },
)

del _other, _name, _spec, _specs


def field_default(name: str) -> Any:
    """The default of a TransformerFields field (an empty list/dict for factory defaults)."""
    f = TransformerFields.__dataclass_fields__[name]
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


def unavailable_field_error(name: str, value: Any) -> str:
    """The message for a non-default value of a field the installed release does not have."""
    releases = ", ".join(UNAVAILABLE_FIELDS[name])
    return (
        f"model.{name}={value!r}: megatron-core {INSTALLED_RELEASE} has no TransformerConfig field "
        f"{name!r} (megatron-core {releases} has it). Fix: drop the setting, or install a megatron-core "
        "release that has the field"
    )
